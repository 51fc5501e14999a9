#!/bin/bash
# The error lines the docs quote are the program's: each case runs the
# command that makes the quoted line (in a scratch folder, with the config
# file the example implies) and checks that the doc holds the line verbatim
# and that the program printed it verbatim, so that neither can drift from
# the other unnoticed.
#   quoted_outputs_test.sh ACCELERATE SOURCE_DIR
set -u
ACCELERATE=$1
DOCS=$2/docs
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0

# check DOC LINE CMD...: the doc holds LINE as a line, and CMD prints it.
check() {
  local doc=$1 line=$2
  shift 2
  if ! grep -Fxq -- "$line" "$DOCS/$doc"; then
    echo "FAILED: docs/$doc does not quote: $line"
    failures=$((failures + 1))
    return
  fi
  local out
  out=$("$@" 2>&1)
  if ! grep -Fxq -- "$line" <<<"$out"; then
    echo "FAILED: docs/$doc quotes a line the program does not print:"
    echo "  quoted:  $line"
    echo "  printed: $out"
    failures=$((failures + 1))
    return
  fi
  echo "ok: docs/$doc: $line"
}

# config.yaml whose line 9 is num_processes: 0.
printf '%s\n' "compute_environment: LOCAL_MACHINE" "debug: false" "distributed_type: NO" \
  "downcast_bf16: 'no'" "machine_rank: 0" "main_training_function: main" \
  "mixed_precision: 'no'" "num_machines: 1" "num_processes: 0" >config.yaml
check cli.md "accelerate launch: error: config.yaml:9: key 'num_processes' expects a whole number from 1 to 1000000, got '0'" \
  "$ACCELERATE" launch --config_file config.yaml /bin/true
# A DeepSpeed config.yaml whose line 7 asks for nvme.
printf '%s\n' "compute_environment: LOCAL_MACHINE" "distributed_type: DEEPSPEED" "num_processes: 1" \
  "use_cpu: true" "deepspeed_config:" "  zero_stage: 2" "  offload_optimizer_device: nvme" >ds.yaml
mv ds.yaml config.yaml
check cli.md "accelerate launch: error: config.yaml:7: key 'deepspeed_config.offload_optimizer_device' expects none or cpu (nvme offloading is not supported by accelerate-cpp), got 'nvme'" \
  "$ACCELERATE" launch --config_file config.yaml /bin/true
rm config.yaml

check launching.md "accelerate launch: error: program 'trian' not found (not a file and not on PATH)" \
  "$ACCELERATE" launch trian
check launching.md "accelerate launch: error: --num_processes 5 is not divisible by --num_machines 2: it counts the processes of all machines, and every machine starts the same number; use e.g. --num_processes 4 for 2 per machine" \
  "$ACCELERATE" launch --num_processes 5 --num_machines 2 --main_process_ip 127.0.0.1 /bin/true
check launching.md "accelerate launch: error: --rdzv_backend 'c10d' is not supported: accelerate-cpp has only the static rendezvous (--rdzv_backend static, with --main_process_ip/--main_process_port)" \
  "$ACCELERATE" launch --rdzv_backend c10d /bin/true
check launching.md "accelerate launch: error: --fsdp_auto_wrap_policy expects TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got 'BLOCK_WRAP'" \
  "$ACCELERATE" launch --use_fsdp --fsdp_auto_wrap_policy BLOCK_WRAP /bin/true
check launching.md "accelerate launch: error: --zero_stage expects 0, 1, 2 or 3, got '4'" \
  "$ACCELERATE" launch --use_deepspeed --zero_stage 4 /bin/true
check launching.md "accelerate launch: error: --offload_optimizer_device expects none or cpu (nvme offloading is not supported by accelerate-cpp), got 'nvme'" \
  "$ACCELERATE" launch --use_deepspeed --offload_optimizer_device nvme /bin/true
check launching.md "accelerate launch: error: zero2.json: cannot read the DeepSpeed config file: No such file or directory" \
  "$ACCELERATE" launch --use_deepspeed --deepspeed_config_file zero2.json /bin/true
check launching.md "accelerate launch: error: --gradient_accumulation_steps expects a whole number from 1 to 1000000, got '0'" \
  "$ACCELERATE" launch --gradient_accumulation_steps 0 /bin/true

if ((failures > 0)); then
  echo "$failures quoted line(s) drifted"
  exit 1
fi
echo "every quoted line checked is the program's"
