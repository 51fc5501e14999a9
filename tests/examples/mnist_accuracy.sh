#!/usr/bin/env bash
# The README's main demo as a test: examples/mnist trained 3 epochs through
# our launcher must print per-epoch test accuracy and reach the issue's bar.
# Usage: mnist_accuracy.sh ACCELERATE_CLI MNIST_BINARY DATA_DIR PROCESSES MIN_ACCURACY
set -euo pipefail
cli=$1 program=$2 data=$3 processes=$4 minimum=$5
if [[ ! -f "$data/train-images-idx3-ubyte" ]]; then
  echo "MNIST data missing in $data: run scripts/fetch-mnist.sh" >&2
  exit 1
fi
out=$("$cli" launch --cpu --num_processes "$processes" --main_process_port 0 \
        "$program" --data_dir "$data" --epochs 3)
echo "$out"
final=$(grep '^\[rank0\]: epoch 3: test accuracy' <<<"$out" || grep '^epoch 3: test accuracy' <<<"$out")
accuracy=$(sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/' <<<"$final")
echo "final accuracy on $processes process(es): $accuracy% (bar: $minimum%)"
# assert accuracy >= minimum
awk -v a="$accuracy" -v m="$minimum" 'BEGIN { exit !(a + 0 >= m + 0) }'
