#!/usr/bin/env bash
# The k8s test: renders every kustomization under deploy/k8s offline (kubectl kustomize) and
# validates every object against the Kubernetes schemas (the Prometheus Operator's for PodMonitor),
# unknown fields included, and checks the Grafana dashboards' queries (dashboard.mjs; parsed by
# promtool when it is installed); first proves on fixtures that the checks fail where they must.
# Installs its npm packages (package-lock.json) when they are missing or stale.
#   tests/k8s/run.sh [SOURCE_ROOT]          the whole test
#   tests/k8s/run.sh --install-only         only the npm packages (for render.mjs users)
# KUBECTL names the kubectl binary (default: kubectl on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
install_only=0
if [ "${1:-}" = "--install-only" ]; then
  install_only=1
  shift
fi
root="$(cd "${1:-$here/../..}" && pwd)"
kubectl="${KUBECTL:-kubectl}"

fail() {
  echo "k8s: FAIL: $*" >&2
  exit 1
}

for cmd in node npm; do
  command -v "$cmd" >/dev/null ||
    fail "$cmd not found: install Debian's nodejs and npm (scripts/deps.sh does)"
done

# npm ci when node_modules does not hold exactly what package-lock.json pins; under a lock, since
# other tests may call this at the same time.
install_packages() {
  local stamp="$here/node_modules/.ringd-package-lock.json"
  if cmp -s "$here/package-lock.json" "$stamp"; then
    return 0
  fi
  echo "k8s: npm ci --prefix $here" >&2
  npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >&2 ||
    fail "npm ci --prefix $here failed (the npm registry must be reachable)"
  cp "$here/package-lock.json" "$stamp"
}
export -f install_packages fail
export here
flock "$here" bash -c install_packages
[ "$install_only" -eq 1 ] && exit 0

command -v "$kubectl" >/dev/null ||
  fail "$kubectl not found: install Debian's kubernetes-client (scripts/deps.sh does)"
echo "k8s: node $(node --version), $("$kubectl" version --client --short 2>/dev/null ||
  "$kubectl" version --client 2>&1 | head -1)"

# The unknown-field check relies on the validators reading every property they define.
node "$here/selfcheck.mjs"

# Every fixture with an `expected` file must fail with exactly those problem lines; the others
# must pass. Run from tests/k8s so that the lines name fixtures/NAME.
cd "$here"
for dir in fixtures/*/; do
  dir="${dir%/}"
  set +e
  out="$(node validate.mjs "$dir" 2>&1)"
  rc=$?
  set -e
  if [ -f "$dir/expected" ]; then
    got="$(grep '^FAIL ' <<<"$out" | sort || true)"
    want="$(sort "$dir/expected")"
    if [ "$rc" -ne 1 ] || [ "$got" != "$want" ]; then
      printf '%s\n' "$out"
      fail "$dir: validate.mjs must exit 1 with exactly these problems (exit $rc):"$'\n'"$want"
    fi
    echo "k8s: ok: $dir is rejected: $(tr '\n' ';' <<<"$want" | sed 's/;$//')"
  else
    if [ "$rc" -ne 0 ]; then
      printf '%s\n' "$out"
      fail "$dir: validate.mjs must pass (exit $rc)"
    fi
    echo "k8s: ok: $dir is valid"
  fi
done

# Likewise for the dashboard check: each fixtures/dashboard-*.json fails with exactly the lines of
# its .expected.
for json in fixtures/dashboard-*.json; do
  set +e
  out="$(node dashboard.mjs "$json" 2>&1)"
  rc=$?
  set -e
  got="$(grep '^FAIL ' <<<"$out" | sort || true)"
  want="$(sort "${json%.json}.expected")"
  if [ "$rc" -ne 1 ] || [ "$got" != "$want" ]; then
    printf '%s\n' "$out"
    fail "$json: dashboard.mjs must exit 1 with exactly these problems (exit $rc):"$'\n'"$want"
  fi
  echo "k8s: ok: $json is rejected ($(wc -l <<<"$want") problems)"
done

# The manifests themselves: every directory with a kustomization (the base, the overlays, the
# monitoring add-on, the example Job), so that a new overlay is validated without a change here.
cd "$root"
mapfile -t dirs < <(find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)
[ "${#dirs[@]}" -gt 0 ] || fail "no kustomization.yaml under $root/deploy/k8s"
node "$here/validate.mjs" "${dirs[@]}" ||
  fail "deploy/k8s does not validate (problems above)"

# The dashboards: their queries with the variables replaced, then parsed by Prometheus's parser.
mapfile -t dashboards < <(find deploy/k8s -name '*dashboard*.json' | sort)
[ "${#dashboards[@]}" -gt 0 ] || fail "no *dashboard*.json under $root/deploy/k8s"
rules="$(mktemp)"
trap 'rm -f "$rules"' EXIT
node "$here/dashboard.mjs" --rules "$rules" "${dashboards[@]}" ||
  fail "the dashboards do not check (problems above)"
if command -v promtool >/dev/null; then
  promtool check rules "$rules" >&2 ||
    fail "promtool cannot parse a dashboard query (above; rules are named dashboard_UID:panel_ID:REFID)"
  echo "k8s: ok: promtool parses every dashboard query"
else
  echo "k8s: promtool not found: dashboard queries not parsed (install Debian's prometheus)"
fi
