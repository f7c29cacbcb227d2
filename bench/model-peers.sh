#!/usr/bin/env bash
# model-peers.sh: one training step's gradients (ResNet-50, BERT-base), 2 nodes x 1 rank on
# loopback: ringd (2 daemons, ringd-bench --model) vs OpenMPI TCP with an MPI_Iallreduce per
# tensor, OpenMPI TCP with a Horovod-style 64 MiB fusion buffer, and Gloo in DDP's 25 MiB buckets.
#
# Usage: bench/model-peers.sh [BUILD_DIR]   (default: build-rel, set up as a release build of
#                                            ringd when missing: never time an ASan build)
# Knobs: MODELS="resnet50 bert-base" RUNS=3 ITERS=10 WARMUP=3 GAP_US=0 BENCH_TIMEOUT=900
#        RINGD_FLAGS="" (extra flags for both daemons)
#        TUNED=0 (1: ringd with --autotune runs too, as one more peer: its first TUNE_WARMUP=300
#        steps untimed, settling with a window of TUNE_WINDOW_MS=250 per setting; what it
#        settled on is printed from rank 0's daemon log)
# Every peer reduces the same tensor list (ringd-bench --model M --list) in reverse declaration
# order, in place, f32 sum; each prints "# model M: ... step_ms S ..." (median step of the slower
# rank). GAP_US sleeps between two gradients, standing in for backward compute (the fused OpenMPI
# peer runs only with GAP_US=0: it packs while it reduces, Horovod would not). Prints every run,
# then per model the median step of each peer over RUNS runs and the target: ringd <= 0.8x the
# best peer. Exits non-zero when a run fails (crash, bad exit status, #wrong > 0, no "# model"
# line); a missed target is reported, not a failure.
set -euo pipefail

BUILD=${1:-build-rel}
MODELS=${MODELS:-resnet50 bert-base}
RUNS=${RUNS:-3}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
GAP_US=${GAP_US:-0}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-900}
TUNED=${TUNED:-0}
TUNE_WARMUP=${TUNE_WARMUP:-300}
TUNE_WINDOW_MS=${TUNE_WINDOW_MS:-250}
read -r -a RINGD_EXTRA <<<"${RINGD_FLAGS:-}"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PYTHON=/usr/bin/python3

. "$HERE/lib.sh"
bench_setup model-peers "$BUILD"
ringd_install_bench_deps || die "installing the bench's packages failed"

MPI_MODEL="$BUILD/bench/mpi-model-bench"
for f in "$RINGD" "$RINGCTL" "$RINGD_BENCH" "$MPI_MODEL"; do
    [[ -x $f ]] || die "$f: not found or not executable"
done
for c in mpirun redis-server redis-cli timeout; do
    command -v "$c" >/dev/null || die "$c: not found in PATH (scripts/deps.sh installs it)"
done

: >"$tmp/results"

# ringd_model MODEL: both ranks of ringd-bench --model against daemons a and b; rank 0's output
# (rank 0 is on a, the first node by name; b's goes to $tmp/ringd-b.txt and must stay empty).
ringd_model() {
    local model=$1 job="model-peers.$$.$RANDOM" rc_a=0 rc_b=0 pid_b
    local warmup=$2
    local args=(--model "$model" --gap-us "$GAP_US" --procs 1 --world 2 --job "$job"
        -n "$ITERS" -w "$warmup")
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/b.sock" "${args[@]}" >"$tmp/ringd-b.txt" &
    pid_b=$!
    timeout "$BENCH_TIMEOUT" "$RINGD_BENCH" --socket "$tmp/a.sock" "${args[@]}" || rc_a=$?
    wait "$pid_b" || rc_b=$?
    if [[ -s $tmp/ringd-b.txt ]]; then
        echo "model-peers.sh: ringd-bench on b printed the summary; rank 0 was expected on a" >&2
    fi
    return $((rc_a > rc_b ? rc_a : rc_b))
}

mpi_model() {
    timeout "$BENCH_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI_MODEL" "$@" \
        -n "$ITERS" -w "$WARMUP"
}

# run_peer PEER MODEL RUN: one measurement; its "# model" line goes to $tmp/results as
# "RESULT model=M peer=P run=R step_ms=S passes=N ops_per_pass=X".
run_peer() {
    local peer=$1 model=$2 run=$3 rc=0 name
    name=$(basename "$model") # the peers read the list of a model FILE under its base name
    local out="$tmp/$peer.$name.$run.txt"
    case $peer in
    ringd | ringd-autotune)
        local daemon=$RINGD warmup=$WARMUP
        if [[ $peer == ringd-autotune ]]; then
            RINGD="$tmp/ringd-tuned"
            warmup=$TUNE_WARMUP
            : >"$tmp/ringd-a.log"
        fi
        if ! start_ring; then
            failed+=("$peer $model run $run: the daemons did not start")
            stop_all
            RINGD=$daemon
            return
        fi
        ringd_model "$model" "$warmup" >"$out" 2>&1 || rc=$?
        stop_all
        RINGD=$daemon
        if [[ $peer == ringd-autotune ]]; then
            local settled
            settled=$(grep -o "autotune settled on .*" "$tmp/ringd-a.log" | tail -n 1 || true)
            echo "$peer: ${settled:-autotune had not settled when the job ended}"
        fi
        ;;
    mpi-tensor) mpi_model -m "$tmp/$name" -F 0 -g "$GAP_US" >"$out" 2>&1 || rc=$? ;;
    mpi-fused) mpi_model -m "$tmp/$name" -F 64M >"$out" 2>&1 || rc=$? ;;
    gloo-ddp)
        timeout "$BENCH_TIMEOUT" "$PYTHON" "$HERE/gloo-model.py" "$tmp/$name" --gap-us "$GAP_US" \
            -n "$ITERS" -w "$WARMUP" >"$out" 2>&1 || rc=$?
        ;;
    esac
    local line
    line=$(grep '^# model ' "$out" || true)
    if ((rc != 0)) || [[ -z $line ]]; then
        echo "model-peers.sh: $peer $model run $run FAILED (exit status $rc):" >&2
        tail -c 2000 "$out" >&2
        failed+=("$peer $model run $run")
        return
    fi
    echo "$peer: $line"
    awk -v peer="$peer" -v run="$run" -v model="$name" '
        /^# model / { for (i = 1; i < NF; i++) v[$i] = $(i + 1)
                      printf "RESULT model=%s peer=%s run=%s step_ms=%s passes=%s ops_per_pass=%s\n",
                             model, peer, run, v["step_ms"], v["ring_passes"], v["ops_per_pass"] }
    ' "$out" >>"$tmp/results"
}

# start_ring's daemons take the extra flags through this wrapper of $RINGD.
if ((${#RINGD_EXTRA[@]})); then
    printf '#!/bin/bash\nexec %q "$@"%s\n' "$(realpath "$RINGD")" \
        "$(printf ' %q' "${RINGD_EXTRA[@]}")" >"$tmp/ringd"
    chmod +x "$tmp/ringd"
    RINGD="$tmp/ringd"
fi

# The tuned daemons: the same, with --autotune and its log at info (what it settled on).
printf '#!/bin/bash\nexec %q "$@" --autotune --autotune-window-ms %q --log-level info\n' \
    "$(realpath "$RINGD")" "$TUNE_WINDOW_MS" >"$tmp/ringd-tuned"
chmod +x "$tmp/ringd-tuned"

peers=(ringd)
((TUNED)) && peers+=(ringd-autotune)
peers+=(mpi-tensor)
((GAP_US == 0)) && peers+=(mpi-fused)
peers+=(gloo-ddp)
echo "# model-peers.sh: 2 ranks (2 nodes x 1 rank on loopback TCP), models $MODELS, $RUNS runs of" \
    "$WARMUP warm-up + $ITERS timed steps, gap $GAP_US us; ringd build $BUILD" \
    "${RINGD_FLAGS:+(daemons: $RINGD_FLAGS)}"
echo "# $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
for model in $MODELS; do
    "$RINGD_BENCH" --model "$model" --list >"$tmp/$(basename "$model")" || die "ringd-bench --model $model --list failed"
done
for ((run = 1; run <= RUNS; run++)); do
    for model in $MODELS; do
        echo
        echo "== $model, run $run of $RUNS =="
        for peer in "${peers[@]}"; do
            run_peer "$peer" "$model" "$run"
        done
    done
done

echo
echo "== medians over $RUNS runs (ms per step, the slower rank; passes: allreduces per step) =="
"$PYTHON" - "$tmp/results" <<'EOF'
import statistics
import sys

rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    rows.setdefault((f["model"], f["peer"]), []).append(f)
names = {"ringd": "ringd (2 daemons)", "ringd-autotune": "ringd --autotune (2 daemons)",
         "mpi-tensor": "OpenMPI TCP, Iallreduce per tensor",
         "mpi-fused": "OpenMPI TCP, 64 MiB fusion", "gloo-ddp": "Gloo, DDP 25 MiB buckets"}
for model in dict.fromkeys(m for m, _ in rows):
    print(f"\n{model}:")
    print(f"| {'peer':36} | runs | step_ms (median) | step_ms (each run) | passes | ops/pass |")
    print(f"| {'-' * 36} | ---: | ---------------: | ------------------ | -----: | -------: |")
    med = {}
    for peer in names:
        r = rows.get((model, peer))
        if not r:
            continue
        med[peer] = statistics.median(float(x["step_ms"]) for x in r)
        print(f"| {names[peer]:36} | {len(r):4} | {med[peer]:16.2f} | "
              f"{' '.join(x['step_ms'] for x in r):18} | {r[-1]['passes']:>6} | "
              f"{r[-1]['ops_per_pass']:>8} |")
    others = {p: v for p, v in med.items() if not p.startswith("ringd")}
    for ours in ("ringd", "ringd-autotune"):
        if ours not in med:
            continue
        if not others:
            print(f"{model}: every peer has no result: target not evaluated")
            break
        best = min(others, key=others.get)
        ratio = med[ours] / others[best]
        print(f"{model}: {ours} {med[ours]:.2f} ms vs best peer ({names[best]}) "
              f"{others[best]:.2f} ms per step -> ratio {ratio:.3f} (target <= 0.80): "
              f"{'met' if ratio <= 0.8 else 'NOT met'}")
    if "ringd" not in med:
        print(f"{model}: ringd has no result: target not evaluated")
EOF

if ((${#failed[@]})); then
    echo "model-peers.sh: failed: ${failed[*]}" >&2
    exit 1
fi
