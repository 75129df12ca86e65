# syntax=docker/dockerfile:1

# One image carrying all four controller binaries. Each Deployment in
# deploy/components/* selects its binary with `command`, so the image sets no
# ENTRYPOINT.
#
#   docker build -t ghcr.io/valkey-operator/valkey-operator:dev .
#
# Without Docker, `just image` (hack/operator-image.sh) builds the same image:
# it reads the --bin list, COPY destination, USER, EXPOSE and LABELs below, so
# keep them in this form. The binaries are static glibc builds (crt-static):
# TLS uses rustls with the ring provider, so nothing is needed at runtime.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder

# Rust target for the platform being built (set by BuildKit; amd64 when
# unset). The build runs on the target platform, so its gcc builds ring's C
# and assembly sources.
ARG TARGETARCH
RUN case "${TARGETARCH:-amd64}" in \
        amd64) echo x86_64-unknown-linux-gnu ;; \
        arm64) echo aarch64-unknown-linux-gnu ;; \
        *) echo "unsupported TARGETARCH: ${TARGETARCH}" >&2; exit 1 ;; \
    esac > /rust-target

WORKDIR /src
COPY . .

# The target directory is a cache mount (not part of the image layer), so the
# binaries are copied out to /out within the same RUN.
RUN --mount=type=cache,id=valkey-operator-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=valkey-operator-cargo-git,target=/usr/local/cargo/git \
    --mount=type=cache,id=valkey-operator-target-${TARGETARCH},target=/src/target \
    target="$(cat /rust-target)" \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "${target}" \
        --bin node-controller \
        --bin service-controller \
        --bin topology-controller \
        --bin pvc-resizer \
 && mkdir -p /out \
 && for bin in node-controller service-controller topology-controller pvc-resizer; do \
        cp "target/${target}/release/${bin}" "/out/${bin}"; \
    done

FROM gcr.io/distroless/static-debian12:nonroot

ARG VERSION=dev
ARG REVISION=unknown

LABEL org.opencontainers.image.title="valkey-operator" \
      org.opencontainers.image.description="Kubernetes operator for Valkey: node-controller, service-controller, topology-controller and pvc-resizer" \
      org.opencontainers.image.source="https://github.com/valkey-operator/valkey-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

COPY --from=builder /out/ /usr/local/bin/

USER 65532:65532

# Health (/healthz, /readyz) and metrics (/metrics) of every controller.
EXPOSE 8080
