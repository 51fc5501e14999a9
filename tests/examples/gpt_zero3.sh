#!/usr/bin/env bash
# The GPT example, unchanged, under ZeRO stage 3 from a DeepSpeed accelerate
# config on 2 processes: its transformer blocks become units (their weights
# gathered only while they run). It must train as data parallelism does (the
# same eval_loss, up to the clipping's summation order: the Trainer clips
# whole gradients in float, ZeRO clips shards with a norm summed in double),
# resume exactly from a stage-3 checkpoint, and save a model that generates.
# zero3_init_flag is on: process 1 builds the model without memory for its
# weights and receives its shards from process 0. With CPU offloading's
# copies forced on this CPU-only job it must end exactly where it ends without.
# Usage: gpt_zero3.sh ACCELERATE_CLI GPT_BINARY DATA_DIR
set -euo pipefail
cli=$1 program=$2 data=$3
if [[ ! -f "$data/train.txt" ]]; then
  echo "Brown Corpus missing in $data: run scripts/fetch-brown.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/accelerate-gpt-zero3.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/zero3.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 1.0
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: false
  zero_stage: 3
distributed_type: DEEPSPEED
machine_rank: 0
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: true
YAML

run() {  # run OUTPUT_DIR [launch flags...] -- [program flags...]
  local out=$1
  shift
  local -a launch=()
  while [[ $# -gt 0 && $1 != -- ]]; do launch+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  "$cli" launch "${launch[@]}" --main_process_port 0 "$program" --data_dir "$data" \
    --output_dir "$out" --block_size 64 --per_device_train_batch_size 8 --max_steps 20 \
    --warmup_steps 5 --logging_steps 10 --eval_steps 20 --save_steps 10 --max_eval_samples 64 \
    --learning_rate 2e-3 --report_to jsonl "$@"
}
# shellcheck source=tests/support/trainer_logs.sh
source "$(dirname "$0")/../support/trainer_logs.sh"
eval_loss() { logged eval_loss "$1" | tail -1; }  # in full, from OUTPUT_DIR's JSONL log

plain=$(run "$work/plain" --cpu --num_processes 2 --)
zero3=$(run "$work/zero3" --config_file "$work/zero3.yaml" --)
echo "$zero3" >&2
plain_eval=$(eval_loss "$work/plain") zero3_eval=$(eval_loss "$work/zero3")
echo "data parallelism eval_loss $plain_eval, ZeRO-3 $zero3_eval"
# assert: both evaluated, and agree to 1e-4 relative
[[ -n "$plain_eval" && -n "$zero3_eval" ]]
awk -v a="$plain_eval" -v b="$zero3_eval" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * a) }'

# CPU offloading of the parameters and the optimizer, with its host copies
# made on this CPU-only job (ACCELERATE_OFFLOAD_ON_CPU_JOB): copies change no
# value, so it ends exactly where stage 3 on the "device" ends.
offloaded=$(ACCELERATE_OFFLOAD_ON_CPU_JOB=true run "$work/offloaded" --config_file "$work/zero3.yaml" \
  --offload_param_device cpu --offload_optimizer_device cpu -- 2>&1)
offloaded_eval=$(eval_loss "$work/offloaded")
echo "ZeRO-3 eval_loss $zero3_eval, with CPU offloading $offloaded_eval"
# assert: the offload path ran (its note) and trained exactly as without it
grep -q "offload_param_device cpu with ACCELERATE_OFFLOAD_ON_CPU_JOB" <<<"$offloaded"
[[ "$zero3_eval" == "$offloaded_eval" ]]

# Resume from the step-10 stage-3 checkpoint in a fresh output folder.
mkdir -p "$work/resumed"
cp -r "$work/zero3/checkpoint-10" "$work/zero3/tokenizer.bpe" "$work/resumed/"
resumed=$(run "$work/resumed" --config_file "$work/zero3.yaml" -- --resume_from_checkpoint latest)
resumed_eval=$(eval_loss "$work/resumed")
echo "ZeRO-3 uninterrupted eval_loss $zero3_eval, resumed $resumed_eval"
# assert: the resumed run ends exactly where the uninterrupted one ended
[[ "$zero3_eval" == "$resumed_eval" ]]

# assert: the saved model (whole weights, gathered from the shards) generates text
text=$("$program" generate --model_dir "$work/zero3/model" --prompt "The jury" --max_new_tokens 12)
echo "generated: $text"
[[ "$text" == "The jury"* && ${#text} -gt 12 ]]
