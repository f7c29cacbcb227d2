# Shared by the bench/*.sh scripts (sourced): running one
# benchmark's table, and the background processes ($pids) and scratch directory ($tmp) of a run.

failed=()

# die MSG...: print to stderr and exit 2 (the EXIT trap still cleans up).
die() {
    echo "$(basename "$0"): $*" >&2
    exit 2
}

# run_table NAME TITLE CMD...: print TITLE, run CMD with its table shown live and
# saved to $tmp/NAME.txt, and record NAME as failed on a bad exit status, an
# empty table or any row with #wrong > 0.
run_table() {
    local name=$1 title=$2
    shift 2
    local out="$tmp/$name.txt" rc=0
    echo
    echo "== $title =="
    "$@" | tee "$out" || rc=$?
    local verdict
    verdict=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { rows++; if ($8 + 0 > 0) bad++ }
                   END { if (!rows) print "no result rows"; else if (bad) print bad " row(s) with #wrong > 0" }' "$out")
    if ((rc != 0)); then
        verdict="exit status $rc${verdict:+; $verdict}"
    fi
    if [[ -n $verdict ]]; then
        echo "$(basename "$0"): $name FAILED: $verdict" >&2
        failed+=("$name")
    fi
}

# release_build BUILD: builds BUILD with ninja, first setting it up as a release build of ringd
# when it does not exist (timings come from release builds, never from a sanitizer build).
release_build() {
    if [[ ! -d $1 ]]; then
        echo "# $(basename "$0"): setting up $1 as a release build" >&2
        meson setup "$1" --buildtype=release -Dtests=false -Dfuzz=disabled >/dev/null ||
            die "meson setup $1 failed"
    fi
    ninja -C "$1" >/dev/null || die "ninja -C $1 failed"
}

# stop_all: terminate every background process we started (if running) and reap it.
stop_all() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    pids=()
}

# cleanup: EXIT trap; runs on success, failure and interruption alike.
cleanup() {
    stop_all
    rm -rf "$tmp"
}

# free_port: print a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for PID WHAT CMD...: poll CMD every 50 ms (at most 10 s) until it succeeds. Returns
# non-zero, saying why, if process PID died first or CMD never succeeded.
wait_for() {
    local pid=$1 what=$2 i
    shift 2
    for ((i = 0; i < 200; i++)); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$(basename "$0"): $what exited during start-up" >&2
            return 1
        fi
        sleep 0.05
    done
    echo "$(basename "$0"): $what did not come up within 10 s" >&2
    return 1
}

# redis_ping PORT: succeeds when the Redis on 127.0.0.1:PORT answers PING (bash alone, so that
# a machine with redis-server but no redis-cli, a lent GPU machine's bundle, can run it too).
redis_ping() {
    local fd reply=
    exec {fd}<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'PING\r\n' >&"$fd"
    IFS= read -r -t 2 reply <&"$fd" || true
    exec {fd}>&-
    [[ $reply == "+PONG"* ]]
}

# start_ring [N [RINGD_ARG...]]: redis-server on a free port and N daemons (2 by default: a and
# b; else n0 .. nN-1) joined through it, sharing a fresh key, each with the extra ringd arguments
# ($RINGD, $RINGCTL; each daemon's socket $tmp/NODE.sock, its log $tmp/ringd-NODE.log; Redis's
# port in $ring_redis_port). Returns non-zero if any of them died or never answered.
start_ring() {
    local n=${1:-2} port node
    (($# == 0)) || shift
    local names=(a b)
    ((n == 2)) || mapfile -t names < <(seq -f 'n%g' 0 $((n - 1)))
    port=$(free_port)
    ring_redis_port=$port
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$tmp" --logfile "$tmp/redis.log" &
    pids+=($!)
    wait_for "$!" "redis-server" redis_ping "$port" || return 1
    (umask 077 && head -c 32 /dev/urandom | base64 >"$tmp/ring.key")
    for node in "${names[@]}"; do
        "$RINGD" --socket "$tmp/$node.sock" --redis "redis://127.0.0.1:$port" \
            --listen 127.0.0.1:0 --node "$node" --key-file "$tmp/ring.key" --log-level warn \
            "$@" 2>>"$tmp/ringd-$node.log" &
        pids+=($!)
        if ! wait_for "$!" "ringd $node" "$RINGCTL" --socket "$tmp/$node.sock" status; then
            tail -n 20 "$tmp/ringd-$node.log" >&2
            return 1
        fi
    done
}

# bench_setup NAME BUILD: what every bench script starts with (ROOT set): the build's Debian
# packages, BUILD made a release build, $RINGD, $RINGCTL, $RINGD_BENCH and $LIBRINGD of it, a
# fresh scratch directory $tmp (ringd-NAME.*) and the traps that stop $pids and remove $tmp.
# With RINGD_BENCH_PREBUILT=DIR, nothing is installed or built: ringd, ringctl, ringd-bench and
# redis-server come from DIR (a scripts/gpu-bundle's bin/, to measure on a lent GPU machine).
bench_setup() {
    if [[ -n ${RINGD_BENCH_PREBUILT:-} ]]; then
        local d
        d=$(cd "$RINGD_BENCH_PREBUILT" && pwd) || die "RINGD_BENCH_PREBUILT=$RINGD_BENCH_PREBUILT: no such directory"
        [[ -x $d/ringd && -x $d/ringctl && -x $d/ringd-bench && -x $d/redis-server ]] ||
            die "RINGD_BENCH_PREBUILT=$d lacks ringd, ringctl, ringd-bench or redis-server"
        PATH=$d:$PATH
        RINGD="$d/ringd"
        RINGCTL="$d/ringctl"
        RINGD_BENCH="$d/ringd-bench"
        LIBRINGD="$d/../lib/libringd.so"
    else
        # shellcheck source=../scripts/deps.sh
        source "$ROOT/scripts/deps.sh"
        ringd_install_deps || die "installing the build's packages failed"
        release_build "$2"
        RINGD="$2/daemon/ringd"
        RINGCTL="$2/client/ringctl"
        RINGD_BENCH="$2/bench/ringd-bench"
        LIBRINGD="$2/client/libringd.so"
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringd-$1.XXXXXX")
    pids=()
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}
