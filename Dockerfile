# syntax=docker/dockerfile:1
# envoy-rls: a small static image that runs as a non-root user.
#   docker build -t ghcr.io/envoy-rls/envoy-rls:dev \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#   docker run --rm -p 8081:8081 -p 8080:8080 -v "$PWD/config/examples:/etc/envoy-rls/rules:ro" ghcr.io/envoy-rls/envoy-rls:dev
# Stage 1 compiles without cgo (a static binary); stage 2 is distroless
# "static" (CA certificates, tzdata, /etc/passwd with nonroot; no shell, no
# package manager). VERSION, REVISION and DATE are what `envoy-rls version`,
# the start-up log line and envoy_rls_build_info report ("devel"/"unknown"
# when not given). Releases use release.Dockerfile via goreleaser instead.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source edit does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=""
ARG REVISION=""
ARG DATE=""
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    bi=github.com/envoy-rls/envoy-rls/internal/buildinfo && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w -X $bi.version=$VERSION -X $bi.revision=$REVISION -X $bi.date=$DATE" \
      -o /out/envoy-rls ./cmd/envoy-rls && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w" -o /out/healthcheck ./deploy/healthcheck && \
    scripts/third-party-notices.sh /out/THIRD_PARTY_NOTICES && cp LICENSE /out/LICENSE

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/envoy-rls /usr/local/bin/envoy-rls
COPY --from=build /out/healthcheck /usr/local/bin/healthcheck
# /bin/ratelimit, a link to the binary: the reference service's entry point,
# under which envoy-rls reads the reference's environment (docs/migration.md).
# A directory is copied so that the link stays a link.
COPY deploy/image/bin/ /bin/
COPY --from=build /out/LICENSE /out/THIRD_PARTY_NOTICES /usr/share/doc/envoy-rls/
# distroless' nonroot user; numeric, so Kubernetes runAsNonRoot can verify it.
USER 65532:65532
# gRPC RateLimitService, then admin HTTP (/healthz, /readyz, /metrics, /config).
EXPOSE 8081 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/healthcheck", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/envoy-rls"]
CMD ["serve", "--config", "/etc/envoy-rls/rules"]
