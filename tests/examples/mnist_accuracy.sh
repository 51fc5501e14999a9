#!/usr/bin/env bash
# The README's main demo as a test: an MNIST example trained EPOCHS (default
# 3) epochs through our launcher must print per-epoch test accuracy and reach
# the bar. With MAX_BF16_DROP (not "-") it trains again under
# `--mixed_precision bf16` and requires that accuracy within MAX_BF16_DROP
# points of the fp32 one. On any number of processes the accuracy is printed
# once, by the main process. On a CPU without bf16 instructions (bf16 is
# emulated there, ~10x slower than fp32: docs/mixed-precision.md) the bf16
# run trains one epoch and is held to the fp32 run's first-epoch accuracy.
# Usage: mnist_accuracy.sh ACCELERATE_CLI MNIST_BINARY DATA_DIR PROCESSES MIN_ACCURACY [MAX_BF16_DROP|-] [EPOCHS]
set -euo pipefail
cli=$1 program=$2 data=$3 processes=$4 minimum=$5 max_drop=${6:-} epochs=${7:-3}
[[ "$max_drop" != - ]] || max_drop=
if [[ ! -f "$data/train-images-idx3-ubyte" ]]; then
  echo "MNIST data missing in $data: run scripts/fetch-mnist.sh" >&2
  exit 1
fi

# Runs EPOCHS epochs (extra args go to launch) and prints each epoch's test
# accuracy, one per line.
accuracies() {
  local out run_epochs=$1
  shift
  out=$("$cli" launch --cpu --num_processes "$processes" --main_process_port 0 "$@" \
          "$program" --data_dir "$data" --epochs "$run_epochs")
  echo "$out" >&2
  # assert: the result is printed once, by the main process (accelerator.print)
  local printed
  # (epochs count from 0, as in Accelerate's examples)
  printed=$(grep -c "epoch $((run_epochs - 1)): test accuracy" <<<"$out" || true)
  if [[ "$printed" != 1 ]] || grep -q "^\[rank[1-9][0-9]*\]: " <<<"$out"; then
    echo "FAIL: 'epoch $((run_epochs - 1)): test accuracy' printed $printed times, or by a process other than the main one" >&2
    return 1
  fi
  grep -E "^(\[rank0\]: )?epoch [0-9]+: test accuracy" <<<"$out" |
    sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/'
}

fp32=$(accuracies "$epochs")
accuracy=$(tail -1 <<<"$fp32")
echo "final accuracy on $processes process(es): $accuracy% (bar: $minimum%)"
# assert: the fp32 accuracy reaches the bar
awk -v a="$accuracy" -v m="$minimum" 'BEGIN { exit !(a + 0 >= m + 0) }'

if [[ -n "$max_drop" ]]; then
  bf16_epochs=$epochs
  if ! grep -qwE 'avx512_bf16|amx_bf16|avx_ne_convert|bf16' /proc/cpuinfo; then
    bf16_epochs=1
    accuracy=$(head -1 <<<"$fp32")
    echo "note: no bf16 instructions on this CPU: the bf16 run trains 1 epoch, against fp32's first ($accuracy%)"
  fi
  bf16=$(accuracies "$bf16_epochs" --mixed_precision bf16 | tail -1)
  echo "bf16 accuracy on $processes process(es): $bf16% (fp32: $accuracy%, allowed drop: $max_drop points)"
  # assert: bf16 stays within MAX_BF16_DROP points of fp32
  awk -v b="$bf16" -v a="$accuracy" -v d="$max_drop" 'BEGIN { exit !(b + 0 >= a - d) }'
fi
