#!/usr/bin/env bash
# a2a-nodes.sh: alltoall across NODES daemons on loopback TCP, one rank each, in one go: straight
# between the nodes over direct links (--pair-links 32, the default), relayed round the ring
# (--pair-links 0), and OpenMPI over TCP loopback with NODES ranks; f32, sizes what each rank
# sends (nccl-tests), busbw = algbw * (n-1)/n. Prints the three tables and the ratios.
#
# Usage: bench/a2a-nodes.sh [BUILD_DIR]   (BUILD: build-rel)
# Knobs: NODES=4 ITERS=10 WARMUP=3 MINSIZE=4K MAXSIZE=16M FACTOR=4 BENCH_TIMEOUT=900
# Exits non-zero when a bench fails (crash, bad exit status, #wrong > 0, empty table).
set -euo pipefail

BUILD=${1:-build-rel}
NODES=${NODES:-4}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
MINSIZE=${MINSIZE:-4K}
MAXSIZE=${MAXSIZE:-16M}
FACTOR=${FACTOR:-4}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-900}
PYTHON=/usr/bin/python3

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
. "$HERE/lib.sh"
((NODES >= 3)) || die "NODES must be 3 or more (two nodes exchange over the ring's link)"
bench_setup a2a-nodes "$BUILD"
MPI_BENCH="$BUILD/bench/mpi-coll-bench"
[[ -x $MPI_BENCH ]] || die "$MPI_BENCH: not built (install libopenmpi-dev and rebuild)"
command -v mpirun >/dev/null || die "mpirun: not found in PATH (install openmpi-bin)"

SWEEP=(-b "$MINSIZE" -e "$MAXSIZE" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1)
echo "# a2a-nodes.sh: alltoall f32, $NODES daemons of 1 rank, sizes $MINSIZE..$MAXSIZE x$FACTOR," \
    "iters $ITERS, warmup $WARMUP"

# Every daemon's ringd-bench of one job; the first one's table is printed.
ring_bench() {
    local job="a2a-nodes.$$.$1" k rc=0 others=()
    for ((k = 1; k < NODES; k++)); do
        timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/n$k.sock" --procs 1 \
            --world "$NODES" --job "$job" "${SWEEP[@]}" --op alltoall --dtype f32 >/dev/null &
        others+=($!)
    done
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/n0.sock" --procs 1 --world "$NODES" \
        --job "$job" "${SWEEP[@]}" --op alltoall --dtype f32 || rc=$?
    for k in "${others[@]}"; do
        wait "$k" || rc=$?
    done
    return "$rc"
}
for mode in direct relay; do
    args=(--pair-links 32)
    [[ $mode == direct ]] || args=(--pair-links 0)
    if start_ring "$NODES" "${args[@]}"; then
        run_table "$mode" "ringd, $NODES daemons, alltoall $mode (${args[*]})" ring_bench "$mode"
    else
        failed+=("$mode")
        : >"$tmp/$mode.txt"
    fi
    stop_all
done
run_table tcp "OpenMPI TCP loopback, $NODES ranks (pml ob1, btl tcp,self, if lo)" \
    timeout "$BENCH_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np "$NODES" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
    "$MPI_BENCH" -o alltoall "${SWEEP[@]}"

echo
echo "== busbw (GB/s) and ratios =="
awk '
    { f = (FILENAME == ARGV[1]) ? 1 : (FILENAME == ARGV[2]) ? 2 : 3 }
    $1 ~ /^[0-9]+$/ && NF >= 8 { bw[f, $1] = $7; if (f == 1) order[++n] = $1 }
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.2f", a / b) : "n/a" }
    END {
        printf "%10s %10s %10s %10s %14s %12s\n", "size", "direct", "relay", "mpi tcp",
               "direct/relay", "direct/tcp"
        for (i = 1; i <= n; i++) {
            s = order[i]
            printf "%10s %10.2f %10.2f %10.2f %14s %12s\n", s, bw[1, s], bw[2, s], bw[3, s],
                   ratio(bw[1, s], bw[2, s]), ratio(bw[1, s], bw[3, s])
        }
    }
' "$tmp/direct.txt" "$tmp/relay.txt" "$tmp/tcp.txt"

if ((${#failed[@]})); then
    echo "a2a-nodes.sh: failed: ${failed[*]}" >&2
    exit 1
fi
