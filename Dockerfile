# Trident's container image: static binaries in an empty (scratch) image,
# run as a non-root user. Build it with `make image`, which first runs
# `make build-static` (CGO_ENABLED=0 binaries in bin/static, stamped with
# the version) and then `podman build` of this file; `docker build .` works
# the same after `make build-static`. There is no build stage: the binaries
# are built on the host, so the build needs no base image from a registry.
#
# The image holds /trident, /tridentctl, /etc/trident/trident.yaml (every
# listener on all interfaces, data in /data) and the /data volume, owned by
# uid/gid 65532. No CA certificates: Trident's own TLS (client listeners,
# inter-node mTLS) uses the certificate and CA files it is given, so system
# roots matter only for outgoing TLS to public servers (an OAuth 2 provider
# without oauth2.ca_cert_file, a shovel to amqps://): mount a CA bundle at
# /etc/ssl/certs/ca-certificates.crt for those.
FROM scratch

ARG VERSION=devel
LABEL org.opencontainers.image.title="Trident" \
      org.opencontainers.image.description="Multi-protocol message broker: AMQP 0-9-1, MQTT 3.1.1/5, STOMP" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY bin/static/trident bin/static/tridentctl /
COPY deploy/trident.yaml /etc/trident/trident.yaml
COPY --chown=65532:65532 bin/static/data /data
ENV TRIDENT_CONFIG=/etc/trident/trident.yaml

USER 65532:65532
VOLUME ["/data"]

# AMQP, AMQPS; MQTT, MQTTS; STOMP, STOMPS; management API (HTTP, HTTPS);
# Web-STOMP (ws, wss); Web-MQTT (ws, wss); Prometheus (HTTP, HTTPS); the
# inter-node ports: gossip (TCP and UDP) and Raft. The TLS ones listen only
# once certificates are configured.
EXPOSE 5672 5671 5552 5551 1883 8883 61613 61614 15672 15671 15674 15673 15675 15676 15692 15691 25672/tcp 25672/udp 25673

# GET /api/health/checks/virtual-hosts on loopback with default_user's
# credentials (TRIDENT_USER and TRIDENT_PASSWORD win): see
# `trident healthcheck -h`.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["/trident", "healthcheck"]

# SIGTERM: clients are told (AMQP 320), the store is flushed; allow the
# stop at least 30 s (docker stop -t 30, compose stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/trident"]
