#!/usr/bin/env bash
# daemon-cpu.sh: the daemon's own CPU time: idle with a connected client, and per 4-byte
# allreduce on one node (2 ranks) and across two nodes (1 rank each).
#
# Usage: bench/daemon-cpu.sh [BUILD_DIR]   (default: build-rel, set up as a release build)
# Knobs: IDLE_S=10 OPS=20000
# CPU time is user + system from /proc/PID/stat (the daemon's threads included). Per op, it
# counts everything the daemon spends while the ops run, its polling of the clients' rings
# (--poll-us) included. Target: idle under 1% of a core. Exits non-zero when a run fails.
set -euo pipefail

BUILD=${1:-build-rel}
IDLE_S=${IDLE_S:-10}
OPS=${OPS:-20000}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"
bench_setup daemon-cpu "$BUILD"

# cpu_ticks PID: user + system clock ticks of process PID so far.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
HZ=$(getconf CLK_TCK)

echo "# daemon-cpu.sh: ringd build $BUILD; $(nproc) cores; CPU = user + system of the daemon"

# --- idle: one daemon, one client connected and doing nothing --------------------------------
"$RINGD" --socket "$tmp/idle.sock" --log-level warn 2>>"$tmp/ringd-idle.log" &
pids+=($!)
idle_pid=$!
wait_for "$idle_pid" "ringd" "$RINGCTL" --socket "$tmp/idle.sock" status || die "ringd did not start"
RINGD_SOCKET="$tmp/idle.sock" RINGD_LIBRARY="$LIBRINGD" PYTHONPATH="$ROOT/python" \
    "$PYTHON" -c 'import sys, time, ringd
s = ringd.Session(job="idle", world_size=1)
print("connected", flush=True)
time.sleep(float(sys.argv[1]) + 2)
s.close()' "$IDLE_S" >"$tmp/idle-client.txt" &
pids+=($!)
wait_for "$!" "the idle client" grep -q connected "$tmp/idle-client.txt" || die "the idle client did not connect"
sleep 1 # the daemon's polling after the Welcome ends within --poll-us
t0=$(cpu_ticks "$idle_pid")
sleep "$IDLE_S"
t1=$(cpu_ticks "$idle_pid")
awk -v d=$((t1 - t0)) -v hz="$HZ" -v s="$IDLE_S" 'BEGIN {
    pct = 100 * d / hz / s
    printf "idle, one client connected, %d s: %.3f s of CPU = %.2f%% of a core (target < 1%%): %s\n",
           s, d / hz, pct, pct < 1 ? "met" : "NOT met" }'
stop_all

# --- per op: 4-byte allreduces --------------------------------------------------------------
# one_node: OPS allreduces of 4 B by 2 ranks of one daemon; its CPU over the run per op.
one_node() {
    "$RINGD" --socket "$tmp/one.sock" --log-level warn 2>>"$tmp/ringd-one.log" &
    pids+=($!)
    local pid=$!
    wait_for "$pid" "ringd" "$RINGCTL" --socket "$tmp/one.sock" status || die "ringd did not start"
    local t0 t1
    t0=$(cpu_ticks "$pid")
    "$RINGD_BENCH" --socket "$tmp/one.sock" --procs 2 -b 4 -e 4 -n "$OPS" -w 100 -c 0 >"$tmp/one.txt" ||
        die "ringd-bench (one node) failed"
    t1=$(cpu_ticks "$pid")
    grep -v '^#' "$tmp/one.txt"
    awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$OPS" 'BEGIN {
        printf "one node, 2 ranks, 4 B allreduce: daemon CPU %.2f us per op (%d ops)\n", d / hz / n * 1e6, n }'
    stop_all
}

# two_nodes: the same by 1 rank on each of two daemons; their mean CPU per op.
two_nodes() {
    start_ring || die "the two-node ring did not start"
    local a=${pids[1]} b=${pids[2]} t0 t1 pid_b rc=0 # start_ring: redis-server, ringd a, ringd b
    t0=$(($(cpu_ticks "$a") + $(cpu_ticks "$b")))
    "$RINGD_BENCH" --socket "$tmp/b.sock" --procs 1 --world 2 --job cpu -b 4 -e 4 -n "$OPS" -w 100 \
        -c 0 >/dev/null &
    pid_b=$!
    "$RINGD_BENCH" --socket "$tmp/a.sock" --procs 1 --world 2 --job cpu -b 4 -e 4 -n "$OPS" -w 100 \
        -c 0 >"$tmp/two.txt" || rc=$?
    wait "$pid_b" || rc=$?
    ((rc == 0)) || die "ringd-bench (two nodes) failed"
    t1=$(($(cpu_ticks "$a") + $(cpu_ticks "$b")))
    grep -v '^#' "$tmp/two.txt"
    awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$OPS" 'BEGIN {
        printf "two nodes, 1 rank each, 4 B allreduce: CPU per daemon %.2f us per op (%d ops)\n", d / hz / n / 2 * 1e6, n }'
    stop_all
}

one_node
two_nodes
