#!/usr/bin/env bash
# The GPT example, unchanged, with sequence parallelism (DeepSpeed Ulysses)
# from `accelerate launch --use_parallelism_config --parallelism_config_sp_size 2`:
#  - sp 2 on 2 processes (dp 1) logs the losses of sp 1 on 1 process, step
#    by step over 50 steps, within 1e-5 relative (fp32, no dropout);
#  - sp 2 x ZeRO-3 on 4 processes logs the losses of ZeRO-3 on 2 processes
#    (the same global batch: each group reads what one process reads);
#  - a checkpoint saved at sp 2 (2 processes) resumes at sp 1 (2 processes,
#    half the batch each: the same global batch) and continues as a run at
#    sp 1 from the start does.
# The learning rate is 5e-4: at 2e-3 the two runs' different rounding (half
# the rows per matmul, a sum of two halves) grows chaotically to 1.6e-5
# relative by step 19 and 4e-4 by step 50 (docs/sequence-parallel.md).
# Usage: gpt_sequence_parallel.sh ACCELERATE_CLI GPT_BINARY DATA_DIR
set -euo pipefail
cli=$1 program=$2 data=$3
if [[ ! -f "$data/train.txt" ]]; then
  echo "Brown Corpus missing in $data: run scripts/fetch-brown.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/accelerate-gpt-sp.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/support/gpt_parallel_runs.sh
source "$(dirname "$0")/../support/gpt_parallel_runs.sh"
write_zero3_yaml "$work/zero3.yaml"

# sp 1 on one process against sp 2 on two, 50 steps.
one=$(gpt_run "$work/one" 50 4 --cpu --num_processes 1 --)
split=$(gpt_run "$work/split" 50 4 --cpu --num_processes 2 --use_parallelism_config \
  --parallelism_config_sp_size 2 --)
echo "$split" >&2
[[ $(losses "$work/one" | wc -l) -eq 50 ]]
same_losses "$(losses "$work/split")" "$(losses "$work/one")" "sp 2 vs sp 1"

# ZeRO-3: sp 2 x dp 2 on four processes against dp 2 on two, 20 steps.
zero3=$(gpt_run "$work/zero3" 20 4 --config_file "$work/zero3.yaml" --num_processes 2 --)
zero3_split=$(gpt_run "$work/zero3_split" 20 4 --config_file "$work/zero3.yaml" --num_processes 4 \
  --use_parallelism_config --parallelism_config_sp_size 2 --)
[[ $(losses "$work/zero3" | wc -l) -eq 20 ]]
same_losses "$(losses "$work/zero3_split")" "$(losses "$work/zero3")" "sp 2 x ZeRO-3 on 4 vs ZeRO-3 on 2"

# A checkpoint saved at sp 2 (step 10 of 20) resumes at sp 1 on as many
# processes, each reading half the group's batch.
whole=$(gpt_run "$work/whole" 20 2 --cpu --num_processes 2 --)
gpt_run "$work/saved" 20 4 --cpu --num_processes 2 --use_parallelism_config \
  --parallelism_config_sp_size 2 -- --save_steps 10 >/dev/null
mkdir -p "$work/resumed"
cp -r "$work/saved/checkpoint-10" "$work/resumed/"
resumed=$(gpt_run "$work/resumed" 20 2 --cpu --num_processes 2 -- --resume_from_checkpoint latest)
echo "$resumed" >&2
[[ $(losses "$work/resumed" | wc -l) -eq 10 ]]
same_losses "$(losses "$work/resumed")" "$(losses "$work/whole" | tail -10)" \
  "resumed at sp 1 from sp 2's checkpoint vs sp 1 throughout (steps 11-20)"
