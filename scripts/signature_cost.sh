#!/bin/bash
# The cost of checking an image's OpenPGP signature: `write-image --image-url` of the bench xz
# image (1.2 GB raw; `make images` or the benches make it) served on 127.0.0.1, onto a
# disk-image file, with its signature (an ed25519 key made here by gpg) against `--sha256`
# only; three alternating runs each, printed as "<how> <wall s> <user s> <sys s>".
# Usage: scripts/signature_cost.sh [release binary] (build it with cargo build --release).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$repo/target/release/assisted-installer}
img=$(ls "$repo"/target/testdata-cache/v1-ss512-root1100-*/rhcos-metal.x86_64.raw.xz | head -1)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/srv" "$work/gnupg" && chmod 700 "$work/gnupg"
export GNUPGHOME=$work/gnupg
ln "$img" "$work/srv/signed.raw.xz" 2>/dev/null || cp "$img" "$work/srv/signed.raw.xz"
ln "$img" "$work/srv/plain.raw.xz" 2>/dev/null || cp "$img" "$work/srv/plain.raw.xz"
gpg --batch --passphrase '' --quick-gen-key "bench <bench@example.com>" ed25519 sign never 2>/dev/null
gpg --batch --armor --export bench@example.com >"$work/key.asc"
gpg --batch --detach-sign -o "$work/srv/signed.raw.xz.sig" "$work/srv/signed.raw.xz"
sha=$(sha256sum "$img" | cut -d' ' -f1)
(cd "$work/srv" && exec python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1) &
sleep 1
truncate -s 1300M "$work/target.img"
one() {
  /usr/bin/time -f "%e %U %S" -o "$work/t" "$bin" write-image "$@" "$work/target.img" \
    >"$work/out" 2>"$work/err" || { cat "$work/err"; exit 1; }
  cat "$work/t"
}
url=http://127.0.0.1:8765
for _ in 1 2 3; do
  echo "signed $(one --image-url $url/signed.raw.xz --signing-key "$work/key.asc")"
  grep -q "OpenPGP signature .*: good" "$work/out" || { echo "no good signature"; exit 1; }
  echo "sha256 $(one --image-url $url/plain.raw.xz --sha256 "$sha")"
done
