#!/usr/bin/env bash
# encrypt-cost.sh: what --encrypt costs on a 2-node ring (2 daemons on loopback, 1 rank each):
# the 4 B allreduce time and the 64 MiB allreduce busbw with and without it, side by side in
# each run, and the daemons' extra CPU per GB that crosses a link sealed.
#
# Usage: bench/encrypt-cost.sh [BUILD_DIR]   (default: build-rel, set up as a release build)
# Knobs: RUNS=3 SMALL_ITERS=2000 BIG_ITERS=10; RINGD_BENCH_PREBUILT=DIR (bench/lib.sh) measures a
# bundle's binaries (scripts/gpu-bundle), as on a lent GPU machine: nothing installed or built
# Targets (issue 31): busbw with --encrypt >= 0.7x without; 4 B time <= 1.2x; medians of RUNS.
# CPU is user + system of both daemons from /proc/PID/stat over the 64 MiB allreduces; each
# daemon sends 64 MiB per op (reduce-scatter and allgather), sealed by it and opened by the other.
# Exits non-zero when a run fails; a missed target is reported but is not a failure.
set -euo pipefail

BUILD=${1:-build-rel}
RUNS=${RUNS:-3}
SMALL_ITERS=${SMALL_ITERS:-2000}
BIG_ITERS=${BIG_ITERS:-10}
BIG=$((64 << 20))

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}

. "$HERE/lib.sh"
bench_setup encrypt-cost "$BUILD"

cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
HZ=$(getconf CLK_TCK)

# both_ranks ARGS...: ringd-bench on both daemons (1 rank each); rank 0's table row on stdout.
both_ranks() {
    local pid_b rc=0
    "$RINGD_BENCH" --socket "$tmp/b.sock" --procs 1 --world 2 --job enc "$@" >/dev/null &
    pid_b=$!
    "$RINGD_BENCH" --socket "$tmp/a.sock" --procs 1 --world 2 --job enc "$@" >"$tmp/row.txt" || rc=$?
    wait "$pid_b" || rc=$?
    ((rc == 0)) || die "ringd-bench failed ($*)"
    grep -v '^#' "$tmp/row.txt" | awk 'NF >= 8 { print; exit }'
}

# one_mode RUN MODE [RINGD_ARG...]: a fresh ring; prints "RUN MODE t4_us busbw64 cpu_ticks".
one_mode() {
    local run=$1 mode=$2 small big a b t0 t1
    shift 2
    start_ring 2 "$@" || die "the two-node ring ($mode) did not start"
    a=${pids[1]} b=${pids[2]}
    small=$(both_ranks -b 4 -e 4 -n "$SMALL_ITERS" -w 100 -c 1)
    t0=$(($(cpu_ticks "$a") + $(cpu_ticks "$b")))
    big=$(both_ranks -b "$BIG" -e "$BIG" -n "$BIG_ITERS" -w 2 -c 1)
    t1=$(($(cpu_ticks "$a") + $(cpu_ticks "$b")))
    # rows: size count type redop time algbw busbw #wrong; #wrong must be 0
    awk -v s="$small" -v b="$big" -v run="$run" -v mode="$mode" -v d=$((t1 - t0)) 'BEGIN {
        ns = split(s, S); nb = split(b, B)
        if (ns < 8 || nb < 8 || S[8] != 0 || B[8] != 0) { print "bad rows: " s " / " b > "/dev/stderr"; exit 1 }
        printf "%s %s %.2f %.3f %d\n", run, mode, S[5], B[7], d }' || die "ringd-bench rows unusable"
    stop_all
}

echo "# encrypt-cost.sh: 2 daemons on loopback, 1 rank each, f32 sum; $(nproc) cores; runs $RUNS"
echo "# cipher: $(grep -q -m1 ' aes' /proc/cpuinfo && echo 'AES-256-GCM (AES-NI)' || echo 'ChaCha20-Poly1305')"
results=()
for run in $(seq 1 "$RUNS"); do
    results+=("$(one_mode "$run" clear)")
    results+=("$(one_mode "$run" encrypt --encrypt)")
done
printf '%s\n' "${results[@]}" | awk -v hz="$HZ" -v big="$BIG" -v iters="$BIG_ITERS" -v warm=2 '
function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ run = $1; mode = $2; t[mode, run] = $3; bw[mode, run] = $4; cpu[mode, run] = $5 / hz; runs = run > runs ? run : runs }
END {
    printf "%4s %12s %12s %7s %14s %14s %7s %10s %10s\n", "run", "4B_clear_us", "4B_enc_us", "ratio",
           "64M_clear_GBs", "64M_enc_GBs", "ratio", "cpu_clear", "cpu_enc"
    for (r = 1; r <= runs; r++) {
        tr[r] = t["encrypt", r] / t["clear", r]; br[r] = bw["encrypt", r] / bw["clear", r]
        # CPU seconds of both daemons per GB that crossed a link: each sends big per op
        gb = 2 * (iters + warm) * big / 1e9
        cc[r] = cpu["clear", r] / gb; ce[r] = cpu["encrypt", r] / gb; dc[r] = ce[r] - cc[r]
        printf "%4d %12.2f %12.2f %7.2f %14.3f %14.3f %7.2f %10.3f %10.3f\n", r, t["clear", r],
               t["encrypt", r], tr[r], bw["clear", r], bw["encrypt", r], br[r], cc[r], ce[r]
    }
    mt = median(tr, runs); mb = median(br, runs); md = median(dc, runs)
    printf "cpu_*: CPU seconds of both daemons per GB crossing a link (64 MiB allreduces, warm-up included)\n"
    printf "median 4 B time ratio (encrypt / clear): %.2f (target <= 1.2): %s\n", mt, (mt <= 1.2 ? "met" : "NOT met")
    printf "median 64 MiB busbw ratio (encrypt / clear): %.2f (target >= 0.7): %s\n", mb, (mb >= 0.7 ? "met" : "NOT met")
    printf "median CPU the sealing costs: %.3f s per GB crossing a link (sealed by one daemon, opened by the other)\n", md
}'
