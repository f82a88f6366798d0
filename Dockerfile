# Multi-stage build: compile in the Rust image, ship only the binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock askama.toml ./
COPY src src
# A workspace member: cargo loads the whole workspace even to build one binary.
COPY tools tools
COPY migrations migrations
COPY config config
COPY examples examples
RUN cargo build --release --locked --bin briefrail

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates procps \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 briefrail
COPY --from=build /src/target/release/briefrail /usr/local/bin/briefrail
USER briefrail
EXPOSE 8080
# The binary is the health check: this image has no curl or wget, and its /bin/sh (dash) no
# /dev/tcp. GET /readyz on http.bind (0.0.0.0 is asked on loopback); exit 0 ready, 1 not.
HEALTHCHECK --interval=10s --timeout=8s --start-period=10s --retries=5 \
    CMD ["/usr/local/bin/briefrail", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/briefrail"]
CMD ["run"]
