#!/usr/bin/env bash
# torch-peers.sh: ResNet on 2 ranks, ringd (2 daemons; Horovod's API and DDP on the backend "ringd")
# vs DDP on Gloo: images/s, comm wait.
#
# Usage: bench/torch-peers.sh [BUILD_DIR]   (default: build-rel, set up as a release build of
#                                            ringd when missing: never time an ASan build)
# Knobs: RUNS=3 STEPS=30 WARMUP=5 BATCH=32 MODEL=resnet18 (or resnet50) BENCH_TIMEOUT=600
# Each run trains torchvision's MODEL (synthetic 32x32 images, batch BATCH per rank, SGD) for
# WARMUP + STEPS steps with each peer in turn, 2 ranks of one torch thread each (bench/torch-
# train.py): ringd.torch's DistributedOptimizer across two ringd daemons that rendezvous through a
# private redis-server, one rank per daemon; torch DistributedDataParallel on the backend "ringd"
# across the same two daemons; DDP on Gloo over loopback TCP; and the same training without any
# communication (the compute-only reference). The daemons run only while ringd is measured.
# Prints every run, then the medians over the runs and the targets: ringd's images/s >= 1.0x
# DDP-Gloo's and its communication wait <= 0.5x; DDP on ringd's images/s >= 1.1x DDP on Gloo's
# and its wait <= 0.5x.
# Exits non-zero when a run fails (a crash, a bad exit status, ranks whose parameters differ);
# a missed target is reported, not a failure.
set -euo pipefail

BUILD=${1:-build-rel}
RUNS=${RUNS:-3}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
BATCH=${BATCH:-32}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TRAIN="$HERE/torch-train.py"
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"

# shellcheck source=../scripts/deps.sh
source "$ROOT/scripts/deps.sh"
ringd_install_deps || die "installing the build's packages failed"
ringd_install_bench_deps || die "installing python3-torch and python3-torchvision failed"

release_build "$BUILD"
# build_option NAME: the value of meson option NAME in $BUILD.
build_option() {
    meson introspect --buildoptions "$BUILD" | "$PYTHON" -c \
        'import json, sys; print({o["name"]: o["value"] for o in json.load(sys.stdin)}[sys.argv[1]])' "$1"
}
buildtype=$(build_option buildtype)
sanitize=$(build_option b_sanitize)
if [[ $buildtype != release || $sanitize != none ]]; then
    echo "torch-peers.sh: WARNING: $BUILD is buildtype=$buildtype, b_sanitize=$sanitize:" \
        "its figures are not ringd's (use a release build)" >&2
fi

RINGD="$BUILD/daemon/ringd"
RINGCTL="$BUILD/client/ringctl"
LIBRINGD="$BUILD/client/libringd.so"
for f in "$RINGD" "$RINGCTL"; do
    [[ -x $f ]] || die "$f: not found or not executable"
done
[[ -e $LIBRINGD ]] || die "$LIBRINGD: not found"
for c in redis-server redis-cli timeout; do
    command -v "$c" >/dev/null || die "$c: not found in PATH (scripts/deps.sh installs it)"
done
"$PYTHON" -c 'import torchvision, torch.distributed as d; assert d.is_gloo_available()' \
    2>/dev/null || die "$PYTHON: cannot import torchvision and torch with Gloo"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringd-torch-peers.XXXXXX")
: >"$tmp/results" # every run may fail: the summary still has a file to read
pids=() # background processes of ours still to stop: redis-server, ringd a and b

trap cleanup EXIT
trap 'exit 130' INT TERM


MODEL=${MODEL:-resnet18}
TRAIN_ARGS=(--steps "$STEPS" --warmup "$WARMUP" --batch "$BATCH" --model "$MODEL")

# two_ranks OUT CMD0... -- CMD1...: runs both ranks at once; rank 0's output to OUT (stderr
# too), rank 1's stderr to OUT.1. Returns the worse exit status.
two_ranks() {
    local out=$1 rc0=0 rc1=0 pid1 i
    shift
    local cmd0=() cmd1=()
    for ((i = 1; i <= $#; i++)); do
        [[ ${!i} == -- ]] && break
        cmd0+=("${!i}")
    done
    cmd1=("${@:i+1}")
    timeout "$BENCH_TIMEOUT" "${cmd1[@]}" >/dev/null 2>"$out.1" &
    pid1=$!
    timeout "$BENCH_TIMEOUT" "${cmd0[@]}" >"$out" 2>&1 || rc0=$?
    wait "$pid1" || rc1=$?
    if ((rc1 != 0)); then
        echo "torch-peers.sh: rank 1 exit status $rc1: $(tail -c 2000 "$out.1")" >&2
    fi
    return $((rc0 > rc1 ? rc0 : rc1))
}

# run_peer NAME RUN: one measurement of NAME (ringd, ddp-ringd, ddp, none); its RESULT line is appended to
# $tmp/results. Records NAME as failed on a bad exit status or a missing RESULT line.
failed=()
run_peer() {
    local name=$1 run=$2 out="$tmp/$1.$2.txt" rc=0 job port
    case $name in
    ringd)
        if ! start_ring; then
            failed+=("ringd (run $run: the daemons did not start)")
            stop_all
            return
        fi
        job="torch-peers.$$.$run"
        two_ranks "$out" \
            env RINGD_SOCKET="$tmp/a.sock" RINGD_JOB="$job" RINGD_WORLD_SIZE=2 \
            PYTHONPATH="$ROOT/python" RINGD_LIBRARY="$LIBRINGD" \
            "$PYTHON" "$TRAIN" --peer ringd "${TRAIN_ARGS[@]}" -- \
            env RINGD_SOCKET="$tmp/b.sock" RINGD_JOB="$job" RINGD_WORLD_SIZE=2 \
            PYTHONPATH="$ROOT/python" RINGD_LIBRARY="$LIBRINGD" \
            "$PYTHON" "$TRAIN" --peer ringd "${TRAIN_ARGS[@]}" || rc=$?
        stop_all
        ;;
    ddp-ringd)
        if ! start_ring; then
            failed+=("ddp-ringd (run $run: the daemons did not start)")
            stop_all
            return
        fi
        job="torch-peers.ddp.$$.$run"
        port=$(free_port)
        two_ranks "$out" \
            env RINGD_SOCKET="$tmp/a.sock" RINGD_JOB="$job" \
            PYTHONPATH="$ROOT/python" RINGD_LIBRARY="$LIBRINGD" \
            "$PYTHON" "$TRAIN" --peer ddp-ringd --rank 0 --world 2 \
            --init "tcp://127.0.0.1:$port" "${TRAIN_ARGS[@]}" -- \
            env RINGD_SOCKET="$tmp/b.sock" RINGD_JOB="$job" \
            PYTHONPATH="$ROOT/python" RINGD_LIBRARY="$LIBRINGD" \
            "$PYTHON" "$TRAIN" --peer ddp-ringd --rank 1 --world 2 \
            --init "tcp://127.0.0.1:$port" "${TRAIN_ARGS[@]}" || rc=$?
        stop_all
        ;;
    ddp)
        port=$(free_port)
        two_ranks "$out" \
            "$PYTHON" "$TRAIN" --peer ddp --rank 0 --world 2 --init "tcp://127.0.0.1:$port" \
            "${TRAIN_ARGS[@]}" -- \
            "$PYTHON" "$TRAIN" --peer ddp --rank 1 --world 2 --init "tcp://127.0.0.1:$port" \
            "${TRAIN_ARGS[@]}" || rc=$?
        ;;
    none)
        two_ranks "$out" \
            "$PYTHON" "$TRAIN" --peer none --rank 0 --world 2 "${TRAIN_ARGS[@]}" -- \
            "$PYTHON" "$TRAIN" --peer none --rank 1 --world 2 "${TRAIN_ARGS[@]}" || rc=$?
        ;;
    esac
    if ((rc != 0)) || ! grep -q '^RESULT ' "$out"; then
        echo "torch-peers.sh: $name run $run FAILED (exit status $rc):" >&2
        tail -c 3000 "$out" >&2
        failed+=("$name (run $run)")
        return
    fi
    grep '^RESULT ' "$out" | sed "s/^RESULT /RESULT run=$run /" | tee -a "$tmp/results"
}

echo "# torch-peers.sh: $MODEL (torchvision), synthetic 32x32 images," \
    "batch $BATCH per rank, 2 ranks x 1 torch thread, $WARMUP warm-up + $STEPS timed steps," \
    "$RUNS runs; ringd build $BUILD ($buildtype)"
echo "# $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
for ((run = 1; run <= RUNS; run++)); do
    echo
    echo "== run $run of $RUNS =="
    run_peer ringd "$run"
    run_peer ddp-ringd "$run"
    run_peer ddp "$run"
    run_peer none "$run"
done

echo
echo "== medians over $RUNS runs (img/s: both ranks, by the slower; times: ms per step, mean of the ranks) =="
"$PYTHON" - "$tmp/results" <<'EOF'
import statistics
import sys

rows = {}
for line in open(sys.argv[1]):
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    rows.setdefault(fields["peer"], []).append({k: float(v) for k, v in fields.items()
                                                if k not in ("peer",)})
cols = ["img_per_s", "step_ms", "fwd_ms", "bwd_ms", "wait_ms"]
names = {"ringd": "ringd (DistributedOptimizer)", "ddp-ringd": "DDP on ringd",
         "ddp": "DDP on Gloo", "none": "no communication"}
# over_ms: the step's time beyond the compute-only reference's, all that communication costs
# (waits, copies and hooks inside backward, the daemons' or Gloo's threads taking CPU).
print(f"| {'peer':30} | runs | {' | '.join(f'{c:>9}' for c in cols)} |   over_ms |")
print(f"| {'-' * 30} | ---: | {' | '.join('-' * 8 + ':' for _ in cols)} | --------: |")
med = {}
for peer in ("ringd", "ddp-ringd", "ddp", "none"):
    if peer not in rows:
        continue
    med[peer] = {c: statistics.median(r[c] for r in rows[peer]) for c in cols}
for peer in med:
    over = (f"{med[peer]['step_ms'] - med['none']['step_ms']:9.2f}" if "none" in med
            else f"{'n/a':>9}")
    print(f"| {names[peer]:30} | {len(rows[peer]):4} | "
          + " | ".join(f"{med[peer][c]:9.2f}" for c in cols) + f" | {over} |")
print()
for peer, target in (("ringd", 1.0), ("ddp-ringd", 1.1)):
    if peer not in med or "ddp" not in med:
        print(f"{names[peer]} or DDP on Gloo has no result: targets not evaluated")
        continue
    r, d = med[peer], med["ddp"]
    ratio = r["img_per_s"] / d["img_per_s"]
    print(f"images/s: {names[peer]} {r['img_per_s']:.2f} vs DDP-Gloo {d['img_per_s']:.2f} -> "
          f"ratio {ratio:.3f} (target >= {target:.2f}): {'met' if ratio >= target else 'NOT met'}")
    if d["wait_ms"] > 0:
        w = r["wait_ms"] / d["wait_ms"]
        print(f"communication wait: {names[peer]} {r['wait_ms']:.2f} ms vs DDP-Gloo "
              f"{d['wait_ms']:.2f} ms per step -> ratio {w:.3f} (target <= 0.50): "
              f"{'met' if w <= 0.5 else 'NOT met'}")
    else:
        print("communication wait: DDP-Gloo's is 0 -> target (<= 0.50) not evaluated")
    ddp_of_run = {x["run"]: x for x in rows["ddp"]}  # a failed run has no row: pair by run
    per_run = [(a["img_per_s"] / b["img_per_s"], a["wait_ms"] / b["wait_ms"])
               for a in rows[peer] for b in [ddp_of_run.get(a["run"])]
               if b is not None and b["wait_ms"] > 0]
    if per_run:
        print(f"per run ({names[peer]}/DDP-Gloo images/s, wait): "
              + ", ".join(f"{i:.3f} {w:.3f}" for i, w in per_run))
EOF

if ((${#failed[@]})); then
    echo "torch-peers.sh: failed: ${failed[*]}" >&2
    exit 1
fi
