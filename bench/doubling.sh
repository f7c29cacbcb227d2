#!/usr/bin/env bash
# doubling.sh: allreduce, broadcast, allgather and reducescatter by recursive doubling over direct
# links against the ring, on N daemons of this machine (loopback, 1 rank each), side by side in
# each run: for each op, N and size, the time with --doubling-bytes 0 (every op round the ring)
# and with the size allowed (recursive doubling; a binomial tree for broadcast, recursive halving
# for reducescatter), each on a fresh ring; medians of RUNS and their ratio. An allgather's size
# is each rank's (ringd-bench's -b), its result N times that; a reducescatter's is its whole
# vector.
#
# Usage: bench/doubling.sh [BUILD_DIR]   (default: build-rel, set up as a release build)
# Knobs: RUNS=3 OPS="allreduce broadcast allgather reducescatter" NODES="3 4 8" SIZES="16K 32K 64K 256K"
# ITERS=200; --direct-bytes 0 on every
# daemon, so that the sizes reach the data plane. RINGD_BENCH_PREBUILT=DIR (bench/lib.sh).
# Exits non-zero when a run fails (#wrong > 0 included); the ratios are only reported.
set -euo pipefail

BUILD=${1:-build-rel}
RUNS=${RUNS:-3}
OPS=${OPS:-allreduce broadcast allgather reducescatter}
NODES=${NODES:-3 4 8}
SIZES=${SIZES:-16K 32K 64K 256K}
ITERS=${ITERS:-200}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}

. "$HERE/lib.sh"
bench_setup doubling "$BUILD"

# sock N K: the socket of daemon K of a ring of N, as start_ring names them.
sock() {
    if (($1 == 2)); then
        if (($2 == 0)); then echo "$tmp/a.sock"; else echo "$tmp/b.sock"; fi
    else
        echo "$tmp/n$2.sock"
    fi
}

# ranks OP N SIZE: ringd-bench OP on every daemon of a ring of N, one rank each; rank 0's time
# (us).
ranks() {
    local op=$1 n=$2 size=$3 k rc=0 others=()
    for ((k = n - 1; k > 0; k--)); do
        "$RINGD_BENCH" --socket "$(sock "$n" "$k")" --procs 1 --world "$n" --job dbl -b "$size" \
            -e "$size" -n "$ITERS" -w 20 -c 1 --op "$op" >/dev/null &
        others+=($!)
    done
    "$RINGD_BENCH" --socket "$(sock "$n" 0)" --procs 1 --world "$n" --job dbl -b "$size" \
        -e "$size" -n "$ITERS" -w 20 -c 1 --op "$op" >"$tmp/row.txt" || rc=$?
    for k in "${others[@]}"; do wait "$k" || rc=$?; done
    ((rc == 0)) || die "ringd-bench failed ($op, N $n, $size)"
    grep -v '^#' "$tmp/row.txt" | awk 'NF >= 8 { if ($8 != 0) exit 1; print $5; exit }' ||
        die "$op, N $n, $size: wrong results"
}

# one RUN OP N SIZE MODE DOUBLING: a fresh ring of N (in this shell, so that the traps stop it);
# appends "OP N SIZE MODE RUN time_us" to $tmp/results.
one() {
    local run=$1 op=$2 n=$3 size=$4 mode=$5 dbl=$6 t
    start_ring "$n" --direct-bytes 0 --doubling-bytes "$dbl" || die "a ring of $n did not start"
    t=$(ranks "$op" "$n" "$size") || die "$op, N $n, $size ($mode) failed"
    [[ -n $t ]] || die "$op, N $n, $size ($mode): no time in rank 0's table"
    stop_all
    echo "$op $n $size $mode $run $t" >>"$tmp/results"
}

echo "# doubling.sh: N daemons on loopback, 1 rank each, f32 (sum), iters $ITERS;" \
    "$(nproc) cores; runs $RUNS; --direct-bytes 0"
for run in $(seq 1 "$RUNS"); do
    for op in $OPS; do
        for n in $NODES; do
            for size in $SIZES; do
                one "$run" "$op" "$n" "$size" ring 0
                one "$run" "$op" "$n" "$size" doubling 16M
            done
        done
    done
done
awk '
function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ key = $1 " " $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
  if ($4 == "ring") r[key, ++nr[key]] = $6; else d[key, ++nd[key]] = $6 }
END {
    printf "%-10s %4s %8s %14s %16s %8s   %s\n", "op", "N", "size", "ring_us(med)", "doubling_us(med)", "ratio", "runs ring / doubling"
    for (i = 1; i <= nk; i++) {
        key = order[i]; split(key, K, " ")
        delete a; delete b; sr = ""; sd = ""
        for (j = 1; j <= nr[key]; j++) { a[j] = r[key, j]; sr = sr sprintf(" %.0f", r[key, j]) }
        for (j = 1; j <= nd[key]; j++) { b[j] = d[key, j]; sd = sd sprintf(" %.0f", d[key, j]) }
        mr = median(a, nr[key]); md = median(b, nd[key])
        printf "%-10s %4s %8s %14.1f %16.1f %8.2f  %s /%s\n", K[1], K[2], K[3], mr, md, md / mr, sr, sd
    }
}' "$tmp/results"
