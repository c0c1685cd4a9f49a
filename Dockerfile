# kube-rdma: one small image holding every binary.
#
#   kube-rdma-device-plugin   device plugin (DaemonSet; runs as root: the kubelet socket is root-owned)
#   kube-rdma-cni             CNI plugin; `kube-rdma-cni install --dest DIR` copies itself to the host
#   kube-rdma-operator        `agent` (DaemonSet) and `controller` (Deployment)
#   kubectl-rdma              kubectl plugin (copy it out: podman cp / docker cp)
#
# The default build needs no network at all: its stage is FROM scratch and takes statically linked
# binaries from dist/ in the build context:
#
#   VERSION=0.1.0 scripts/delivery/build-dist   # release build with +crt-static into dist/
#   podman build --build-arg VERSION=0.1.0 -t kube-rdma:0.1.0 .
#
# VERSION must be the same in both: build-dist compiles it into --version, the build arg labels the
# image. arm64: `scripts/delivery/build-dist --arch aarch64` and `podman build --platform linux/arm64`
# (this stage runs nothing, so no emulation is needed).
#
# Where a Rust base image can be pulled, build from source instead (stage `from-source`):
#
#   podman build --target from-source --build-arg VERSION=0.1.0 -t kube-rdma:0.1.0 .
#
# Both stages copy the same files to the same places; the chart refers to /usr/bin/<binary>.

ARG VERSION=0.1.0
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm

# ---- optional: build from source (needs to pull RUST_IMAGE and reach crates.io) -----------------
FROM ${RUST_IMAGE} AS builder
WORKDIR /src
# Every workspace member, the test-only lab and e2e too: cargo loads each member's manifest and
# --locked checks the whole Cargo.lock, even for `-p` builds that never compile them.
# scripts/delivery/dockerfile_test.py runs the cargo build below on exactly these COPY lines.
COPY Cargo.toml Cargo.lock ./
COPY plumbing plumbing
COPY nic nic
COPY device-plugin device-plugin
COPY cni cni
COPY operator operator
COPY lab lab
COPY e2e e2e
ARG VERSION
# glibc linked statically: the final stage has no libc. --target keeps proc macros dynamic.
# The builder runs on the target platform (native or emulated), so its own triple is the target.
ENV RUSTFLAGS="-C target-feature=+crt-static" KUBE_RDMA_VERSION=${VERSION}
RUN triple="$(uname -m)-unknown-linux-gnu" \
 && cargo build --locked --release --target "$triple" --bins \
        -p kube-rdma-device-plugin -p kube-rdma-cni -p kube-rdma-operator \
 && mkdir /dist \
 && cd "target/$triple/release" \
 && cp kube-rdma-device-plugin kube-rdma-cni kube-rdma-operator kubectl-rdma /dist/

FROM scratch AS from-source
ARG VERSION
COPY --from=builder /dist/ /usr/bin/
LABEL org.opencontainers.image.title="kube-rdma" \
      org.opencontainers.image.description="RoCE/RDMA over SR-IOV VFs for Kubernetes: device plugin, CNI, operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# Non-root by default; the chart runs only the device plugin, the CNI installer and (with
# Enforce) the agent as root, each with every capability dropped but what it needs.
USER 65532:65532

# ---- default: prebuilt static binaries from dist/ (offline) ---------------------------------------
FROM scratch AS image
ARG VERSION
COPY dist/kube-rdma-device-plugin dist/kube-rdma-cni dist/kube-rdma-operator dist/kubectl-rdma /usr/bin/
LABEL org.opencontainers.image.title="kube-rdma" \
      org.opencontainers.image.description="RoCE/RDMA over SR-IOV VFs for Kubernetes: device plugin, CNI, operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
USER 65532:65532
