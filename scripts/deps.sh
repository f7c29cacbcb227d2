#!/usr/bin/env bash
# Installs the Debian packages ringd needs to build, test and benchmark, when any is missing.
# Sourced by scripts/demo and scripts/test; safe to run again.
set -euo pipefail

RINGD_DEB_PACKAGES=(
  meson ninja-build pkg-config gcc libc6-dev
  libevent-dev libprotobuf-c-dev protobuf-c-compiler libhiredis-dev libjson-c-dev
  libcriterion-dev redis-server
  openmpi-bin libopenmpi-dev
  python3 libsodium-dev iproute2 nftables
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

ringd_install_deps() {
  ringd_apt_install "${RINGD_DEB_PACKAGES[@]}"
}

# Extra packages of bench/net-peers.sh only: iperf3 (the wire's ceiling) and PyTorch (its Gloo).
RINGD_BENCH_DEB_PACKAGES=(iperf3 python3-torch)

ringd_install_bench_deps() {
  ringd_apt_install "${RINGD_BENCH_DEB_PACKAGES[@]}"
}
