#!/usr/bin/env bash
# Builds the container image from ./Dockerfile and tags it $IMAGE
# (default localhost/assisted-installer:latest).
#   scripts/image.sh offline    `make image`: no registry needed. The binary cargo builds here
#                               (incremental), stripped; the runtime a local Debian root
#                               (mmdebstrap, imported once with podman, then cached).
#   scripts/image.sh upstream   `make image-upstream`: the Dockerfile's defaults (Rust builder
#                               image, UBI 9 minimal runtime, oc downloaded); needs the registries.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
mode=${1:-offline}
image=${IMAGE:-localhost/assisted-installer:latest}
command -v podman >/dev/null || { echo "podman is not installed: cannot build $image (bash .ci/install-deps installs it)" >&2; exit 1; }
source scripts/podman-env.sh

# The offline runtime: Debian's essential set (bash, tar, gzip, util-linux's nsenter; libc for
# the binary) plus ca-certificates (https roots) and mount (losetup, for write-image onto a
# disk-image file). The CA bundle moves to UBI's path, /etc/pki/tls/certs/ca-bundle.crt, so the
# host's /etc/pki that the agent mounts replaces it there too; Debian's path links to it. Docs,
# man pages and locales are left out. Tagged by a digest of this recipe: a changed recipe makes
# a new base, an unchanged one is reused.
suite=bookworm
recipe=(--variant=essential --include=ca-certificates,mount
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='mkdir -p "$1/etc/pki/tls/certs"'
  --customize-hook='mv "$1/etc/ssl/certs/ca-certificates.crt" "$1/etc/pki/tls/certs/ca-bundle.crt"'
  --customize-hook='ln -s /etc/pki/tls/certs/ca-bundle.crt "$1/etc/ssl/certs/ca-certificates.crt"'
  "$suite")

offline_base() {
  local tag
  tag="localhost/assisted-installer-base:$suite-$(printf '%s\n' "${recipe[@]}" | sha256sum | cut -c1-12)"
  if ! podman image exists "$tag"; then
    command -v mmdebstrap >/dev/null || { echo "mmdebstrap is not installed (bash .ci/install-deps installs it)" >&2; exit 1; }
    mkdir -p target/image
    echo "making the runtime base $tag with mmdebstrap (once)" >&2
    mmdebstrap --quiet "${recipe[@]}" target/image/base.tar >&2
    podman import --quiet \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      target/image/base.tar "$tag" >/dev/null
    rm -f target/image/base.tar
  fi
  echo "$tag"
}

case $mode in
  offline)
    cargo build --release --locked --bin assisted-installer
    mkdir -p target/image
    # The release profile keeps line tables for backtraces: 130 MiB of them, left out here.
    strip --strip-debug -o target/image/installer.tmp target/release/assisted-installer
    mv target/image/installer.tmp target/image/installer
    base=$(offline_base)
    podman build --quiet --file Dockerfile --tag "$image" \
      --build-arg BINARY=prebuilt --build-arg RUNTIME="$base" \
      --label "io.assisted-installer.binary-sha256=$(sha256sum target/image/installer | cut -d' ' -f1)" .
    ;;
  upstream)
    podman build --file Dockerfile --tag "$image" .
    ;;
  *)
    echo "usage: $0 offline|upstream" >&2
    exit 2
    ;;
esac
echo "built $image ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
