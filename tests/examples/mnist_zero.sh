#!/usr/bin/env bash
# The MNIST example, unchanged, under a ZeRO-2 accelerate config (the YAML
# `accelerate config` writes for DeepSpeed): on 2 processes, with DeepSpeed's
# default clipping switched off (--gradient_clipping 0), it must print
# exactly the accuracies data parallelism prints, epoch by epoch, since ZeRO
# stages 1 and 2 train bitwise like data parallelism (docs/sharding.md). As
# the YAML stands it clips at 1.0, as Accelerate does, and must still learn.
# Usage: mnist_zero.sh ACCELERATE_CLI MNIST_BINARY DATA_DIR [EPOCHS]
set -euo pipefail
cli=$1 program=$2 data=$3 epochs=${4:-1}
if [[ ! -f "$data/train-images-idx3-ubyte" ]]; then
  echo "MNIST data missing in $data: run scripts/fetch-mnist.sh" >&2
  exit 1
fi
work=$(mktemp -d /tmp/accelerate-mnist-zero.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/zero2.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
YAML

# The accuracy lines of one run; extra args go to launch.
accuracies() {
  local out
  out=$("$cli" launch --main_process_port 0 "$@" "$program" --data_dir "$data" --epochs "$epochs")
  echo "$out" >&2
  # rank 0's lines only: the ranks' lines interleave in any order
  grep -E "^(\[rank0\]: )?epoch [0-9]+: test accuracy" <<<"$out" |
    sed -E 's/^\[rank0\]: //; s/, [0-9.]+ ms\/step//'
}

# assert: the config reaches the processes as ZeRO stage 2 (what the
# Accelerator reads; tests/sharding checks that those variables shard)
dry=$("$cli" launch --dry_run --config_file "$work/zero2.yaml" "$program" 2>&1)
grep -q "rank 0: env .*ACCELERATE_DEEPSPEED_ZERO_STAGE=2 .*ACCELERATE_USE_DEEPSPEED=true" <<<"$dry"

plain=$(accuracies --cpu --num_processes 2)
zero=$(accuracies --config_file "$work/zero2.yaml" --gradient_clipping 0)
clipped=$(accuracies --config_file "$work/zero2.yaml")
echo "data parallel:            $plain"
echo "ZeRO-2, no clipping:      $zero"
echo "ZeRO-2, clipping at 1.0:  $clipped"
# assert: the run printed accuracies at all
[[ -n "$plain" ]]
# assert: ZeRO-2 prints exactly what data parallelism prints
[[ "$plain" == "$zero" ]]
# assert: with the default clipping it still learns (>= 90%). That the
# default clips is asserted in tests/sharding (ZeroConfigFile); the printed
# accuracy alone may or may not change (it did on 1.13, not on 2.6).
last=$(tail -n 1 <<<"$clipped" | sed -E 's/.*accuracy ([0-9]+)\..*/\1/')
(( last >= 90 ))
