# syntax=docker/dockerfile:1
# Multi-stage build: compile a release binary with the official Swift image, run it on slim Debian.
# Both stages are Debian 12 (bookworm), so the runtime's libcurl4/libssl3 match what the build linked.

# The Swift release the project is built and tested with (CI: `swift --version`; Tests/e2e/test_deploy.py checks
# that the two agree), so the image is built from what was tested.
FROM swift:6.3.1-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libcurl4-openssl-dev libssl-dev libpacparser-dev libhiredis-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
RUN swift build -c release --product authproxy --static-swift-stdlib \
 && install -D -m 0755 "$(swift build -c release --show-bin-path)/authproxy" /out/authproxy

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libcurl4 libssl3 libpacparser1 libhiredis0.14 ca-certificates curl krb5-user \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 authproxy \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/authproxy --shell /usr/sbin/nologin authproxy \
 && install -d -o authproxy -g authproxy -m 0700 /var/lib/authproxy \
 && install -d -m 0755 /etc/authproxy
COPY --from=build /out/authproxy /usr/local/bin/authproxy
# The example configuration, made container-friendly: listen on all interfaces but serve only loopback, which
# is what a sidecar in the same pod (or network namespace) uses; state in the volume, JSON logs. To share the
# proxy, mount a config that names the clients' network in allow_clients and/or adds [[client]] entries.
COPY proxy.conf.example /etc/authproxy/proxy.conf
RUN sed -i \
      -e 's|^listen = \["127.0.0.1:3128"\]|listen = ["0.0.0.0:3128"]|' \
      -e 's|^# allow_clients = .*|allow_clients = ["127.0.0.0/8", "::1/128"]|' \
      -e 's|^state_dir = "./state"|state_dir = "/var/lib/authproxy"|' \
      -e 's|^format = "text"|format = "json"|' \
      /etc/authproxy/proxy.conf \
 && /usr/local/bin/authproxy check --config /etc/authproxy/proxy.conf
# Numeric, so Kubernetes' runAsNonRoot can verify it without runAsUser (a user name cannot be checked).
USER 10001:10001
# File descriptors: about 2 per proxied connection (see "File descriptors" in docs/operations.md). An image cannot set
# them; the runtime does: docker run --ulimit nofile=65536:65536 (compose: ulimits: nofile: 65536). authproxy
# raises its soft limit to the hard one at start and warns when that cannot cover max_connections.
VOLUME ["/var/lib/authproxy"]
# 3128: the proxy. 9128: the admin listener (health, readiness, metrics, status), when the configuration has
# an [admin] section, as the examples in deploy/ do (the built-in configuration has none).
EXPOSE 3128 9128
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
  CMD curl -fsS --noproxy '*' http://127.0.0.1:3128/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/authproxy"]
CMD ["serve", "--config", "/etc/authproxy/proxy.conf"]
