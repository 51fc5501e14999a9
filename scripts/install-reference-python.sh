#!/usr/bin/env bash
# Installs the Python reference the model tests compare against
# (scripts/reference-requirements.txt: transformers, safetensors, tokenizers)
# into the venv scripts/install-torch-cuda.sh made, whose torch is the
# reference's torch; non-interactively, never into the system's Python.
# Installed once per version of the requirements file (a stamp in the venv
# named after its hash); later runs take milliseconds.
#
# Usage:  scripts/install-reference-python.sh VENV
#   prints, as its last line, the interpreter the tests want:
#     ACCELERATE_REFERENCE_PYTHON=VENV/bin/python
# tests/models run their Python side with $ACCELERATE_REFERENCE_PYTHON and
# report themselves skipped when it is unset (docs/models.md).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
requirements=$repo_root/scripts/reference-requirements.txt

say() { printf 'install-reference-python: %s\n' "$*" >&2; }
die() { printf 'install-reference-python: error: %s\n' "$*" >&2; exit 1; }

(($# == 1)) || die "usage: $0 VENV (the TORCH_CUDA_VENV install-torch-cuda.sh prints)"
venv=$1
[[ -x "$venv/bin/python" ]] || die "no venv at $venv (run scripts/install-torch-cuda.sh first)"
[[ -f "$requirements" ]] || die "$requirements not found"

hash=$(sha256sum "$requirements" | cut -c1-12)
stamp=$venv/.accelerate-reference-$hash

if [[ ! -f "$stamp" ]]; then
  say "installing $(grep -Ev '^\s*(#|$)' "$requirements" | head -n3 | tr '\n' ' ')... into $venv"
  t0=$SECONDS
  # The venv's torch must stay as install-torch-cuda.sh pinned it: a
  # requirement that wanted another would fail here instead of replacing it.
  torch_pin=$("$venv/bin/python" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))')
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    "$venv/bin/python" -m pip install -q --no-cache-dir -r "$requirements" \
    -c <(echo "$torch_pin") </dev/null ||
    die "pip install -r $requirements failed"
  "$venv/bin/python" -c 'import transformers, safetensors, tokenizers, accelerate' ||
    die "the reference packages do not import in $venv"
  rm -f -- "$venv"/.accelerate-reference-*
  touch "$stamp"
  say "installed in $((SECONDS - t0)) s"
fi

echo "ACCELERATE_REFERENCE_PYTHON=$venv/bin/python"
