#!/usr/bin/env bash
# scale.sh: N daemons on this machine (loopback, one redis-server), one client each, for each N
# of NODES; one row per N:
#   first_op_ms   from the last daemon answering to every rank having done its first step
#                 (ringd-train: ring formation, then one allreduce)
#   4B_us, 1M_us  allreduce (f32 sum) time at 4 B and 1 MiB (ringd-bench, rank 0's table)
#   ctl/op/node   control messages each node sent per op over that bench (announcements, orders;
#                 keepalives apart: ka/s/node, each node's keepalives per second, sent only to
#                 nodes it told nothing else for a quarter of the lease), the ops of
#                 both jobs counted; ctlB/op/node their bytes
#   sockets       open sockets per daemon while the job runs (the most of any daemon)
#   redis/s/d     Redis commands per second per daemon while the job idles (top level: scripts
#                 and XREADs); calls/s/d the commands those scripts ran inside
#   reform_ms     from one kill -9 of a daemon to every survivor's client stepping at N-1 ranks
#   rss_MB        resident memory per daemon while the job runs (the most of any daemon)
#
# Usage: bench/scale.sh [BUILD_DIR]   (default: build-rel, set up as a release build of ringd
#                                      when missing: never time an ASan build)
# Knobs: NODES="4 8 16 32 64" ITERS=50 WARMUP=5 IDLE_S=10 LEASE_MS=3000 BENCH_TIMEOUT=600
#        RINGD_FLAGS="" (extra flags for every daemon)
# Every daemon and client shares this machine's cores: at large N the times measure the machine
# as much as ringd (say so when quoting them); the counts (messages, sockets, Redis commands)
# do not depend on it. Exits non-zero when a step fails; targets are reported, not enforced.
set -euo pipefail

BUILD=${1:-build-rel}
NODES=${NODES:-4 8 16 32 64}
ITERS=${ITERS:-50}
WARMUP=${WARMUP:-5}
IDLE_S=${IDLE_S:-10}
LEASE_MS=${LEASE_MS:-3000}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
read -r -a RINGD_EXTRA <<<"${RINGD_FLAGS:-}"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"
bench_setup scale "$BUILD"
RINGD_TRAIN="$BUILD/bench/ringd-train"
[[ -x $RINGD_TRAIN ]] || die "$RINGD_TRAIN: not built"
ulimit -n 65536 2>/dev/null || true

now_ms() { date +%s%3N; }

# status_field NODE KEY[.KEY]: that field of `ringctl status --json` on NODE (0 when absent).
status_field() {
    "$RINGCTL" --socket "$tmp/$1.sock" status --json 2>/dev/null | "$PYTHON" -c "
import functools, json, sys
print(functools.reduce(lambda d, k: d.get(k, {}), '$2'.split('.'), json.load(sys.stdin)) or 0)" \
        2>/dev/null || echo 0
}

# redis_stats PORT: "<top-level commands> <calls inside scripts>" so far.
redis_stats() {
    redis-cli -h 127.0.0.1 -p "$1" info commandstats | tr -d '\r' | awk -F'[:=,]' '
        /^cmdstat_/ { name = substr($1, 9); calls = $3; sub(/\|.*/, "", name)
                      if (name == "evalsha" || name == "eval" || name == "xread") top += calls
                      else if (name != "info" && name != "config" && name != "ping" &&
                               name != "script" && name != "auth" && name != "select" &&
                               name != "client" && name != "hello" && name != "command")
                          inner += calls }
        END { printf "%d %d\n", top, inner }'
}

# wait_size N FILES... : until every FILE has a step line at size N (60 s at most).
wait_size() {
    local n=$1 end f ok
    shift
    end=$(($(now_ms) + 60000))
    while (($(now_ms) < end)); do
        ok=1
        for f in "$@"; do
            grep -q " size $n gen " "$f" 2>/dev/null || { ok=0; break; }
        done
        ((ok)) && return 0
        sleep 0.02
    done
    return 1
}

for n in $NODES; do
    ((n >= 3 && n <= 256)) || die "NODES: $n is not 3..256 (RD_RING_NODES_MAX; daemons are named n0, n1, ...)"
done
printf '# scale.sh: %s daemons on %s cores, lease %s ms, %s iters\n' "$NODES" "$(nproc)" \
    "$LEASE_MS" "$ITERS"
printf '%6s %12s %10s %10s %12s %14s %10s %8s %10s %10s %10s %8s\n' N first_op_ms 4B_us 1M_us \
    ctl/op/node ctlB/op/node ka/s/node sockets redis/s/d calls/s/d reform_ms rss_MB

for n in $NODES; do
    stop_all
    start_ring "$n" --lease-ttl "$LEASE_MS" "${RINGD_EXTRA[@]}" || die "$n daemons did not start"
    redis_port=$ring_redis_port
    daemons=("${pids[@]:1}")
    t_up=$(now_ms)

    # --- ring formation and a long-lived job: ringd-train, one rank per daemon ---
    train=()
    for ((i = 0; i < n; i++)); do
        "$RINGD_TRAIN" --socket "$tmp/n$i.sock" --job "scale-train.$n" --world "$n" \
            --min-size 1 --steps 1000000 --sleep-ms 100 --dim 4 \
            >"$tmp/train.$n.$i.out" 2>"$tmp/train.$n.$i.err" &
        train+=($!)
        pids+=($!) # stopped by stop_all on the way out, also after a die
    done
    outs=()
    for ((i = 0; i < n; i++)); do outs+=("$tmp/train.$n.$i.out"); done
    wait_size "$n" "${outs[@]}" || die "N=$n: the training job did not step at size $n"
    first_op=$(($(now_ms) - t_up))

    # sockets and RSS while the job runs
    socks=0 rss=0
    for p in "${daemons[@]}"; do
        s=$(find /proc/"$p"/fd -lname 'socket:*' 2>/dev/null | wc -l)
        r=$(awk '/^VmRSS/ { print $2 }' /proc/"$p"/status)
        ((s > socks)) && socks=$s
        ((r > rss)) && rss=$r
    done

    # Redis at steady state: the job idles between steps
    read -r top0 inner0 < <(redis_stats "$redis_port")
    sleep "$IDLE_S"
    read -r top1 inner1 < <(redis_stats "$redis_port")
    redis_per=$("$PYTHON" -c "print(f'{($top1 - $top0) / $IDLE_S / $n:.2f}')")
    calls_per=$("$PYTHON" -c "print(f'{($inner1 - $inner0) / $IDLE_S / $n:.1f}')")

    # --- 4 B and 1 MiB allreduce, and the control messages per op ---
    declare -A ctl0=() cb0=() ops0=() ka0=()
    t_bench0=$(now_ms)
    for ((i = 0; i < n; i++)); do
        ka0[$i]=$(status_field "n$i" keepalives_sent)
        ctl0[$i]=$(status_field "n$i" control_sent)
        cb0[$i]=$(status_field "n$i" control_bytes_sent)
        ops0[$i]=$(status_field "n$i" ops.completed)
    done
    bench=()
    for ((i = 1; i < n; i++)); do
        timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/n$i.sock" --procs 1 --world "$n" \
            --job "scale-bench.$n" -b 4 -e 1M -f 262144 -n "$ITERS" -w "$WARMUP" -c 1 \
            --op allreduce --dtype f32 --redop sum >/dev/null 2>"$tmp/bench.$n.$i.err" &
        bench+=($!)
        pids+=($!)
    done
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/n0.sock" --procs 1 --world "$n" \
        --job "scale-bench.$n" -b 4 -e 1M -f 262144 -n "$ITERS" -w "$WARMUP" -c 1 \
        --op allreduce --dtype f32 --redop sum >"$tmp/bench.$n.txt" 2>"$tmp/bench.$n.0.err" ||
        die "N=$n: ringd-bench failed: $(tail -3 "$tmp/bench.$n.0.err")"
    for p in "${bench[@]}"; do wait "$p" || die "N=$n: a ringd-bench rank failed"; done
    t4=$(awk '$1 == 4 && NF >= 8 { print $5 }' "$tmp/bench.$n.txt")
    t1m=$(awk '$1 == 1048576 && NF >= 8 { print $5 }' "$tmp/bench.$n.txt")
    wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { w += $8 } END { print w + 0 }' "$tmp/bench.$n.txt")
    ((wrong == 0)) || die "N=$n: $wrong wrong results"
    ctl=0 cb=0 ops=0 ka=0
    for ((i = 0; i < n; i++)); do
        ka=$((ka + $(status_field "n$i" keepalives_sent) - ka0[$i]))
        ctl=$((ctl + $(status_field "n$i" control_sent) - ctl0[$i]))
        cb=$((cb + $(status_field "n$i" control_bytes_sent) - cb0[$i]))
        ops=$((ops + $(status_field "n$i" ops.completed) - ops0[$i]))
    done
    # ops counts each node's ops (the training job's steps too): per op per node
    ctl_per=$("$PYTHON" -c "print(f'{$ctl / max($ops, 1):.2f}')")
    cb_per=$("$PYTHON" -c "print(f'{$cb / max($ops, 1):.0f}')")
    ka_per=$("$PYTHON" -c "print(f'{$ka / $n / max($(now_ms) - $t_bench0, 1) * 1000:.1f}')")

    # --- one kill -9: the last daemon ---
    victim=${daemons[$((n - 1))]}
    t_kill=$(now_ms)
    kill -9 "$victim"
    wait "$victim" 2>/dev/null || true # reaped here: bash says nothing of its signal
    reform=$(
        if wait_size $((n - 1)) "${outs[@]:0:$((n - 1))}"; then echo $(($(now_ms) - t_kill)); else echo timeout; fi
    )

    for p in "${train[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${train[@]}"; do wait "$p" 2>/dev/null || true; done
    printf '%6s %12s %10s %10s %12s %14s %10s %8s %10s %10s %10s %8s\n' "$n" "$first_op" "$t4" \
        "$t1m" "$ctl_per" "$cb_per" "$ka_per" "$socks" "$redis_per" "$calls_per" "$reform" \
        $((rss / 1024))
done
stop_all
