#!/usr/bin/env bash
# examples/nlp end to end through `accelerate launch` on a small slice of its
# data (docs/nlp.md, "CI"): the pretrained MiniLM fine-tuned for one epoch
# (two with PROCESSES=2) must reach MIN_ACCURACY on the validation slice,
# whose larger class is checked to be far below that (a model that learned
# nothing scores at most the larger class's share); the metrics line comes
# from the main process only, once per epoch, over exactly the slice's
# examples (201: an uneven last batch on 1 and 2 processes); a run resumed
# from a checkpoint (step_N on 1 process, epoch_0 on 2) prints exactly the
# uninterrupted run's last line; --with_tracking writes the metrics; on 2
# processes, tensor parallelism 2 (with and without Megatron's sequence
# parallelism, which pads each batch to an even length) learns as well,
# counting each trained example once; a bad flag is a one-line error.
# Usage: nlp_train.sh ACCELERATE_CLI NLP_BINARY MINILM_DIR DATA_DIR PROCESSES MIN_ACCURACY
set -euo pipefail
cli=$1 program=$2 model=$3 data=$4 processes=$5 minimum=$6
for f in "$model/model.safetensors" "$data/train.tsv"; do
  if [[ ! -f "$f" ]]; then
    echo "$f missing: run scripts/fetch-minilm.sh and scripts/fetch-brown-genre.sh" >&2
    exit 1
  fi
done
work=$(mktemp -d /tmp/accelerate-nlp-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
eval_samples=201

# The slice's class balance: the share of its larger class.
majority=$(awk -F'\t' -v n=$eval_samples 'NR > 1 && NR <= n + 1 { c[$1]++ }
  END { m = c[0] > c[1] ? c[0] : c[1]; printf "%.4f", m / n }' "$data/validation.tsv")
echo "validation slice: larger class $majority of $eval_samples"
# assert: the minimum accuracy is out of reach of a constant prediction
awk -v m="$majority" -v a="$minimum" 'BEGIN { exit !(m <= 0.6 && a >= m + 0.15) }'

# One thread per process, as the launcher gives 2 processes on 2 cores: on a
# busy machine more threads than free cores spin in OpenMP barriers.
# launch_extra: more `accelerate launch` flags, before the program.
launch_extra=()
run() {  # run OUTPUT_DIR [extra flags...]
  local out=$1
  shift
  "$cli" launch --cpu --num_processes "$processes" --num_cpu_threads_per_process 1 \
    --main_process_port 0 "${launch_extra[@]}" "$program" --model "$model" --train_file "$data/train.tsv" \
    --validation_file "$data/validation.tsv" --output_dir "$out" --project_dir "$out/logs" \
    --max_eval_samples $eval_samples --max_length 32 --learning_rate 1e-4 --num_warmup_steps 0 \
    "$@"
}

if [[ $processes == 1 ]]; then
  # 40 optimizer steps of 8; a checkpoint every 25 batches (step_25).
  flags=(--max_train_samples 320 --batch_size 8 --num_epochs 1)
  checkpoint=(--checkpointing_steps 25)
  resume_from=step_25
  epochs=1
  resumed_epochs=1
  resumed_examples=120  # 320 - 25 batches of 8: the rest of the epoch
else
  # 2 epochs of 20 optimizer steps of 2 x 4; a checkpoint after each epoch.
  flags=(--max_train_samples 160 --batch_size 4 --num_epochs 2)
  checkpoint=(--checkpointing_steps epoch)
  resume_from=epoch_0
  epochs=2
  resumed_epochs=1      # epoch 1 only
  resumed_examples=160
fi

whole=$(run "$work/whole" "${flags[@]}" "${checkpoint[@]}" --with_tracking)
echo "$whole"
if [[ $processes != 1 ]]; then
  # assert: the output docs/nlp.md quotes (a 2-process run of this slice) is
  # what the program prints, its numbers aside
  docs="$(dirname "$0")/../../docs/nlp.md"
  echo "$whole" >"$work/whole.txt"
  python3 - "$docs" "$work/whole.txt" <<'PY' || exit 1
import re, sys
printed = open(sys.argv[2]).read().splitlines()
quoted = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("[rank0]: epoch")]
assert quoted, "docs/nlp.md quotes no output"
for line in quoted:
    shape = re.sub(r"[0-9]+(\\\.[0-9]+)?", "[0-9.e+-]+", re.escape(line))
    if not any(re.fullmatch(shape, p) for p in printed):
        sys.exit("docs/nlp.md quotes a line the program does not print: " + line)
print("docs/nlp.md: %d quoted lines have the program's shape" % len(quoted))
PY
fi
metrics=$(grep -E "epoch [0-9]+: \{'accuracy'" <<<"$whole")
# assert: one metrics line per epoch, from the main process only
[[ $(wc -l <<<"$metrics") -eq $epochs ]]
if [[ $processes != 1 ]]; then ! grep -q "^\[rank1\]" <<<"$whole"; fi
# assert: every validation example counted exactly once, each epoch
[[ $(grep -c ": $eval_samples validation examples;" <<<"$whole") -eq $epochs ]]
last=$(tail -n 1 <<<"$metrics" | sed 's/^\[rank0\]: //')
accuracy=$(grep -oE "'accuracy': [0-9.e-]+" <<<"$last" | grep -oE "[0-9.e-]+$")
echo "final accuracy $accuracy (minimum $minimum)"
# assert: it learned
awk -v a="$accuracy" -v m="$minimum" 'BEGIN { exit !(a >= m) }'
# assert: the checkpoint was written and the trackers logged the metrics
[[ -d "$work/whole/$resume_from" ]]
grep -rqs "accuracy" "$work/whole/logs"

resumed=$(run "$work/resumed" "${flags[@]}" --resume_from_checkpoint "$work/whole/$resume_from")
echo "$resumed"
resumed_last=$(grep -E "epoch [0-9]+: \{'accuracy'" <<<"$resumed" | tail -n 1 | sed 's/^\[rank0\]: //')
echo "uninterrupted: $last"
echo "resumed:       $resumed_last"
# assert: it continued from the checkpoint (only what was left was trained;
# a run from scratch would print the uninterrupted run's lines too)
grep -q "resuming from $work/whole/$resume_from" <<<"$resumed"
[[ $(grep -cE "epoch [0-9]+: \{'accuracy'" <<<"$resumed") -eq $resumed_epochs ]]
grep -q "validation examples; train $resumed_examples examples in" <<<"$resumed"
# assert: the resumed run ends exactly where the uninterrupted one ended
[[ "$last" == "$resumed_last" ]]

if [[ $processes == 2 ]]; then
  for megatron in false true; do
    launch_extra=(--use_parallelism_config --parallelism_config_tp_size 2
      --parallelism_config_tp_sequence_parallel "$megatron")
    split=$(run "$work/tp_$megatron" --max_train_samples 160 --batch_size 8 --num_epochs 1)
    launch_extra=()
    split=$(grep -E "^\[rank0\]: epoch 0: " <<<"$split") || true
    echo "tp 2 (sequence parallel $megatron): $split"
    # assert: the tp group trained the 160 examples once, and learned
    grep -q ": $eval_samples validation examples; train 160 examples in" <<<"$split"
    tp_accuracy=$(grep -oE "'accuracy': [0-9.e-]+" <<<"$split" | grep -oE "[0-9.e-]+$")
    awk -v a="$tp_accuracy" -v m="$minimum" 'BEGIN { exit !(a >= m) }'
  done
fi

# assert: a bad value is one line on stderr and exit code 2
set +e
err=$("$program" --checkpointing_steps sometimes 2>&1 >/dev/null)
code=$?
set -e
[[ $code -eq 2 && "$err" == "nlp: error: --checkpointing_steps expects"* ]]
[[ $(wc -l <<<"$err") -eq 1 ]]
