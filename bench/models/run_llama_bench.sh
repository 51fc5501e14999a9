#!/usr/bin/env bash
# Our Llama against transformers' LlamaForCausalLM on the same LibTorch
# version, side by side in one run (docs/models.md, "Speed"):
#   1. forward + backward tokens/s of a small Llama (8 layers, width 512,
#      grouped-query attention 8/4 heads, vocab 8192; batch 4 x 256 tokens
#      per process) on 1 and 2 processes: ours (2 processes through
#      `accelerate launch`, gradients averaged by the Accelerator) against
#      transformers with eager attention and with SDPA (2 processes:
#      DistributedDataParallel over gloo); threads = cores / processes on
#      both sides; rounds alternate which side runs first; medians.
#   2. load time and peak resident-memory rise of a ~1 GB checkpoint in
#      200 MB shards (written by transformers' save_pretrained): our
#      from_pretrained against transformers' from_pretrained.
#
#   bench/models/run_llama_bench.sh [BUILD_DIR]   (default: build-cuda if it
#       exists, whose LibTorch is the reference venv's torch, else build)
# Needs ACCELERATE_REFERENCE_PYTHON (scripts/install-reference-python.sh) and
# the build's llama_bench and accelerate targets. ROUNDS (default 3), STEPS
# (default 10), PROCESSES (default "1 2"; empty: the load comparison only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -n "${1:-}" ]]; then build=$1
elif [[ -x "$root/build-cuda/bench/models/llama_bench" ]]; then build=$root/build-cuda
else build=$root/build; fi
python=${ACCELERATE_REFERENCE_PYTHON:?set ACCELERATE_REFERENCE_PYTHON (scripts/install-reference-python.sh)}
rounds=${ROUNDS:-3}
steps=${STEPS:-10}
processes=${PROCESSES-1 2}
bench=$build/bench/models/llama_bench
launcher=$build/bin/accelerate
for tool in "$bench" "$launcher"; do
  [[ -x $tool ]] || { echo "run_llama_bench: $tool missing: build the llama_bench and accelerate targets" >&2; exit 2; }
done
work=$build/llama-bench
mkdir -p "$work"
[[ -f $work/speed/config.json ]] || "$python" "$root/bench/models/llama_twin.py" make "$work/speed"
[[ -f $work/checkpoint/model.safetensors.index.json ]] ||
  "$python" "$root/bench/models/llama_twin.py" make-checkpoint "$work/checkpoint"
cores=$(nproc)
batch=4 tokens=256 warmup=2
# A "result" line's field; the launcher prefixes rank 0's lines with "[rank0]: ".
field() { sed -nE "s/^(\\[rank0\\]: )?result .*$1=([0-9.e+-]+).*/\\2/p" | tail -n1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ -n $processes ]]; then
  echo "== forward + backward tokens/s: batch $batch x $tokens tokens per process, $steps steps after $warmup, $rounds rounds, $cores cores =="
  printf '%-9s %12s %16s %16s %9s %9s\n' processes ours "transformers eager" "transformers sdpa" "vs eager" "vs sdpa"
fi
for n in $processes; do
  ours=() eager=() sdpa=()
  for ((round = 0; round < rounds; round++)); do
    run_ours() {
      if ((n == 1)); then
        OMP_NUM_THREADS=$cores "$bench" step "$work/speed/config.json" $batch $tokens "$steps" $warmup
      else
        "$launcher" launch --cpu --num_processes "$n" --main_process_port $((29600 + round)) \
          "$bench" step "$work/speed/config.json" $batch $tokens "$steps" $warmup
      fi | field tokens_per_s
    }
    run_twin() {
      "$python" "$root/bench/models/llama_twin.py" step "$work/speed" $batch $tokens "$steps" $warmup "$1" "$n" |
        field tokens_per_s
    }
    if ((round % 2 == 0)); then
      ours+=("$(run_ours)") eager+=("$(run_twin eager)") sdpa+=("$(run_twin sdpa)")
    else
      sdpa+=("$(run_twin sdpa)") eager+=("$(run_twin eager)") ours+=("$(run_ours)")
    fi
  done
  o=$(printf '%s\n' "${ours[@]}" | median)
  e=$(printf '%s\n' "${eager[@]}" | median)
  s=$(printf '%s\n' "${sdpa[@]}" | median)
  awk -v n="$n" -v o="$o" -v e="$e" -v s="$s" \
    'BEGIN { printf "%-9s %12.1f %16.1f %16.1f %9.3f %9.3f\n", n, o, e, s, o / e, o / s }'
done

echo
echo "== load: $(du -sh "$work/checkpoint" | cut -f1) checkpoint in $(ls "$work"/checkpoint/*.safetensors | wc -l) shards, $rounds rounds (medians) =="
# Each side once to warm the page cache, then rounds alternating which side
# loads first (right after the speed runs, a load can be slowed by the
# memory the previous processes are still handing back).
load_once() {
  if [[ $1 == cpp ]]; then "$bench" load "$work/checkpoint"
  else "$python" "$root/bench/models/llama_twin.py" load "$work/checkpoint" 2>/dev/null; fi
}
load_once cpp >/dev/null
load_once python >/dev/null
cpp_lines=() python_lines=()
for ((round = 0; round < rounds; round++)); do
  if ((round % 2 == 0)); then order="cpp python"; else order="python cpp"; fi
  for side in $order; do eval "${side}_lines+=(\"\$(load_once $side)\")"; done
done
printf '%-14s %10s %22s %20s\n' side seconds "peak RSS rise (MB)" "parameters (MB)"
for side in cpp python; do
  eval "lines=(\"\${${side}_lines[@]}\")"
  t=$(for line in "${lines[@]}"; do field load_s <<<"$line"; done | median)
  p=$(for line in "${lines[@]}"; do field peak_rise_bytes <<<"$line"; done | median)
  b=$(field parameter_bytes <<<"${lines[0]}")
  awk -v side="$side" -v t="$t" -v p="$p" -v b="$b" \
    'BEGIN { printf "%-14s %10.3f %22.1f %20.1f\n", side, t, p / 1e6, b / 1e6 }'
  eval "${side}_load=$t"
done
awk -v c="$cpp_load" -v p="$python_load" 'BEGIN { printf "load time ours / transformers: %.3f\n", c / p }'
