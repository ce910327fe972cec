# Sourced by scripts/image.sh; the container tests (tests/common/podman.rs) set the same.
# Settings this sandbox's podman needs and real hosts do not (harmless on them): runc with
# cgroupfs (the cgroups here are hybrid, which crun refuses), and a containers.conf that asks for
# no ulimits (they cannot be raised here). Nothing of the machine's configuration is changed:
# AI_PODMAN_FLAGS and CONTAINERS_CONF override them.
read -ra podman_flags <<<"${AI_PODMAN_FLAGS-"--runtime runc --cgroup-manager cgroupfs"}"
if [ -z "${CONTAINERS_CONF:-}" ]; then
  mkdir -p target/podman
  printf '[containers]\ndefault_ulimits = []\n' > target/podman/containers.conf
  export CONTAINERS_CONF="$PWD/target/podman/containers.conf"
fi
podman() { command podman "${podman_flags[@]}" "$@"; }
