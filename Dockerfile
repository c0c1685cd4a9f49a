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
#   scripts/delivery/build-dist            # cargo build with +crt-static into dist/
#   podman build --build-arg VERSION=0.1.0 -t kube-rdma:0.1.0 .
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
COPY Cargo.toml Cargo.lock ./
COPY nic nic
COPY device-plugin device-plugin
COPY cni cni
COPY operator operator
COPY lab lab
# glibc linked statically: the final stage has no libc. --target keeps proc macros dynamic.
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --locked --release --target x86_64-unknown-linux-gnu --bins \
        -p kube-rdma-device-plugin -p kube-rdma-cni -p kube-rdma-operator \
 && mkdir /dist \
 && cd target/x86_64-unknown-linux-gnu/release \
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
