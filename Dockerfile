# ringd image: ringd, ringctl, libringd (with ringd.h), ringd-bench and ringd-train on Debian 12.
#   docker build -t ringd:latest .
#   docker build --build-arg CUDA=1 -t ringd:cuda .    # with the CUDA kernels (deploy/k8s/overlays/gpu)
# The build stage has the compilers and -dev packages; the runtime stage only the shared libraries
# the binaries link and the installed tree. Runs as uid 10001 ("ringd"); deploy/k8s/README.md
# explains how that uid shares the socket directory with training pods.

# CUDA=1 compiles the CUDA kernels into the binaries (nvcc, the g++ it needs and cuda.h, from
# NVIDIA's Debian 12 repository). Either image runs on any node: the driver (libcuda.so.1) is not
# in the image but loaded at run time from what the NVIDIA container runtime mounts, and a node
# without one runs on the CPU (ringd says so in its log).
ARG CUDA=0

FROM debian:12-slim AS build
ARG CUDA

# The build packages of scripts/deps.sh, without the test suite's (-Dtests=false).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      meson ninja-build pkg-config gcc libc6-dev \
      libevent-dev libprotobuf-c-dev protobuf-c-compiler libhiredis-dev libjson-c-dev \
      libsodium-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*

RUN if [ "$CUDA" = 1 ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates curl \
      && curl -fsSLo /tmp/cuda-keyring.deb \
           https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
           g++ cuda-nvcc-13-0 cuda-cudart-dev-13-0 cuda-driver-dev-13-0 \
      && ln -s /usr/local/cuda-13.0 /usr/local/cuda \
      && rm -rf /var/lib/apt/lists/* /tmp/cuda-keyring.deb; \
    fi

WORKDIR /src
COPY . .

# Release build without NCCL; with CUDA when CUDA=1 (the CPU backend always).
# `meson install` puts ringd, ringctl, ringd-bench and ringd-train in bin, libringd.so* and
# libringd.a in lib and ringd.h in include, all under /usr/local.
RUN meson setup /build --buildtype=release -Dwerror=false -Dtests=false \
      -Dcuda="$([ "$CUDA" = 1 ] && echo enabled || echo disabled)" -Dnccl=disabled \
      --prefix=/usr/local --libdir=lib \
 && ninja -C /build \
 && meson install -C /build --no-rebuild --strip --destdir /dest

FROM debian:12-slim

LABEL org.opencontainers.image.title="ringd" \
      org.opencontainers.image.description="Per-node collective-communication daemon for data-parallel training" \
      org.opencontainers.image.licenses="Apache-2.0"

# Runtime libraries only: libevent core (ringd), protobuf-c (all), hiredis, libsodium and
# libcrypto (ringd), json-c (ringctl).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libevent-core-2.1-7 libevent-extra-2.1-7 libprotobuf-c1 libhiredis0.14 libsodium23 libssl3 libjson-c5 \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /dest/usr/local/ /usr/local/

# ldconfig: libringd.so.0 is found in /usr/local/lib. The user owns a /run/ringd of its own so
# that `docker run` works as is; in Kubernetes the hostPath volume is mounted over it.
RUN ldconfig \
 && groupadd --gid 10001 ringd \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin ringd \
 && install -d -o 10001 -g 10001 -m 0750 /run/ringd

USER 10001:10001
# Peer port (--listen); clients use the Unix socket /run/ringd/ringd.sock.
EXPOSE 7070
CMD ["ringd"]
