# Multi-stage build: compile in the Rust image, ship only the binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src

# The dependencies first, in a layer of their own: it is rebuilt only when a manifest or the
# lockfile changes, not on every edit of the sources. Cargo loads the whole workspace even to
# build one binary, so the workspace member's manifest comes too; every target gets a stub.
# build.rs too: it makes cargo recompile the crate when migrations/ changes (embed_migrations!
# reads it at compile time), so the image's build is the repository's.
COPY Cargo.toml Cargo.lock askama.toml build.rs ./
COPY tools/Cargo.toml tools/Cargo.toml
RUN mkdir -p src tools/src/bin/briefrail-bench tools/src/bin/briefrail-faults \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && echo 'fn main() {}' > tools/src/bin/briefrail-bench/main.rs \
    && echo 'fn main() {}' > tools/src/bin/briefrail-faults/main.rs \
    && cargo build --release --locked --bin briefrail \
    && rm -rf src

# The real sources. Only the `briefrail` binary, without the `testing` feature: never
# `--workspace` (the `tools` member turns `testing` on). The touch makes cargo rebuild the
# crate over the stub: COPY may keep the files' older modification times.
COPY src src
COPY migrations migrations
COPY config config
COPY examples examples
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin briefrail

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
