#!/usr/bin/env bash
# The GPT example end to end on 2 processes through `accelerate launch`:
# it learns (the final eval_loss is well below the first logged loss), only
# the main process prints, a run resumed from a mid-run checkpoint ends with
# exactly the uninterrupted run's eval_loss, bf16 training with evaluations
# between steps equals it without them, the saved model generates text, and a
# bad flag is a one-line error; the saved folder (with its tokenizer.json)
# fine-tunes with examples/finetune.
# Usage: gpt_train.sh ACCELERATE_CLI GPT_BINARY DATA_DIR FINETUNE_BINARY
set -euo pipefail
cli=$1 program=$2 data=$3 finetune=$4
if [[ ! -f "$data/train.txt" ]]; then
  echo "Brown Corpus missing in $data: run scripts/fetch-brown.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/accelerate-gpt-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/support/trainer_logs.sh
source "$(dirname "$0")/../support/trainer_logs.sh"

run() {  # run OUTPUT_DIR [extra flags...]
  local out=$1
  shift
  "$cli" launch --cpu --num_processes 2 --main_process_port 0 "$program" --data_dir "$data" \
    --output_dir "$out" --block_size 64 --per_device_train_batch_size 8 --max_steps 30 \
    --warmup_steps 5 --logging_steps 10 --eval_steps 30 --save_steps 15 --max_eval_samples 64 \
    --learning_rate 2e-3 --report_to jsonl "$@"
}

whole=$(run "$work/whole")
echo "$whole" >&2
first_loss=$(logged loss "$work/whole" | head -1)
final_eval=$(logged eval_loss "$work/whole" | tail -1)
# assert: a loss was logged and an evaluation ran
[[ -n "$first_loss" && -n "$final_eval" ]]
# assert: it learns: the final eval_loss is at least 1.0 below the first logged loss
awk -v a="$first_loss" -v b="$final_eval" 'BEGIN { exit !(b < a - 1.0) }'
# assert: only the main process prints logs (3 logs: steps 10, 20, 30), as
# transformers' console does: {'loss': '5.432', 'grad_norm': ..., 'epoch': '0.12'}
[[ $(grep -c "tokens/s" <<<"$whole") -eq 3 ]]
[[ $(grep -cE "^(\[rank0\]: )?\{'loss': '[0-9.]+', 'grad_norm': '[0-9.e+-]+', 'learning_rate': '[0-9.e+-]+', 'epoch': '[0-9.]+'\}$" <<<"$whole") -eq 3 ]]

# Resume from the step-15 checkpoint in a fresh output folder.
mkdir -p "$work/resumed"
cp -r "$work/whole/checkpoint-15" "$work/whole/tokenizer.bpe" "$work/resumed/"
resumed=$(run "$work/resumed" --resume_from_checkpoint latest)
echo "$resumed" >&2
resumed_eval=$(logged eval_loss "$work/resumed" | tail -1)
echo "uninterrupted eval_loss $final_eval, resumed $resumed_eval"
# assert: the resumed run ends exactly where the uninterrupted one ended
[[ "$final_eval" == "$resumed_eval" ]]

# bf16 with an evaluation after every 2nd step trains as without one: every
# step logs the same loss and gradient norm, and the last evaluations agree.
# (The step after an evaluation lost the Conv1D gradients when autocast's
# region cached the weights the evaluation cast under no-grad.)
steps() {  # steps OUTPUT_DIR [extra flags...]: the training logs and the last eval_loss
  "$cli" launch -q --cpu --num_processes 2 --main_process_port 0 --mixed_precision bf16 \
    "$program" --data_dir "$data" --output_dir "$1" --block_size 64 \
    --per_device_train_batch_size 8 --max_steps 4 --logging_steps 1 --max_eval_samples 8 \
    --save_strategy no --report_to jsonl "${@:2}" >/dev/null
  step_logs "$1"
  logged eval_loss "$1" | tail -1
}
with_eval=$(steps "$work/bf16-eval" --eval_steps 2)
without_eval=$(steps "$work/bf16-no-eval" --eval_strategy no)
echo "bf16 with evaluations: $with_eval" >&2
# assert: 4 steps logged, and the runs agree on each
[[ $(grep -c '"grad_norm"' <<<"$with_eval") -eq 4 && "$with_eval" == "$without_eval" ]]

# assert: the saved model (Hugging Face layout) generates text after the prompt
text=$("$program" generate --model_dir "$work/whole/model" --prompt "The jury" --max_new_tokens 12)
echo "generated: $text"
[[ "$text" == "The jury"* && ${#text} -gt 12 ]]

# assert: the saved folder is a Hugging Face folder examples/finetune takes
# (config.json, the weights, tokenizer.json), on 2 processes
"$cli" launch -q --cpu --num_processes 2 --main_process_port 0 "$finetune" \
  --model "$work/whole/model" --train_file "$data/validation.txt" --output_dir "$work/tuned" \
  --block_size 64 --max_steps 4 --logging_steps 2 --report_to jsonl >/dev/null
tuned=$(logged loss "$work/tuned" | wc -l)
echo "finetune of the saved model: $tuned losses logged"
[[ $tuned -eq 2 && -f "$work/tuned/final/tokenizer.json" && -f "$work/tuned/final/config.json" ]]

# assert: a misspelt flag is one line on stderr and exit code 2
set +e
err=$("$program" --max_step 3 2>&1 >/dev/null)
code=$?
set -e
[[ $code -eq 2 && "$err" == "gpt: error: unknown flag --max_step (did you mean --max_steps?);"* ]]
[[ $(wc -l <<<"$err") -eq 1 ]]
