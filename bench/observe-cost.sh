#!/usr/bin/env bash
# observe-cost.sh: what metrics and the timeline cost a collective. One node, 2 ranks, f32 sum
# allreduce at 4 B and 64 MiB, run alternately on two daemons of one build: "off" (no
# --metrics-listen, nothing recorded) and "on" (--metrics-listen scraped every second, a
# `ringctl timeline` recording the job, and RINGD_TIMELINE in both ranks writing their traces).
# The per-op counting into the jobs' series runs in both (it cannot be turned off): "off" is what
# every ringd pays; on - off is what serving, scraping and the timelines add.
#
# Usage: bench/observe-cost.sh [BUILD_DIR]   (default: build-rel, set up as a release build)
# Knobs: RUNS=5 ITERS_SMALL=2000 ITERS_LARGE=20 SIZES="4 64M"
#        ON="record client": what "on" adds to the scraped metrics (record: a ringctl timeline
#        recording; client: RINGD_TIMELINE in the ranks); ON="" measures the metrics alone
# Prints each run's median time per op (ringd-bench's, slowest rank), then the medians over the
# runs and on - off. Targets: under 1 us more at 4 B, under 3% more at 64 MiB.
set -euo pipefail

BUILD=${1:-build-rel}
RUNS=${RUNS:-5}
ITERS_SMALL=${ITERS_SMALL:-2000}
ITERS_LARGE=${ITERS_LARGE:-20}
SIZES=${SIZES:-4 64M}
ON=${ON-record client}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"
bench_setup observe-cost "$BUILD"

"$RINGD" --socket "$tmp/off.sock" --log-level warn 2>>"$tmp/ringd-off.log" &
pids+=($!)
wait_for "$!" "ringd off" "$RINGCTL" --socket "$tmp/off.sock" status || die "ringd off did not start"
"$RINGD" --socket "$tmp/on.sock" --metrics-listen 127.0.0.1:0 --log-level warn \
    2>>"$tmp/ringd-on.log" &
pids+=($!)
wait_for "$!" "ringd on" "$RINGCTL" --socket "$tmp/on.sock" status || die "ringd on did not start"
metrics=$("$RINGCTL" --socket "$tmp/on.sock" status --json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["metrics"])')
# Prometheus's way: a scrape every second, for as long as the script runs.
"$PYTHON" -c 'import sys, time, urllib.request
while True:
    urllib.request.urlopen("http://" + sys.argv[1] + "/metrics").read()
    time.sleep(1)' "$metrics" &
pids+=($!)

echo "# observe-cost.sh: ringd build $BUILD; $(nproc) cores; $RUNS runs, off and on alternately"
echo "# on: /metrics at $metrics scraped every 1 s; and: ${ON:-nothing else} (record: ringctl timeline; client: RINGD_TIMELINE in both ranks)"

# one MODE SIZE ITERS RUN: the median time per op (us) of one ringd-bench run.
one() {
    local mode=$1 size=$2 iters=$3 run=$4 job="obs-$1-$2-$4" rec=""
    local env=(RINGD_SOCKET="$tmp/$mode.sock")
    if [[ $mode == on && " $ON " == *" record "* ]]; then
        "$RINGCTL" --socket "$tmp/on.sock" timeline --job "$job" --seconds 3600 \
            --out "$tmp/$job.json" 2>/dev/null &
        rec=$!
        sleep 0.2
    fi
    if [[ $mode == on && " $ON " == *" client "* ]]; then
        env+=(RINGD_TIMELINE="$tmp/$job.%r.client.json")
    fi
    env "${env[@]}" "$RINGD_BENCH" --procs 2 --job "$job" -b "$size" -e "$size" -n "$iters" \
        -w $((iters / 10 + 1)) >"$tmp/$job.txt" || die "ringd-bench $job failed: $(cat "$tmp/$job.txt")"
    if [[ -n $rec ]]; then # the recording ends with its asker
        kill "$rec" 2>/dev/null || true
        wait "$rec" 2>/dev/null || true
    fi
    awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $5 }' "$tmp/$job.txt"
}

declare -A times
for size in $SIZES; do
    iters=$ITERS_SMALL
    [[ $size == 64M ]] && iters=$ITERS_LARGE
    for ((r = 1; r <= RUNS; r++)); do
        for mode in off on; do
            t=$(one "$mode" "$size" "$iters" "$r")
            times[$mode-$size]+="$t "
            echo "size $size run $r $mode: $t us"
        done
    done
done

echo
echo "# medians over $RUNS runs (us per op)"
printf "%-6s %12s %12s %12s %8s\n" size off on on-off ratio
for size in $SIZES; do
    "$PYTHON" - "$size" ${times[off-$size]} -- ${times[on-$size]} <<'EOF'
import statistics, sys
size, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
off = statistics.median(float(x) for x in rest[:cut])
on = statistics.median(float(x) for x in rest[cut + 1:])
print(f"{size:<6} {off:12.2f} {on:12.2f} {on - off:+12.2f} {on / off:8.3f}")
EOF
done
