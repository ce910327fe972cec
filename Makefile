# The two commands a newcomer needs: `make demo` and `make test`. Both install what they need
# first (.ci/install-deps checks each tool and installs only what is missing, so it is quick on a
# machine that has everything). `.ci/run` is CI's entrypoint: it sets CI's strictness and runs
# `make test`.

CARGO ?= cargo
DEMO_DIR ?= target/demo

IMAGE ?= localhost/assisted-installer:latest
export IMAGE

.PHONY: test lint book demo bench bench-offline bench-guest bench-kexec images deps image image-upstream

# The whole suite: formatting, lints, the book, unit and integration tests. The loop-device tests need
# root; they skip with a message otherwise (CI sets AI_REQUIRE_ROOT_TESTS=1 so they cannot).
# The container tests (tests/container_image.rs) run the image `make image` builds first; without
# podman they skip with one line.
test: deps lint book
	@if command -v podman >/dev/null; then $(MAKE) --no-print-directory image; \
	else echo "podman is not installed: no image built, the container tests will skip"; fi
	$(CARGO) test --locked

# The book (docs/, mdBook) into target/book. Its links, the paths it names and every flag's line
# are checked by the tests (tests/docs.rs; src/cli/docs_tests.rs); this proves it builds.
book: deps
	@out=$$(mdbook-mermaid install docs 2>&1) || { echo "$$out"; exit 1; } # its usage hint only on failure
	mdbook build docs

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

# Generate a small CoreOS-like image, serve it on 127.0.0.1, write it to a 256 MiB disk-image
# file with write-image, and print the summary.
demo: deps
	$(CARGO) build --release --locked --bin assisted-installer --example make-test-image
	bash scripts/demo.sh $(DEMO_DIR)

# Criterion benches on loop devices (root): >= 1 GiB images in each format, with the stage
# limits (decoder alone, gzip -dc, dd oflag=direct) measured in the same run; then the offline
# install from the live image (its root a squashfs, as on the ISO) against coreos-installer, dd,
# the objects read alone and SHA-256 (bench-offline); and the live install with one object
# reader thread against eight in a QEMU guest whose kernel decompresses squashfs on every CPU
# (bench-guest); and a kexec reboot into the written system against a reboot through the
# firmware (OVMF), in the same guest rig (bench-kexec).
bench:
	$(CARGO) bench --locked --bench write_image
	$(CARGO) bench --locked --bench offline
	$(CARGO) bench --locked --bench guest_readers
	$(CARGO) bench --locked --bench kexec_reboot

bench-guest:
	$(CARGO) bench --locked --bench guest_readers

bench-kexec:
	$(CARGO) bench --locked --bench kexec_reboot

bench-offline:
	$(CARGO) bench --locked --bench offline

# The container image from ./Dockerfile, offline: the binary cargo builds here (incremental), on a
# Debian runtime base made locally with mmdebstrap (once), tagged $(IMAGE). image-upstream
# builds the shippable one with the Dockerfile's defaults (Rust builder, UBI 9 minimal, oc).
image: deps
	bash scripts/image.sh offline

image-upstream:
	bash scripts/image.sh upstream

# Build the test images (cached under target/testdata-cache) without running tests.
images:
	$(CARGO) run --release --locked --example make-test-image -- --sector-size 512
	$(CARGO) run --release --locked --example make-test-image -- --sector-size 4096

# What the build and the tests need: Debian packages, coreos-installer, rustfmt/clippy, Prism.
deps:
	bash .ci/install-deps
