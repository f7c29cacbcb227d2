#!/usr/bin/env bash
# Installs the Debian packages ringd needs to build, test and benchmark, when any is missing.
# Sourced by scripts/demo and scripts/test; safe to run again.
set -euo pipefail

RINGD_DEB_PACKAGES=(
  meson ninja-build pkg-config gcc g++ libc6-dev
  libevent-dev libprotobuf-c-dev protobuf-c-compiler libhiredis-dev libjson-c-dev
  libcriterion-dev redis-server
  openmpi-bin libopenmpi-dev
  python3 libsodium-dev libssl-dev iproute2 nftables
  python3-numpy python3-pytest python3-torch python3-torchvision
  python3-pip python3-setuptools python3-wheel python3-venv python3-wheel-whl
  clang libclang-rt-14-dev clang-format
  prometheus
  patchelf
  groff-base
)

# ringd_apt_install PACKAGE...: installs those of the packages that are missing.
ringd_apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The k8s test (tests/k8s/run.sh): kubectl renders deploy/k8s offline, node validates it. Each
# package only when its command is missing, so that a kubectl or node installed otherwise (another
# apt repository's, which would conflict with Debian's) is used as it is.
RINGD_K8S_DEB_PACKAGES=(kubectl:kubernetes-client node:nodejs npm:npm)

ringd_install_deps() {
  ringd_apt_install "${RINGD_DEB_PACKAGES[@]}"
  local need=() c
  for c in "${RINGD_K8S_DEB_PACKAGES[@]}"; do
    command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
  done
  [ ${#need[@]} -eq 0 ] || ringd_apt_install "${need[@]}"
}

# Extra packages of bench/net-peers.sh and bench/torch-peers.sh: iperf3 (the wire's ceiling),
# PyTorch (Gloo, DDP) and torchvision (ResNet-18).
RINGD_BENCH_DEB_PACKAGES=(iperf3 python3-torch python3-torchvision)

ringd_install_bench_deps() {
  ringd_apt_install "${RINGD_BENCH_DEB_PACKAGES[@]}"
}
