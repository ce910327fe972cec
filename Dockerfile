# One image for both programs:
# - the installer: the assisted-service agent runs it with podman on every host, as it runs the
#   Go installer (`podman run --privileged --pid=host --net=host -v /dev:/dev ... IMAGE <flags>`);
# - the assisted-installer-controller: the Job the bootstrap host deploys runs the image's
#   entrypoint without arguments, which the binary takes as the controller (the agent always
#   passes flags). Go's controller entrypoint paths are links to the same binary.
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin assisted-installer

FROM registry.access.redhat.com/ubi9/ubi-minimal
# The OpenShift client (oc, kubectl): the controller's must-gather, OLM manifest apply and
# reboot count. Pick the build's architecture and version with --build-arg OC_URL=….
ARG OC_URL=https://mirror.openshift.com/pub/openshift-v4/x86_64/clients/ocp/stable/openshift-client-linux.tar.gz
# util-linux: losetup/partx/wipefs for disk preparation; gdisk for diagnostics. bash, tar, gzip,
# rsync, which, procps, findutils: what the controller's commands use, as in Go's image.
RUN microdnf install -y util-linux gdisk bash tar gzip rsync which procps-ng findutils \
    && microdnf clean all
RUN curl -fsSL "$OC_URL" | tar -xz -C /usr/bin oc kubectl
COPY --from=build /src/target/release/assisted-installer /usr/bin/installer
RUN ln -s installer /usr/bin/assisted-installer-controller \
    && ln -s /usr/bin/installer /assisted-installer-controller
ENTRYPOINT ["/usr/bin/installer"]
