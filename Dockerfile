# syntax=docker/dockerfile:1
#
# One small image with the three service binaries, running as a non-root
# user, no shell at run time:
#     docker build -t clarion .
# The load-test tools (demo, benchmarks, mock APNs / FCM) in their own image:
#     docker build --target load-tests -t clarion-load-tests .
# The build step (every binary, release profile): cargo build --release --locked --bins --workspace.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bins --workspace \
    && mkdir -p /out \
    && cp target/release/clarion-coordinator target/release/clarion-harvester \
          target/release/clarion-dispatcher target/release/clarion-demo \
          target/release/clarion-bench target/release/clarion-mock-apns \
          target/release/clarion-mock-fcm /out/

FROM gcr.io/distroless/cc-debian12:nonroot AS load-tests
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["clarion-bench"]
CMD ["--help"]

FROM gcr.io/distroless/cc-debian12:nonroot AS services
COPY --from=build /out/clarion-coordinator /out/clarion-harvester /out/clarion-dispatcher /usr/local/bin/
USER 65532:65532
EXPOSE 8080 8081 8082
CMD ["clarion-coordinator"]
