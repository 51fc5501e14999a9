#!/usr/bin/env bash
# examples/mnist/train_complete.cpp end to end (issues 5 and 7): a run that
# is interrupted and resumed from a mid-epoch checkpoint must end with the
# same model file, byte for byte, as a run that was never interrupted; and
# --with_tracking must leave the accuracy of each epoch in the logs.
# Usage: mnist_resume.sh ACCELERATE_CLI MNIST_COMPLETE DATA_DIR PROCESSES
set -euo pipefail
cli=$1 program=$2 data=$3 processes=$4
if [[ ! -f "$data/train-images-idx3-ubyte" ]]; then
  echo "MNIST data missing in $data: run scripts/fetch-mnist.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/mnist-resume.XXXXXX)
trap 'rm -rf "$work"' EXIT

train() {  # train OUTPUT_DIR EXTRA_ARGS...: two epochs through the launcher
  local out=$1
  shift
  "$cli" launch --cpu --num_processes "$processes" --main_process_port 0 \
    "$program" --data_dir "$data" --epochs 2 --output_dir "$out" "$@"
}

# The reference run both tracks and saves: that saving and tracking leave
# training unchanged is asserted by tests/checkpoint (a run that never saves
# against one that saves and resumes), so one run serves as the uninterrupted
# reference and as the job whose first checkpoint the resume starts from.
echo "== uninterrupted run, with tracking, saving every 50 steps"
train "$work/run" --with_tracking --project_dir "$work/logs" --checkpointing_steps 50
ls "$work/run/checkpoints"
mkdir "$work/straight"
mv "$work/run/model" "$work/straight/model"
# Pretend the job died just after its first checkpoint: later ones and the
# final model never happened.
find "$work/run/checkpoints" -mindepth 1 -maxdepth 1 ! -name checkpoint_0 -exec rm -rf {} +
echo "== resumed from the newest checkpoint (checkpoint_0, step 50 of the first epoch)"
out=$(train "$work/run" --resume_from_checkpoint latest --checkpointing_steps 50)
echo "$out"
grep -q "resuming from .*checkpoint_0" <<<"$out" || { echo "FAIL: did not resume from checkpoint_0"; exit 1; }

# assert: byte-identical final models
if ! cmp "$work/straight/model/model.safetensors" "$work/run/model/model.safetensors"; then
  echo "FAIL: the resumed run's model differs from the uninterrupted run's"
  exit 1
fi
echo "resumed model is byte-identical to the uninterrupted one"

metrics="$work/logs/mnist/metrics.jsonl"
[[ -f "$metrics" ]] || { echo "FAIL: no $metrics"; exit 1; }
lines=$(grep -c '"accuracy"' "$metrics" || true)
[[ "$lines" == 2 ]] || { echo "FAIL: expected 2 accuracy records in $metrics, found $lines"; cat "$metrics"; exit 1; }
ls "$work/logs/mnist" | grep -q '^events.out.tfevents' || { echo "FAIL: no TensorBoard event file"; exit 1; }
echo "tracking logs: $(ls "$work/logs/mnist" | tr '\n' ' ')"
