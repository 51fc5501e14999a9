#!/usr/bin/env bash
# The GPT example on 2 processes three ways, side by side in one run:
# tensor parallelism (tp 2: one batch a step computed by both processes,
# each holding half of every split layer), data parallelism (dp 2: DDP, a
# batch per process) and ZeRO-3 (dp 2, parameters, gradients and optimizer
# state sharded). Prints per way the median tokens/s over the logged steps
# after step 2 (the example counts a tensor-parallel group's batch once) and
# the peak resident memory of the largest process, and the ratios to dp 2.
# Each way reads the same batch per process, so tp 2 trains on half the
# tokens a step of the others. On CPUs tensor parallelism buys memory, not
# speed: every block all-reduces its activations twice each way.
#
# Usage: bash bench/gpt/run_tensor_parallel_bench.sh [BUILD_DIR]  (default: build)
# Environment: PRESET [small]  SEQ_LEN [256]  BATCH [4]  STEPS [12]  ROUNDS [2]
#   needs BUILD_DIR/examples/gpt, BUILD_DIR/bin/accelerate, data/brown and
#   a python3 (for the children's peak memory, getrusage).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cli=$build/bin/accelerate program=$build/examples/gpt data=$root/data/brown
preset=${PRESET:-small} seq_len=${SEQ_LEN:-256} batch=${BATCH:-4}
steps=${STEPS:-12} rounds=${ROUNDS:-2}
for need in "$cli" "$program" "$data/train.txt"; do
  [[ -e $need ]] || { echo "run_tensor_parallel_bench: missing $need" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "run_tensor_parallel_bench: python3 missing" >&2; exit 2; }
work=$(mktemp -d /tmp/accelerate-tp-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/support/gpt_parallel_runs.sh
source "$root/tests/support/gpt_parallel_runs.sh"
write_zero3_yaml "$work/zero3.yaml"
mkdir -p "$work/tok"

# Runs a command and prints the peak resident set of the largest process
# below it (Linux's ru_maxrss of reaped descendants), in MiB.
peak_of() {
  python3 -c '
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr)
sys.exit(code)' "$@"
}

run() {  # run NAME [launch flags...]: prints "tokens/s peak_MiB"
  local name=$1
  shift
  mkdir -p "$work/$name"
  [[ -f "$work/tok/tokenizer.bpe" ]] && cp "$work/tok/tokenizer.bpe" "$work/$name/"
  peak_of "$cli" launch --num_processes 2 --main_process_port 0 "$@" "$program" \
    --preset "$preset" --data_dir "$data" --output_dir "$work/$name" --block_size "$seq_len" \
    --per_device_train_batch_size "$batch" --max_steps "$steps" --logging_steps 2 \
    --eval_strategy no --save_strategy no >"$work/$name.log" 2>"$work/$name.peak" ||
    { echo "run_tensor_parallel_bench: $name failed:" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
  [[ -f "$work/tok/tokenizer.bpe" ]] || cp "$work/$name/tokenizer.bpe" "$work/tok/"
  local speed
  speed=$(grep -oE "step [0-9]+: tokens/s [0-9.]+" "$work/$name.log" | awk '$2 + 0 > 2 { print $4 }' |
    sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
  echo "$speed $(tail -1 "$work/$name.peak")"
}

ways=(dp tp zero3)
flags_of() {
  case $1 in
    dp) echo "--cpu" ;;
    tp) echo "--cpu --use_parallelism_config --parallelism_config_tp_size 2" ;;
    zero3) echo "--config_file $work/zero3.yaml" ;;
  esac
}
echo "GPT '$preset', T = $seq_len, batch $batch per process, 2 processes, $steps steps, $rounds rounds"
declare -A speeds peaks
for ((r = 1; r <= rounds; r++)); do
  order=("${ways[@]}")
  ((r % 2)) || order=(zero3 tp dp)
  line="round $r:"
  for way in "${order[@]}"; do
    # shellcheck disable=SC2046
    read -r speed peak < <(run "$way$r" $(flags_of "$way"))
    speeds[$way]+="$speed " peaks[$way]+="$peak "
    line+=" $way $speed tokens/s, $peak MiB;"
  done
  echo "$line"
done
median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
dps=$(median "${speeds[dp]}") dpp=$(median "${peaks[dp]}")
for way in "${ways[@]}"; do
  s=$(median "${speeds[$way]}") p=$(median "${peaks[$way]}")
  awk -v w="$way" -v s="$s" -v p="$p" -v ds="$dps" -v dp="$dpp" 'BEGIN {
    printf "median %-6s %8.0f tokens/s (x%.3f of dp 2), peak %5.0f MiB a process (x%.3f of dp 2)\n", w, s, s / ds, p, p / dp }'
done
