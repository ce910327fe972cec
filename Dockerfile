# The installer image: the assisted-service runs it with podman on every host, as it runs the Go
# installer (`podman run --privileged --pid=host --net=host -v /dev:/dev ... IMAGE <flags>`).
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin assisted-installer

FROM registry.access.redhat.com/ubi9/ubi-minimal
# util-linux: losetup/partx/wipefs for disk preparation; gdisk for diagnostics.
RUN microdnf install -y util-linux gdisk && microdnf clean all
COPY --from=build /src/target/release/assisted-installer /usr/bin/installer
ENTRYPOINT ["/usr/bin/installer"]
