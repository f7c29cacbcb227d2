#!/usr/bin/env bash
# net-peers.sh: 2-node ringd (2 daemons on loopback) vs iperf3, OpenMPI TCP and Gloo; f32-sum allreduce.
#
# Usage: bench/net-peers.sh [BUILD_DIR]          (default: build)
# Knobs: ITERS=20 WARMUP=5 MINSIZE=4 MAXSIZE=64M FACTOR=4 IPERF_TIME=5 BENCH_TIMEOUT=900
# All runs are 2 ranks on 127.0.0.1, so the "network" is loopback TCP: iperf3 gives its ceiling.
# Exits non-zero when a bench fails (crash, bad exit status, #wrong > 0, empty table);
# a missed performance target is reported but is not a failure.
set -euo pipefail

BUILD=${1:-build}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
MINSIZE=${MINSIZE:-4}
MAXSIZE=${MAXSIZE:-64M}
FACTOR=${FACTOR:-4}
IPERF_TIME=${IPERF_TIME:-5}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-900}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RINGD="$BUILD/daemon/ringd"
RINGCTL="$BUILD/client/ringctl"
RINGD_BENCH="$BUILD/bench/ringd-bench"
MPI_BENCH="$BUILD/bench/mpi-allreduce-bench"
GLOO_BENCH="$HERE/gloo-allreduce.py"
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"

# shellcheck source=../scripts/deps.sh
source "$HERE/../scripts/deps.sh"
ringd_install_bench_deps || die "installing iperf3 and python3-torch failed"

for f in "$RINGD" "$RINGCTL" "$RINGD_BENCH" "$MPI_BENCH"; do
    [[ -x $f ]] || die "$f: not found or not executable (build first, or pass BUILD_DIR)"
done
for c in mpirun iperf3 redis-server redis-cli timeout; do
    command -v "$c" >/dev/null || die "$c: not found in PATH (scripts/deps.sh installs it)"
done
"$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    die "$PYTHON: cannot import torch with Gloo (install python3-torch)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringd-net-peers.XXXXXX")
pids=() # background processes of ours still to stop: iperf3 server, redis-server, ringd a and b

trap cleanup EXIT
trap 'exit 130' INT TERM

# listening PORT: true when something listens on 127.0.0.1:PORT.
listening() {
    ss -Htln "sport = :$1" | grep -q .
}

SWEEP=(-b "$MINSIZE" -e "$MAXSIZE" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c 1)

echo "# net-peers.sh: 2 ranks on loopback TCP, f32 sum allreduce, sizes $MINSIZE..$MAXSIZE x$FACTOR, iters $ITERS, warmup $WARMUP"

# --- iperf3: both directions at once, the loopback ceiling for a two-node ring ---------------

# iperf_run: one bidirectional iperf3 test against a private one-shot server; the JSON report
# goes to $tmp/iperf.json and a summary (and "GBPS <mean per-direction GB/s>") to stdout.
iperf_run() {
    local port
    port=$(free_port)
    iperf3 -s -1 -B 127.0.0.1 -p "$port" >"$tmp/iperf-server.log" 2>&1 &
    pids+=($!)
    wait_for "$!" "iperf3 server" listening "$port" || return 1
    timeout $((IPERF_TIME + 30)) iperf3 -c 127.0.0.1 -p "$port" --bidir -t "$IPERF_TIME" --json \
        >"$tmp/iperf.json" || { cat "$tmp/iperf.json" >&2; return 1; }
    "$PYTHON" - "$tmp/iperf.json" <<'EOF'
import json, sys
end = json.load(open(sys.argv[1]))["end"]
# The receiver's count of each direction: client->server, then server->client (--bidir reverse).
dirs = [("client -> server", end["sum_received"]["bits_per_second"]),
        ("server -> client", end["sum_received_bidir_reverse"]["bits_per_second"])]
for name, bps in dirs:
    print(f"iperf3 {name}: {bps / 1e9:8.2f} Gbit/s = {bps / 8e9:7.2f} GB/s")
mean = sum(bps for _, bps in dirs) / len(dirs)
print(f"iperf3 per-direction mean: {mean / 1e9:8.2f} Gbit/s = {mean / 8e9:7.2f} GB/s")
print(f"GBPS {mean / 8e9:.4f}")
EOF
}

echo
echo "== iperf3 --bidir on loopback, ${IPERF_TIME} s (per-direction throughput, GB = 1e9 B) =="
iperf_gbps=0
if iperf_run >"$tmp/iperf.txt"; then
    grep -v '^GBPS ' "$tmp/iperf.txt"
    iperf_gbps=$(awk '$1 == "GBPS" { print $2 }' "$tmp/iperf.txt")
else
    echo "net-peers.sh: iperf3 FAILED" >&2
    failed+=(iperf3)
fi
stop_all

# --- ringd: two daemons rendezvousing through a private redis, one client each ---------------


# ring_bench: one ringd-bench per daemon, concurrently, in the same job; rank 0 (on a) prints
# the table. Returns the worse of the two exit statuses.
ring_bench() {
    local job="net-peers.$$" rc_a=0 rc_b=0 pid_b
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/b.sock" --procs 1 --world 2 \
        --job "$job" "${SWEEP[@]}" --op allreduce --dtype f32 --redop sum >"$tmp/ringd-b.txt" &
    pid_b=$!
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/a.sock" --procs 1 --world 2 \
        --job "$job" "${SWEEP[@]}" --op allreduce --dtype f32 --redop sum || rc_a=$?
    wait "$pid_b" || rc_b=$?
    if [[ -s $tmp/ringd-b.txt ]]; then
        echo "net-peers.sh: ringd-bench on b printed a table; rank 0 was expected on a" >&2
    fi
    if ((rc_b != 0)); then
        echo "net-peers.sh: ringd-bench on b: exit status $rc_b" >&2
    fi
    return $((rc_a > rc_b ? rc_a : rc_b))
}

if start_ring; then
    run_table ringd "ringd (2 daemons on loopback TCP, ringd-bench 1 proc each, world 2)" ring_bench
else
    echo "net-peers.sh: two-node ringd did not start (expected until multi-node ringd lands)" >&2
    failed+=(ringd)
    : >"$tmp/ringd.txt"
fi
# On a small machine idle daemons still compete for cores; the other runs get the machine alone.
stop_all

# --- OpenMPI over TCP loopback, and Gloo ------------------------------------------------------

run_table mpi-tcp "OpenMPI TCP loopback (pml ob1, btl tcp,self, if lo)" \
    timeout "$BENCH_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI_BENCH" "${SWEEP[@]}"
run_table gloo "Gloo (torch.distributed, loopback TCP)" \
    timeout "$BENCH_TIMEOUT" "$PYTHON" "$GLOO_BENCH" --ranks 2 "${SWEEP[@]}"

echo
echo "== ratios (ringd / best of OpenMPI TCP and Gloo; ringd / iperf3 per direction) =="
awk -v iperf="$iperf_gbps" '
    # Table rows: size count type redop time(us) algbw busbw #wrong.
    # Which table: by argument position, so an empty file keeps the others in place.
    { f = (FILENAME == ARGV[1]) ? 1 : (FILENAME == ARGV[2]) ? 2 : 3 }
    $1 ~ /^[0-9]+$/ && NF >= 8 {
        t[f, $1] = $5; bw[f, $1] = $7; have[f, $1] = 1
        if (!seen[$1]++) order[++n] = $1
    }
    function ratio(a, b) { return (b + 0 > 0) ? sprintf("%.3f", a / b) : "n/a" }
    function cell(x, ok) { return ok ? sprintf("%.2f", x) : "-" }
    # best(s): the better busbw of OpenMPI TCP and Gloo at size s, -1 when neither has a row.
    function best(s) {
        if (have[2, s] && have[3, s]) return bw[2, s] > bw[3, s] ? bw[2, s] : bw[3, s]
        return have[2, s] ? bw[2, s] : have[3, s] ? bw[3, s] : -1
    }
    END {
        printf "%12s %12s %12s %12s %10s %12s %12s %10s\n", "size", "ringd busbw", "mpi busbw",
               "gloo busbw", "bw ratio", "ringd us", "mpi us", "t ratio"
        for (i = 1; i <= n; i++) {
            s = order[i]
            b = best(s)
            printf "%12s %12s %12s %12s %10s %12s %12s %10s\n", s, cell(bw[1, s], have[1, s]),
                   cell(bw[2, s], have[2, s]), cell(bw[3, s], have[3, s]),
                   (have[1, s] && b >= 0) ? ratio(bw[1, s], b) : "n/a",
                   cell(t[1, s], have[1, s]), cell(t[2, s], have[2, s]),
                   (have[1, s] && have[2, s]) ? ratio(t[1, s], t[2, s]) : "n/a"
        }
        print ""

        split("16777216 67108864", big, " ")
        split("16 MiB,64 MiB", label, ",")
        for (j = 1; j <= 2; j++) {
            s = big[j]; L = label[j]
            b = best(s)
            if (!have[1, s] || b < 0)
                printf "%s busbw vs peers: row missing (%s) -> target (>= 1.20) not evaluated\n", L,
                       !have[1, s] ? (b < 0 ? "ringd, OpenMPI tcp, Gloo" : "ringd") : "OpenMPI tcp, Gloo"
            else if (b + 0 <= 0)
                printf "%s busbw vs peers: best peer busbw is 0 -> target (>= 1.20) not evaluated\n", L
            else {
                r = bw[1, s] / b
                printf "%s busbw vs peers: ringd %.2f GB/s vs best of OpenMPI tcp/Gloo %.2f GB/s -> ratio %.3f (target >= 1.20): %s\n",
                       L, bw[1, s], b, r, (r >= 1.2 ? "met" : "NOT met")
            }
            if (!have[1, s])
                printf "%s busbw vs iperf3: ringd row missing -> target (>= 0.80) not evaluated\n", L
            else if (iperf + 0 <= 0)
                printf "%s busbw vs iperf3: no iperf3 figure -> target (>= 0.80) not evaluated\n", L
            else {
                r = bw[1, s] / iperf
                printf "%s busbw vs iperf3: ringd %.2f GB/s vs iperf3 %.2f GB/s per direction -> ratio %.3f (target >= 0.80): %s\n",
                       L, bw[1, s], iperf, r, (r >= 0.8 ? "met" : "NOT met")
            }
        }

        s = 4
        if (!have[1, s] || !have[2, s])
            printf "4 B time: row missing (%s) -> target (<= 2.00) not evaluated\n",
                   !have[1, s] ? (!have[2, s] ? "ringd, OpenMPI tcp" : "ringd") : "OpenMPI tcp"
        else if (t[2, s] + 0 <= 0)
            printf "4 B time: OpenMPI tcp time is 0 -> target (<= 2.00) not evaluated\n"
        else {
            r = t[1, s] / t[2, s]
            printf "4 B time: ringd %.2f us vs OpenMPI tcp %.2f us -> ratio %.3f (target <= 2.00): %s\n",
                   t[1, s], t[2, s], r, (r <= 2.0 ? "met" : "NOT met")
        }
    }
' "$tmp/ringd.txt" "$tmp/mpi-tcp.txt" "$tmp/gloo.txt"

if ((${#failed[@]})); then
    echo "net-peers.sh: failed: ${failed[*]}" >&2
    exit 1
fi
