#!/usr/bin/env bash
# coll-peers.sh: ringd's reducescatter, allgatherv or alltoall against OpenMPI's, side by side:
# ringd on one daemon (2 procs) and on two daemons over loopback TCP (1 proc each), OpenMPI
# over shared memory and over TCP loopback; f32, sizes the whole op's (nccl-tests), busbw
# algbw * (n-1)/n. Prints the four tables and the issue's target ratios.
#
# Usage: bench/coll-peers.sh OP [BUILD_DIR]  OP: reducescatter|allgatherv|alltoall (BUILD: build-rel)
# Knobs: ITERS=20 WARMUP=5 MINSIZE=4 MAXSIZE=64M FACTOR=4 BENCH_TIMEOUT=900
# Exits non-zero when a bench fails (crash, bad exit status, #wrong > 0, empty table); a missed
# performance target is reported, not a failure.
set -euo pipefail

OP=${1:?usage: bench/coll-peers.sh reducescatter|allgatherv|alltoall [BUILD_DIR]}
BUILD=${2:-build-rel}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
MINSIZE=${MINSIZE:-4}
MAXSIZE=${MAXSIZE:-64M}
FACTOR=${FACTOR:-4}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-900}
PYTHON=/usr/bin/python3

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
. "$HERE/lib.sh"
case $OP in
reducescatter | allgatherv | alltoall) ;;
*) die "OP is reducescatter, allgatherv or alltoall, not '$OP'" ;;
esac
bench_setup coll-peers "$BUILD"
MPI_BENCH="$BUILD/bench/mpi-coll-bench"
[[ -x $MPI_BENCH ]] || die "$MPI_BENCH: not built (install libopenmpi-dev and rebuild)"
command -v mpirun >/dev/null || die "mpirun: not found in PATH (install openmpi-bin)"

SWEEP=(-b "$MINSIZE" -e "$MAXSIZE" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1)
echo "# coll-peers.sh: $OP f32, 2 ranks, sizes $MINSIZE..$MAXSIZE x$FACTOR, iters $ITERS, warmup $WARMUP"

# --- ringd on one daemon -----------------------------------------------------------------------
"$RINGD" --socket "$tmp/one.sock" --log-level warn 2>>"$tmp/ringd-one.log" &
pids+=($!)
if wait_for "$!" "ringd" "$RINGCTL" --socket "$tmp/one.sock" status; then
    run_table one "ringd, one daemon (ringd-bench, 2 procs)" \
        timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/one.sock" --procs 2 "${SWEEP[@]}" \
        --op "$OP" --dtype f32 --redop sum
else
    failed+=(one)
    : >"$tmp/one.txt"
fi
stop_all # an idle daemon still competes for the cores

# --- ringd on two daemons ----------------------------------------------------------------------
ring_bench() {
    local job="coll-peers.$$" rc_a=0 rc_b=0 pid_b
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/b.sock" --procs 1 --world 2 \
        --job "$job" "${SWEEP[@]}" --op "$OP" --dtype f32 --redop sum >/dev/null &
    pid_b=$!
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/a.sock" --procs 1 --world 2 \
        --job "$job" "${SWEEP[@]}" --op "$OP" --dtype f32 --redop sum || rc_a=$?
    wait "$pid_b" || rc_b=$?
    return $((rc_a > rc_b ? rc_a : rc_b))
}
if start_ring; then
    run_table two "ringd, two daemons on loopback TCP (ringd-bench, 1 proc each)" ring_bench
else
    failed+=(two)
    : >"$tmp/two.txt"
fi
stop_all

# --- OpenMPI -----------------------------------------------------------------------------------
mpi_bench() {
    timeout "$BENCH_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        --mca pml ob1 "$@" "$MPI_BENCH" -o "$OP" "${SWEEP[@]}"
}
run_table shm "OpenMPI shared memory (pml ob1, btl vader,self)" mpi_bench --mca btl vader,self
run_table tcp "OpenMPI TCP loopback (pml ob1, btl tcp,self, if lo)" \
    mpi_bench --mca btl tcp,self --mca btl_tcp_if_include lo

echo
echo "== ratios =="
awk -v op="$OP" '
    # Table rows: size count type redop time(us) algbw busbw #wrong; tables by argument position.
    { f = (FILENAME == ARGV[1]) ? 1 : (FILENAME == ARGV[2]) ? 2 : (FILENAME == ARGV[3]) ? 3 : 4 }
    $1 ~ /^[0-9]+$/ && NF >= 8 { bw[f, $1] = $7; have[f, $1] = 1; if (f == 1) order[++n] = $1 }
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
    END {
        printf "%10s %10s %10s %10s %10s %12s %12s\n", "size", "one node", "two nodes", "mpi shm",
               "mpi tcp", "one/shm", "two/tcp"
        for (i = 1; i <= n; i++) {
            s = order[i]
            printf "%10s %10.2f %10.2f %10.2f %10.2f %12s %12s\n", s, bw[1, s], bw[2, s], bw[3, s],
                   bw[4, s], ratio(bw[1, s], bw[3, s]), ratio(bw[2, s], bw[4, s])
        }
        print ""
        split("1048576 67108864", sizes, " ")
        for (k = 1; k <= 2; k++) {
            s = sizes[k]
            want = (s == 67108864 && op != "alltoall") ? 1.2 : 1.0
            if (!have[2, s] || !have[4, s]) { printf "%s B, two nodes: a row is missing\n", s; continue }
            r = (bw[4, s] > 0) ? bw[2, s] / bw[4, s] : 0
            printf "%s B, two nodes vs OpenMPI TCP: %.2f / %.2f GB/s busbw = %.2f (target >= %.1f): %s\n",
                   s, bw[2, s], bw[4, s], r, want, (r >= want ? "met" : "NOT met")
        }
        worst = ""
        for (i = 1; i <= n; i++) {
            s = order[i]
            if (s + 0 < 262144 || !have[3, s]) continue
            r = (bw[3, s] > 0) ? bw[1, s] / bw[3, s] : 0
            if (worst == "" || r < worst) { worst = r; at = s }
        }
        if (worst != "")
            printf "one node vs OpenMPI shm from 256 KiB: worst ratio %.2f at %s B (target >= 1.0): %s\n",
                   worst, at, (worst >= 1.0 ? "met" : "NOT met")
    }
' "$tmp/one.txt" "$tmp/two.txt" "$tmp/shm.txt" "$tmp/tcp.txt"

if ((${#failed[@]})); then
    echo "coll-peers.sh: failed: ${failed[*]}" >&2
    exit 1
fi
