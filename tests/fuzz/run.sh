#!/usr/bin/env bash
# Fuzzes one harness for a bounded time over a copy of its seed corpus (new inputs go to a
# temporary directory, never into the source tree); a crash is kept under ARTIFACTS and fails.
# usage: run.sh FUZZER SEED_DIR SECONDS ARTIFACTS
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3 artifacts=$4
name=$(basename "$fuzzer")
work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
[ -d "$seeds" ] && cp -r "$seeds"/. "$work/corpus/"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
set +e
"$fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 -max_len=8192 \
  -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$work/corpus" 2>&1 |
  grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' | tail -n 80
rc=${PIPESTATUS[0]}
set -e
# libFuzzer reports a crash with 77, which meson would count as a skipped test: any failure is 1
if [ "$rc" -ne 0 ]; then
  echo "$name: failed (rc $rc); the input that crashed is under $artifacts: add it to $seeds" >&2
  exit 1
fi
