#!/usr/bin/env bash
# The GPU kit on a machine without a GPU: scripts/gpu-bundle packs a bundle whose programs run
# with the bundle's libraries only (a clean environment with the bundle's paths: ringd --help,
# ringctl --help, a one-node job of 2 ranks through the bundled ringd and the bundled Python
# package), and scripts/gpu-check prints one line and exits 0 without running a device check.
#   gpu_bundle.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d /tmp/ringd-gpu-bundle.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

out=$tmp/gpu
# its own release build, kept in the build tree between runs
"$src/scripts/gpu-bundle" --build "$build/gpu-bundle-build" --out "$out" >"$tmp/bundle.log" 2>&1 ||
  { cat "$tmp/bundle.log" >&2; fail "scripts/gpu-bundle failed"; }
tail -1 "$tmp/bundle.log"
grep -q "MiB (limit 60 MiB)" "$tmp/bundle.log" || fail "gpu-bundle printed no size"
for f in ringd ringctl ringd-bench cuda-kernels redis-server test_cuda test_nccl test_nccl_root \
  test_cuda_daemon test_gpu_ring test_api; do
  [ -x "$out/bin/$f" ] || fail "the bundle has no bin/$f"
done
[ -f "$out/python/ringd/__init__.py" ] || fail "the bundle has no Python package"

# Only the bundle's paths: no LD_LIBRARY_PATH, PATH the bundle and the base system's tools.
clean=(env -i "PATH=$out/bin:/usr/bin:/bin" "HOME=$tmp")
"${clean[@]}" ringd --help >/dev/null || fail "the bundled ringd --help"
"${clean[@]}" ringctl --help >/dev/null || fail "the bundled ringctl --help"
for f in "$out"/bin/* "$out"/lib/*.so*; do
  bad=$(ldd "$f" 2>&1 | awk -v dir="$(realpath "$out")/" \
    '$2 == "=>" && $1 !~ /^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv)\./ &&
     index($3, dir) != 1')
  [ -z "$bad" ] || fail "$f loads libraries from outside the bundle: $bad"
done

# A one-node job of 2 ranks through the bundled daemon and Python package.
"${clean[@]}" ringd --socket "$tmp/s" --log-level warn 2>"$tmp/ringd.log" &
pids+=($!)
for _ in $(seq 100); do
  "${clean[@]}" ringctl --socket "$tmp/s" status >/dev/null 2>&1 && break
  sleep 0.1
done
"${clean[@]}" ringctl --socket "$tmp/s" status >/dev/null || fail "the bundled ringd did not answer: $(cat "$tmp/ringd.log")"
rank() {
  "${clean[@]}" "PYTHONPATH=$out/python" "RINGD_SOCKET=$tmp/s" RINGD_JOB=bundle \
    RINGD_WORLD_SIZE=2 RINGD_LOCAL_SIZE=2 /usr/bin/python3 -c '
import os, sys
import numpy as np
import ringd
lib = os.path.realpath(ringd.library_path())
assert lib.startswith(os.path.realpath(sys.argv[1])), "libringd from " + lib
with ringd.Session() as s:
    me = s.rank
    got = s.allreduce("x", np.full(1000, me + 1.0, dtype=np.float32))
    assert (got == 3.0).all(), got[:4]
print("rank", me, "allreduce ok with", lib)
' "$out"
}
rank >"$tmp/r0.log" 2>&1 &
r0=$!
rank >"$tmp/r1.log" 2>&1 || { cat "$tmp/r1.log" >&2; fail "rank 1 of the bundled job"; }
wait "$r0" || { cat "$tmp/r0.log" >&2; fail "rank 0 of the bundled job"; }
cat "$tmp/r0.log" "$tmp/r1.log"

# gpu-check on a machine without a GPU: one line, exit 0 (where nvidia-smi exists, this part
# would run the device checks: it is not a machine without a GPU)
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "nvidia-smi is here: the no-GPU line of gpu-check is not checked on this machine"
  exit 0
fi
set +e
said=$("$src/scripts/gpu-check" 2>&1)
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "gpu-check without a GPU exited $rc: $said"
[ "$(printf '%s\n' "$said" | wc -l)" -eq 1 ] || fail "gpu-check without a GPU printed more than one line: $said"
case $said in *"no GPU here"*) ;; *) fail "gpu-check without a GPU said: $said" ;; esac
echo "$said"
echo "gpu bundle: runs with its own libraries; gpu-check without a GPU: one line, exit 0"
