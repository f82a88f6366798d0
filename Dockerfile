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
ENTRYPOINT ["/usr/local/bin/briefrail"]
CMD ["run"]
