#!/usr/bin/env bash
# Encode throughput of accelerate::Tokenizer against Hugging Face `tokenizers`
# (one thread each) on the Brown corpus, for GPT-2-, Llama 3-, BERT- and
# Llama 2/Mistral-like tokenizers trained on the corpus by
# tests/text/tokenizer_reference.py.
#   bench/text/run_tokenizer_bench.sh [BUILD_DIR] [BROWN_DIR]
# Needs ACCELERATE_REFERENCE_PYTHON (scripts/install-reference-python.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
brown=${2:-${ACCELERATE_BROWN_DIR:-$root/data/brown}}
python=${ACCELERATE_REFERENCE_PYTHON:?set ACCELERATE_REFERENCE_PYTHON}
work=$build/tokenizer-bench
if [ ! -f "$work/bert/tokenizer.json" ]; then
  mkdir -p "$work"
  "$python" "$root/tests/text/tokenizer_reference.py" configs "$work" "$brown"
fi
"$build/bench/text/tokenizer_bench" "$work" "$brown" "$python"
