# One image for both programs:
# - the installer: the assisted-service agent runs it with podman on every host, as it runs the
#   Go installer (`podman run --privileged --pid=host --net=host -v /dev:/dev:rw ... IMAGE <flags>`);
# - the assisted-installer-controller: the Job the bootstrap host deploys runs the image's
#   entrypoint without arguments (our Job manifest names no command), which the binary takes as
#   the controller (the agent always passes flags).
#
# Two builds of this one file (docs/src/container-image.md):
# - `make image-upstream` (a connected machine): the defaults below. The binary is compiled in
#   BUILDER_IMAGE; the runtime is UBI 9 minimal with its packages and `oc` downloaded.
# - `make image` (offline): `--build-arg BINARY=prebuilt` takes the binary cargo built on this
#   machine (stripped into target/image/installer); `--build-arg RUNTIME=<local image>` is a
#   Debian root made with mmdebstrap and imported with podman, holding the same programs
#   (scripts/image.sh). No `oc`: it cannot be downloaded offline.
ARG BUILDER_IMAGE=docker.io/library/rust:1-bookworm
ARG UBI_IMAGE=registry.access.redhat.com/ubi9/ubi-minimal
# The stage the binary comes from: `build` compiles it here, `prebuilt` copies it in.
ARG BINARY=build
# The runtime base: the `ubi` stage below, or a local image with the same programs.
ARG RUNTIME=ubi

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin assisted-installer \
    && mkdir -p /out && strip --strip-debug -o /out/installer target/release/assisted-installer

FROM scratch AS prebuilt
COPY target/image/installer /out/installer

FROM ${BINARY} AS binary

FROM ${UBI_IMAGE} AS ubi
# The OpenShift client (oc, kubectl): the controller's reboot count, must-gather and OLM
# manifest apply. Pick the build's architecture and version with --build-arg OC_URL=….
ARG OC_URL=https://mirror.openshift.com/pub/openshift-v4/x86_64/clients/ocp/stable/openshift-client-linux.tar.gz
# util-linux: nsenter, through which every host command runs in the host's namespaces (as Go's
#   do), and losetup, which attaches a disk-image file given to write-image;
# ca-certificates: the https roots (the host's /etc/pki, mounted by the agent, replaces them);
# bash, tar, gzip: the controller runs `oc` through `bash -c` and tars must-gather's output.
RUN microdnf install -y util-linux ca-certificates bash tar gzip && microdnf clean all
RUN curl -fsSL "$OC_URL" | tar -xz -C /usr/bin oc kubectl

FROM ${RUNTIME}
COPY --from=binary /out/installer /usr/bin/installer
# Go's entrypoint paths: the installer image's /usr/bin/installer (above) and the controller
# image's names, all the same binary.
RUN ln -s installer /usr/bin/assisted-installer-controller \
    && ln -s /usr/bin/installer /assisted-installer-controller
ENTRYPOINT ["/usr/bin/installer"]
