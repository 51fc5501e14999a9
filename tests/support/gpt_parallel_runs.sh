# Sourced by the scripts that run the GPT example split some way against
# the same example unsplit (tests/examples/gpt_{sequence,tensor}_parallel.sh,
# bench/gpt/run_tensor_parallel_bench.sh). Expects $cli, $program, $data and
# $work set; gives:
#   write_zero3_yaml FILE   a CPU DeepSpeed ZeRO-3 accelerate config, no zero3_init
#   gpt_run OUTPUT_DIR STEPS BATCH [launch flags...] -- [program flags...]
#                           the example's stdout, on the tiny preset at T = 64,
#                           fp32, no dropout, a loss logged every step (in
#                           full to OUTPUT_DIR's JSONL log); the tokenizer
#                           trained once and shared between runs
#   losses OUTPUT_DIR       the losses a run logged, in full, a line each
#   same_losses A B WHAT    two lists of losses (a line each): as many, each
#                           within 1e-5 relative
write_zero3_yaml() {
  cat >"$1" <<'YAML'
deepspeed_config:
  gradient_accumulation_steps: 1
  zero3_init_flag: false
  zero_stage: 3
distributed_type: DEEPSPEED
mixed_precision: 'no'
num_machines: 1
use_cpu: true
YAML
}

gpt_run() {
  local out=$1 steps=$2 batch=$3
  shift 3
  local -a launch=()
  while [[ $# -gt 0 && $1 != -- ]]; do launch+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  mkdir -p "$out" "$work/tok"
  [[ -f "$work/tok/tokenizer.bpe" ]] && cp "$work/tok/tokenizer.bpe" "$out/"
  "$cli" launch "${launch[@]}" --main_process_port 0 "$program" --data_dir "$data" \
    --output_dir "$out" --preset tiny --block_size 64 --dropout 0 \
    --per_device_train_batch_size "$batch" --max_steps "$steps" --warmup_steps 5 \
    --logging_steps 1 --eval_steps 1000 --max_eval_samples 16 --learning_rate 5e-4 \
    --report_to jsonl "$@"
  [[ -f "$work/tok/tokenizer.bpe" ]] || cp "$out/tokenizer.bpe" "$work/tok/"
}

# shellcheck source=tests/support/trainer_logs.sh
source "$(dirname "${BASH_SOURCE[0]}")/trainer_logs.sh"

losses() { logged loss "$1"; }

same_losses() {
  paste <(echo "$1") <(echo "$2") | awk -v what="$3" '
    NF != 2 { print what ": the runs logged different numbers of losses"; exit 1 }
    { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) { print what ": step " NR ": " $1 " vs " $2; bad = 1 } ; n++ }
    END { if (bad) exit 1; print what ": " n " steps agree within 1e-5" }'
}
