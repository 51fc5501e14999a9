#!/usr/bin/env bash
# The longest sequence that trains under a fixed per-process activation
# budget, with sequence parallelism 1 and 4 (issue goal: at least 3x at sp 4),
# side by side in one run: the GPT example's model (tiny preset, one
# sequence, fp32) through sequence_parallel_memory_bench, whose counting
# allocator reports each rank's peak bytes above the model state; for each
# sp the length doubles from 256 while the largest rank's peak stays within
# CAP, then a bisection to a multiple of 64 x sp. One machine, CPU.
#
# Which attention kernel runs decides the answer: LibTorch 1.13's explicit
# attention holds [heads/sp, T, T] scores, quadratic in T, so sp 4 buys only
# about 2x the length; LibTorch 2.x's fused kernel keeps attention linear in
# T, where the per-rank activations fall about sp-fold.
#
# Usage: run_sequence_parallel_cap.sh ACCELERATE_CLI BENCH_BINARY [CAP_MIB]
#   (default CAP_MIB 1024)
set -euo pipefail
cli=$1 bench=$2 cap_mib=${3:-1024}
cap=$((cap_mib * 1048576))

peak_of() {  # peak_of SP T: the largest rank's peak bytes
  "$cli" launch --cpu --num_processes "$1" --main_process_port 0 --use_parallelism_config \
    --parallelism_config_sp_size "$1" "$bench" --seq_len "$2" 2>/dev/null | grep -o "preset .*" |
    awk '{for (i = 1; i < NF; i++) if ($i == "peak") print $(i + 1)}'
}

longest() {  # longest SP: the longest T within the cap
  local sp=$1 step=$((64 * $1)) t=256 good=0 bad=0 peak
  while :; do
    peak=$(peak_of "$sp" "$t")
    [[ -n "$peak" ]] || { echo "run_sequence_parallel_cap: sp $sp T $t failed" >&2; exit 1; }
    if ((peak <= cap)); then good=$t; t=$((t * 2)); else bad=$t; break; fi
  done
  ((good > 0)) || { echo 0; return; }
  while ((bad - good > step)); do
    t=$(((good + bad) / 2 / step * step))
    ((t > good)) || break
    peak=$(peak_of "$sp" "$t")
    if ((peak <= cap)); then good=$t; else bad=$t; fi
  done
  echo "$good"
}

echo "per-process activation budget: $cap_mib MiB (GPT tiny, one sequence, fp32)"
sp1=$(longest 1)
sp4=$(longest 4)
awk -v a="$sp1" -v b="$sp4" 'BEGIN {
  printf "longest T within the budget: sp 1 %d, sp 4 %d: %.2fx (goal >= 3x)\n", a, b, b / a }'
