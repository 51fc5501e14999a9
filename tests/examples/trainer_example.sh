#!/usr/bin/env bash
# examples/trainer (the README's Trainer program) learns sin(x) on one
# process and on two through the launcher, printing its result once.
# Usage: trainer_example.sh ACCELERATE_CLI TRAINER_BINARY
set -euo pipefail
cli=$1 program=$2
work=$(mktemp -d /tmp/accelerate-trainer-example.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
check() {  # check WHAT OUTPUT: one final line, eval_loss below 0.05
  local lines loss
  lines=$(grep -c "final eval_loss " <<<"$2" || true)
  [[ $lines -eq 1 ]] || { echo "FAIL: $1 printed $lines final lines"; echo "$2"; exit 1; }
  loss=$(grep -oE "final eval_loss [0-9.e+-]+" <<<"$2" | cut -d' ' -f3)
  echo "$1: final eval_loss $loss"
  awk -v l="$loss" 'BEGIN { exit !(l < 0.05) }' || { echo "FAIL: $1 did not learn"; exit 1; }
}
check "1 process" "$("$program")"
check "2 processes" "$("$cli" launch -q --cpu --num_processes 2 --main_process_port 0 "$program")"
