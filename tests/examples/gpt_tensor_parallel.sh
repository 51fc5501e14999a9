#!/usr/bin/env bash
# The GPT example, unchanged, with tensor parallelism from `accelerate launch
# --use_parallelism_config --parallelism_config_tp_size 2` (GPT-2's plan):
#  - tp 2 on 2 processes (dp 1) logs the losses of tp 1 on 1 process, step
#    by step over 30 steps, within 1e-5 relative (fp32, no dropout), and
#    so does tp 2 with Megatron's sequence parallelism;
#  - tp 2 x ZeRO-3 on 4 processes logs the losses of ZeRO-3 on 2 processes
#    (each tp group reads what one process reads);
#  - a checkpoint saved at tp 2 (2 processes) resumes at tp 1 (2 processes,
#    half the batch each: the same global batch) and continues as a run at
#    tp 1 from the start does;
#  - the model saved at tp 2 is whole: `gpt generate` loads it.
# Usage: gpt_tensor_parallel.sh ACCELERATE_CLI GPT_BINARY DATA_DIR
set -euo pipefail
cli=$1 program=$2 data=$3
if [[ ! -f "$data/train.txt" ]]; then
  echo "Brown Corpus missing in $data: run scripts/fetch-brown.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/accelerate-gpt-tp.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/support/gpt_parallel_runs.sh
source "$(dirname "$0")/../support/gpt_parallel_runs.sh"
write_zero3_yaml "$work/zero3.yaml"
tp2=(--use_parallelism_config --parallelism_config_tp_size 2)

# tp 1 on one process against tp 2 on two, 30 steps.
one=$(gpt_run "$work/one" 30 4 --cpu --num_processes 1 --)
split=$(gpt_run "$work/split" 30 4 --cpu --num_processes 2 "${tp2[@]}" --)
echo "$split" >&2
[[ $(losses "$work/one" | wc -l) -eq 30 ]]
grep -q "parameters on this process" <<<"$split"
same_losses "$(losses "$work/split")" "$(losses "$work/one")" "tp 2 vs tp 1"
megatron=$(gpt_run "$work/megatron" 30 4 --cpu --num_processes 2 "${tp2[@]}" \
  --parallelism_config_tp_sequence_parallel true --)
same_losses "$(losses "$work/megatron")" "$(losses "$work/one")" "tp 2 with sequence parallelism vs tp 1"

# The model saved at tp 2 is whole: from_pretrained refuses tensors of
# other shapes than the config's, so sampling from it loads every one.
text=$("$program" generate --model_dir "$work/split/model" --prompt "The jury said" \
  --max_new_tokens 12 --seed 3)
[[ "$text" == "The jury said"* ]] || { echo "generate at tp 2's model: '$text'" >&2; exit 1; }
echo "generate: the model saved at tp 2 loads whole: $text" >&2

# ZeRO-3: tp 2 x dp_shard 2 on four processes against dp 2 on two, 15 steps.
# Model-only saves: save_state at tp x ZeRO is tested on its own
# (tests/models/llama_tensor_parallel_zero_checkpoint_test.cpp).
zero3=$(gpt_run "$work/zero3" 15 4 --config_file "$work/zero3.yaml" --num_processes 2 --)
zero3_split=$(gpt_run "$work/zero3_split" 15 4 --config_file "$work/zero3.yaml" --num_processes 4 \
  "${tp2[@]}" -- --save_only_model)
[[ $(losses "$work/zero3" | wc -l) -eq 15 ]]
same_losses "$(losses "$work/zero3_split")" "$(losses "$work/zero3")" "tp 2 x ZeRO-3 on 4 vs ZeRO-3 on 2"

# A checkpoint saved at tp 2 (step 10 of 20) resumes at tp 1 on as many
# processes, each reading half the group's batch.
whole=$(gpt_run "$work/whole" 20 2 --cpu --num_processes 2 --)
gpt_run "$work/saved" 20 4 --cpu --num_processes 2 "${tp2[@]}" -- --save_steps 10 >/dev/null
mkdir -p "$work/resumed"
cp -r "$work/saved/checkpoint-10" "$work/resumed/"
resumed=$(gpt_run "$work/resumed" 20 2 --cpu --num_processes 2 -- --resume_from_checkpoint latest)
echo "$resumed" >&2
[[ $(losses "$work/resumed" | wc -l) -eq 10 ]]
same_losses "$(losses "$work/resumed")" "$(losses "$work/whole" | tail -10)" \
  "resumed at tp 1 from tp 2's checkpoint vs tp 1 throughout (steps 11-20)"
