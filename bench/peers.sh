#!/usr/bin/env bash
# peers.sh: ringd vs OpenMPI (shared memory, TCP loopback) f32-sum allreduce tables and target ratios.
#
# Usage: bench/peers.sh [BUILD_DIR]          (default: build)
# Knobs: ITERS=20 WARMUP=5 MINSIZE=4 MAXSIZE=64M FACTOR=4
# Exits non-zero when a bench fails (crash, bad exit status, #wrong > 0, empty table);
# a missed performance target is reported but is not a failure.
set -euo pipefail

BUILD=${1:-build}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
MINSIZE=${MINSIZE:-4}
MAXSIZE=${MAXSIZE:-64M}
FACTOR=${FACTOR:-4}

RINGD="$BUILD/daemon/ringd"
RINGCTL="$BUILD/client/ringctl"
RINGD_BENCH="$BUILD/bench/ringd-bench"
MPI_BENCH="$BUILD/bench/mpi-allreduce-bench"

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for f in "$RINGD" "$RINGCTL" "$RINGD_BENCH" "$MPI_BENCH"; do
    [[ -x $f ]] || die "$f: not found or not executable (build first, or pass BUILD_DIR)"
done
command -v mpirun >/dev/null || die "mpirun: not found in PATH (install openmpi-bin)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringd-peers.XXXXXX")
daemon_pid=

# peers.sh's own cleanup (below) replaces lib.sh's: it runs one daemon, not $pids.

# stop_daemon: terminate our ringd (if running) and reap it.
stop_daemon() {
    if [[ -n $daemon_pid ]]; then
        kill "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=
    fi
}

# cleanup: EXIT trap; runs on success, failure and interruption alike.
cleanup() {
    stop_daemon
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon: launch ringd on a private socket and wait (at most 10 s) until
# ringctl can reach it. Returns non-zero if it died or never answered.
start_daemon() {
    "$RINGD" --socket "$tmp/ringd.sock" --log-level warn &
    daemon_pid=$!
    local i
    for ((i = 0; i < 200; i++)); do
        if "$RINGCTL" --socket "$tmp/ringd.sock" status >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$daemon_pid" 2>/dev/null; then
            echo "peers.sh: ringd exited during start-up" >&2
            wait "$daemon_pid" 2>/dev/null || true
            daemon_pid=
            return 1
        fi
        sleep 0.05
    done
    echo "peers.sh: ringd did not answer 'ringctl status' within 10 s" >&2
    return 1
}


# mpi_bench BTL_ARGS...: the MPI bench on 2 local ranks with the given transport.
mpi_bench() {
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        --mca pml ob1 "$@" \
        "$MPI_BENCH" -b "$MINSIZE" -e "$MAXSIZE" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1
}

echo "# peers.sh: 2 procs, f32 sum allreduce, sizes $MINSIZE..$MAXSIZE x$FACTOR, iters $ITERS, warmup $WARMUP"

if start_daemon; then
    run_table ringd "ringd (ringd-bench, 2 procs, one daemon)" \
        "$RINGD_BENCH" --socket "$tmp/ringd.sock" --procs 2 \
        -b "$MINSIZE" -e "$MAXSIZE" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1 \
        --op allreduce --dtype f32 --redop sum
else
    failed+=(ringd)
    : >"$tmp/ringd.txt"
fi
# On a small machine an idle daemon still competes for cores; the MPI runs get the machine alone.
stop_daemon

run_table mpi-shm "OpenMPI shared memory (pml ob1, btl vader,self)" \
    mpi_bench --mca btl vader,self
run_table mpi-tcp "OpenMPI TCP loopback (pml ob1, btl tcp,self, if lo)" \
    mpi_bench --mca btl tcp,self --mca btl_tcp_if_include lo

echo
echo "== ratios (ringd / OpenMPI) =="
awk '
    # Table rows: size count type redop time(us) algbw busbw #wrong.
    # Which table: by argument position, so an empty file keeps the others in place.
    { f = (FILENAME == ARGV[1]) ? 1 : (FILENAME == ARGV[2]) ? 2 : 3 }
    $1 ~ /^[0-9]+$/ && NF >= 8 {
        t[f, $1] = $5; bw[f, $1] = $7; have[f, $1] = 1
        if (f == 1) order[++n] = $1
    }
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.3f", a / b) : "n/a" }
    END {
        printf "%12s %12s %12s %10s %12s %12s %10s\n", "size", "ringd busbw", "shm busbw", "bw ratio",
               "ringd us", "tcp us", "t ratio"
        for (i = 1; i <= n; i++) {
            s = order[i]
            if (!have[2, s] || !have[3, s]) continue
            printf "%12s %12.2f %12.2f %10s %12.2f %12.2f %10s\n", s, bw[1, s], bw[2, s],
                   ratio(bw[1, s], bw[2, s]), t[1, s], t[3, s], ratio(t[1, s], t[3, s])
        }
        print ""

        s = 67108864
        if (!have[1, s] || !have[2, s])
            printf "64 MiB busbw: row missing (%s) -> target (>= 1.00) not evaluated\n",
                   !have[1, s] ? (!have[2, s] ? "ringd, OpenMPI shm" : "ringd") : "OpenMPI shm"
        else if (bw[2, s] + 0 <= 0)
            printf "64 MiB busbw: OpenMPI shm busbw is 0 -> target (>= 1.00) not evaluated\n"
        else {
            r = bw[1, s] / bw[2, s]
            printf "64 MiB busbw: ringd %.2f GB/s vs OpenMPI shm %.2f GB/s -> ratio %.3f (target >= 1.00): %s\n",
                   bw[1, s], bw[2, s], r, (r >= 1.0 ? "met" : "NOT met")
        }

        s = 4
        if (!have[1, s] || !have[3, s])
            printf "4 B time: row missing (%s) -> target (<= 1.25) not evaluated\n",
                   !have[1, s] ? (!have[3, s] ? "ringd, OpenMPI tcp" : "ringd") : "OpenMPI tcp"
        else if (t[3, s] + 0 <= 0)
            printf "4 B time: OpenMPI tcp time is 0 -> target (<= 1.25) not evaluated\n"
        else {
            r = t[1, s] / t[3, s]
            printf "4 B time: ringd %.2f us vs OpenMPI tcp %.2f us -> ratio %.3f (target <= 1.25): %s\n",
                   t[1, s], t[3, s], r, (r <= 1.25 ? "met" : "NOT met")
        }
    }
' "$tmp/ringd.txt" "$tmp/mpi-shm.txt" "$tmp/mpi-tcp.txt"

if ((${#failed[@]})); then
    echo "peers.sh: failed: ${failed[*]}" >&2
    exit 1
fi
