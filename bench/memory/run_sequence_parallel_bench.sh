#!/usr/bin/env bash
# Per-rank activation memory of the GPT example (tiny preset, one sequence,
# fp32) with sequence parallelism 1, 2 and 4 at each length, and each size's
# ratio to sp 1 (goals: <= 0.6 at sp 2, <= 0.35 at sp 4). One machine, CPU.
# Usage: run_sequence_parallel_bench.sh ACCELERATE_CLI BENCH_BINARY [SEQ_LEN...]
# (default lengths 1024 4096; 16384 at sp 1 needs tens of GB: the explicit
# attention kernel of LibTorch 1.13 holds [heads, T, T] scores).
set -euo pipefail
cli=$1 bench=$2
shift 2
lengths=("$@")
[[ ${#lengths[@]} -gt 0 ]] || lengths=(1024 4096)
for t in "${lengths[@]}"; do
  base=""
  for sp in 1 2 4; do
    line=$("$cli" launch --cpu --num_processes "$sp" --main_process_port 0 \
      --use_parallelism_config --parallelism_config_sp_size "$sp" "$bench" --seq_len "$t" |
      grep -o "preset .*")
    held=$(awk '{for (i = 1; i < NF; i++) if ($i == "held") print $(i + 1)}' <<<"$line")
    peak=$(awk '{for (i = 1; i < NF; i++) if ($i == "peak") print $(i + 1)}' <<<"$line")
    [[ -n "$base" ]] || base="$held $peak"
    awk -v t="$t" -v sp="$sp" -v h="$held" -v p="$peak" -v base="$base" 'BEGIN {
      split(base, b, " ");
      printf "seq_len %d sp %d held %.1f MiB (%.3fx sp 1) peak %.1f MiB (%.3fx sp 1)\n",
             t, sp, h / 1048576, h / b[1], p / 1048576, p / b[2] }'
  done
done
