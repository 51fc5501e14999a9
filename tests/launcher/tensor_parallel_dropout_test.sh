#!/bin/bash
# Dropout at tp in real processes (thread ranks share one default generator,
# so only processes show it): tensor_parallel_dropout_probe, a tiny GPT-2
# with dropout 0.1, through `accelerate launch` at tp 2 on 2 processes, with
# and without Megatron's sequence parallelism:
#   1. both ranks print the same 4 losses and the same digest of their
#      whole parameters (wpe, the LayerNorms), which drift apart unless the
#      replicated activations were dropped alike (the split heads and tokens
#      take each rank's own masks);
#   2. the losses differ from those at dropout 0 (dropout ran);
#   3. a second launch prints the same losses (the masks follow the seed);
#   4. with activation checkpointing of every block, the same losses again
#      (the recomputation drew the same masks, so the gradients and the
#      next steps' losses are those of the plain run).
#   tensor_parallel_dropout_test.sh ACCELERATE PROBE
set -u
ACCELERATE=$1
PROBE=$2
fail() { echo "FAILED: $*"; exit 1; }

# One launch's losses, one line per rank in rank order.
launch() {
  local megatron=$1
  shift
  local out
  out=$(timeout 120 "$ACCELERATE" launch --cpu --num_processes 2 --main_process_port 0 \
    --use_parallelism_config --parallelism_config_tp_size 2 \
    --parallelism_config_tp_sequence_parallel "$megatron" "$PROBE" "$@" 2>&1) ||
    fail "launch (sequence parallel $megatron, $*) failed: $out"
  grep -o 'rank [0-9]* losses .*' <<<"$out" | sort
}

# Each line without its rank: the losses and the digest.
losses_of() { sed 's/^rank [0-9]* losses //' <<<"$1"; }

for megatron in false true; do
  runs=$(launch "$megatron")
  [ "$(wc -l <<<"$runs")" -eq 2 ] || fail "expected 2 ranks' lines, got: $runs"
  [ "$(losses_of "$runs" | sort -u | wc -l)" -eq 1 ] ||
    fail "the ranks of the tp group disagree (sequence parallel $megatron): $runs"
  plain=$(launch "$megatron" --dropout 0)
  [ "$(losses_of "$runs" | head -1)" != "$(losses_of "$plain" | head -1)" ] ||
    fail "dropout 0.1 gave dropout 0's losses (sequence parallel $megatron)"
  [ "$(launch "$megatron")" == "$runs" ] || fail "a second launch drew other masks ($megatron)"
  checkpointed=$(launch "$megatron" --checkpointing)
  [ "$checkpointed" == "$runs" ] ||
    fail "activation checkpointing changed the losses (sequence parallel $megatron): $checkpointed vs $runs"
  echo "sequence parallel $megatron: $(losses_of "$runs" | head -1)"
done
echo "PASSED"
