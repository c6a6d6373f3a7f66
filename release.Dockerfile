# The release image, built by goreleaser (dockers_v2 in .goreleaser.yaml)
# from the static binaries it has already built: the build context holds
# them at $TARGETPLATFORM/ (linux/amd64/envoy-rls, ...). The runtime layout
# is the one of ./Dockerfile, which builds the same image from source.
FROM gcr.io/distroless/static-debian12:nonroot
ARG TARGETPLATFORM
COPY ${TARGETPLATFORM}/envoy-rls /usr/local/bin/envoy-rls
COPY ${TARGETPLATFORM}/healthcheck /usr/local/bin/healthcheck
# /bin/ratelimit, a link to the binary: the reference service's entry point,
# under which envoy-rls reads the reference's environment (docs/migration.md).
# A directory is copied so that the link stays a link.
COPY deploy/image/bin/ /bin/
COPY LICENSE bin/THIRD_PARTY_NOTICES /usr/share/doc/envoy-rls/
# distroless' nonroot user; numeric, so Kubernetes runAsNonRoot can verify it.
USER 65532:65532
# gRPC RateLimitService, then admin HTTP (/healthz, /readyz, /metrics, /config).
EXPOSE 8081 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/healthcheck", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/envoy-rls"]
CMD ["serve", "--config", "/etc/envoy-rls/rules"]
