#!/usr/bin/env bash
# Demo: generate a small CoreOS-like metal image, serve it over HTTP on 127.0.0.1, and write it
# with `assisted-installer write-image` to a disk-image file (or to the device given as $2).
set -euo pipefail
dir=${1:-target/demo}
target=${2:-}
mkdir -p "$dir"
bin=target/release/assisted-installer
echo "== generating a CoreOS-like image (512-byte sectors) into $dir"
target/release/examples/make-test-image --sector-size 512 --out "$dir" | tee "$dir/images.txt"
gz=$(awk '$1 == "gz" {print $2}' "$dir/images.txt")
sha=$(awk '$1 == "gz" {g = 1} g && $1 == "sha256" {print $2; exit}' "$dir/images.txt")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$(dirname "$gz")" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break; sleep 0.1; done
if [ -z "$target" ]; then
  target="$dir/disk.img"
  rm -f "$target"
  truncate -s 256M "$target"
fi
url="http://127.0.0.1:$port/$(basename "$gz")"
echo "== $bin write-image --image-url $url --sha256 $sha $target"
"$bin" write-image --image-url "$url" --sha256 "$sha" "$target"
echo "== partition table now on $target:"
sgdisk -p "$target" 2>/dev/null | tail -n 6 || true
