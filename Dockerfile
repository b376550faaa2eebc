# gateway container image — see README.md, "Deployment".
#
#   docker build -t gateway:latest --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run --rm -p 8080:8080 -p 9090:9090 -e GATEWAY_UPSTREAM=http://backend:8081 gateway:latest
#
# The build stage runs deploy/build.sh, the same command `make lint-deploy`
# runs and checks (static binary, version stamped) on machines without Docker.
#
# Configuration: every `gateway serve` flag is also an environment variable
# GATEWAY_<FLAG> (dashes become underscores); a flag on the command line wins.
#   GATEWAY_UPSTREAM          upstream base URL, e.g. http://backend:8081 (required
#                             unless --demo-upstream)
#   GATEWAY_CONFIG            rule file (default here: /etc/gateway/ratelimiter-rule.yaml;
#                             mount a directory at /etc/gateway to replace it and keep
#                             hot reload working — not a single-file bind mount)
#   GATEWAY_LISTEN            proxy address (default :8080)
#   GATEWAY_ADMIN_LISTEN      admin address: /healthz /readyz /rules /metrics (:9090 here,
#                             so that probes and Prometheus reach it from outside the
#                             container; the binary's own default is 127.0.0.1:9090)
#   GATEWAY_ADMIN_TOKEN       bearer token of POST /rules/reload; with it set, GET /rules,
#                             /top and /usage need it too (keep it in a secret)
#   GATEWAY_STORE             memory | redis
#   GATEWAY_REDIS_URL         redis://[[user]:password@]host[:port][/db], rediss:// for TLS
#   GATEWAY_REDIS_PASSWORD    Redis password (replaces the URL's; keep it in a secret)
#   GATEWAY_FAIL_MODE         open | closed | local, when Redis fails
#   GATEWAY_SHUTDOWN_TIMEOUT  drain on SIGTERM (default 30s)
#   GATEWAY_DRAIN_DELAY       on SIGTERM, keep serving this long with /readyz 503
#                             before the listener closes (default 0; for load
#                             balancers that poll /readyz)
#   GATEWAY_TRUSTED_PROXIES, GATEWAY_APP_HEADER, GATEWAY_REDIS_TIMEOUT,
#   GATEWAY_UPSTREAM_TIMEOUT, GATEWAY_ACCESS_LOG, GATEWAY_LOG_FORMAT, GATEWAY_LOG_LEVEL, ...
#                             (`gateway serve --help` lists them all)

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# A patched dependency that go.mod replaces (third_party/go-zookeeper/zk/PATCHES.md).
COPY third_party ./third_party
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY configs ./configs
COPY deploy/build.sh ./deploy/build.sh
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION OUT=/out/gateway sh deploy/build.sh
# /bin/ratelimit, where envoyproxy/ratelimit's image has its binary: run by
# that name (Envoy Gateway runs /bin/ratelimit), the gateway serves `rls`
# from envoyproxy/ratelimit's environment (docs/rls.md, "Running as
# envoyproxy/ratelimit"). A symlink, copied as one with its directory.
RUN mkdir -p /out/bin && ln -s /gateway /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /gateway
COPY --from=build /out/bin/ /bin/
COPY configs/ratelimiter-rule.yaml /etc/gateway/ratelimiter-rule.yaml
USER nonroot:nonroot
# 8080: the proxy (--listen); 9090: the admin port (--admin-listen), on every
# interface of the container: loopback would be out of reach of probes and
# Prometheus. Publish it only where they run. As /bin/ratelimit: 8081 gRPC,
# 8080 HTTP (/healthcheck), 6070 debug.
ENV GATEWAY_ADMIN_LISTEN=:9090
EXPOSE 8080 9090
ENTRYPOINT ["/gateway"]
CMD ["serve", "--config", "/etc/gateway/ratelimiter-rule.yaml"]
