#!/usr/bin/env bash
# Tokens/s of sequence parallelism (sp 2: one window a step split over 2
# processes) against data parallelism (dp 2: a window per process) with the
# GPT example at one sequence length, side by side in one run, several
# rounds in alternating order; prints each side's median over the logged
# steps after the warm-up, per round, and the ratio of the medians of
# rounds. The example counts a sequence-parallel group's window once.
#
# Usage: bash bench/gpt/run_sequence_parallel_speed.sh [BUILD_DIR]  (default: build)
# Environment: SEQ_LEN [2048]  STEPS [12]  ROUNDS [2]  PRESET [tiny]
#   needs BUILD_DIR/examples/gpt, BUILD_DIR/bin/accelerate and data/brown.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cli=$build/bin/accelerate program=$build/examples/gpt data=$root/data/brown
seq_len=${SEQ_LEN:-2048} steps=${STEPS:-12} rounds=${ROUNDS:-2} preset=${PRESET:-tiny}
for need in "$cli" "$program" "$data/train.txt"; do
  [[ -e $need ]] || { echo "run_sequence_parallel_speed: missing $need" >&2; exit 2; }
done
work=$(mktemp -d /tmp/accelerate-sp-speed.XXXXXX)
trap 'rm -rf "$work"' EXIT

run() {  # run NAME [launch flags...]: the median tokens/s after step 2
  local name=$1
  shift
  "$cli" launch --cpu --num_processes 2 --main_process_port 0 "$@" "$program" \
    --preset "$preset" --data_dir "$data" --output_dir "$work/$name" --block_size "$seq_len" \
    --per_device_train_batch_size 1 --max_steps "$steps" --logging_steps 2 --eval_strategy no \
    --save_strategy no >"$work/$name.log" 2>&1 ||
    { echo "run_sequence_parallel_speed: $name failed:" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
  grep -oE "step [0-9]+: tokens/s [0-9.]+" "$work/$name.log" | awk '$2 + 0 > 2 { print $4 }' |
    sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

echo "GPT '$preset', T = $seq_len, 2 processes, $steps steps, $rounds rounds (tokens/s, median of the logged steps after step 2)"
dp_all=() sp_all=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    dp=$(run dp$r) sp=$(run sp$r --use_parallelism_config --parallelism_config_sp_size 2)
  else
    sp=$(run sp$r --use_parallelism_config --parallelism_config_sp_size 2) dp=$(run dp$r)
  fi
  echo "round $r: dp 2 $dp, sp 2 $sp"
  dp_all+=("$dp") sp_all+=("$sp")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
dpm=$(median "${dp_all[@]}") spm=$(median "${sp_all[@]}")
awk -v d="$dpm" -v s="$spm" 'BEGIN { printf "median: dp 2 %.0f, sp 2 %.0f tokens/s: sp/dp %.3f\n", d, s, s / d }'
