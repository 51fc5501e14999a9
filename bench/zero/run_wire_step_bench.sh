#!/bin/bash
# Step time and bytes of ZeRO-3's wire formats on one machine (issue 31's
# benchmark, the half bench/zero/run_network_bench.sh does not cover): the
# GPT example's model (zero_network_bench) trained by 2 and 4 processes
# under DeepSpeed stage 3 with fp32 collectives, bf16 gradient
# reduce-scatters (communication_data_type) and ZeRO++'s qwZ + qgZ, each
# through shared memory and through Gloo on loopback
# (ACCELERATE_SHARED_MEMORY_ALLREDUCE), side by side in one run. Prints per
# run the step time (the slowest rank's mean over the measured steps) and
# the bytes each rank sends per step (Communicator::traffic), then each
# format's ratios to fp32 over the same transport and process count.
# Shared memory moves a bf16 reduce-scatter's rows where they lie (fp32
# reads; docs/sharding.md), so its byte counts there are fp32's.
#   bench/zero/run_wire_step_bench.sh [BUILD_DIR] [--preset small] [--steps 3]
#                                     [--processes "2 4"]
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$repo/build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then build=$(cd "$1" && pwd); shift; fi
preset=small steps=3 processes="2 4"
while [ $# -gt 0 ]; do
  case $1 in
    --preset) preset=$2 ;; --steps) steps=$2 ;; --processes) processes=$2 ;;
    *) echo "run_wire_step_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2 || { echo "run_wire_step_bench.sh: $1 needs a value" >&2; exit 2; }
done
ACCELERATE=$build/bin/accelerate
BENCH=$(find "$build" -name zero_network_bench -type f -perm -u+x | head -1)
[ -x "$ACCELERATE" ] && [ -n "$BENCH" ] ||
  { echo "run_wire_step_bench.sh: build the accelerate CLI and zero_network_bench in $build first" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export ACCELERATE_TIMEOUT=300

zero='"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3'
echo "{$zero}}" >"$WORK/fp32.json"
echo "{$zero}, \"communication_data_type\": \"bf16\"}" >"$WORK/bf16_grads.json"
echo "{$zero, \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true}}" \
  >"$WORK/qwz_qgz.json"

echo "GPT '$preset' preset, one machine, $steps measured steps after 2 warm-up steps"
for n in $processes; do
  for transport in shm gloo; do
    for format in fp32 bf16_grads qwz_qgz; do
      name=$n.$transport.$format
      ACCELERATE_SHARED_MEMORY_ALLREDUCE=$([ $transport = shm ] && echo 1 || echo 0) \
        "$ACCELERATE" launch --cpu --num_processes "$n" --main_process_port 0 --use_deepspeed \
        --deepspeed_config_file "$WORK/$format.json" "$BENCH" --preset "$preset" \
        --steps "$steps" >"$WORK/$name.out" 2>&1 ||
        { echo "run_wire_step_bench.sh: $name failed:"; cat "$WORK/$name.out"; exit 1; }
      grep -h "network_bench: rank" "$WORK/$name.out" >"$WORK/$name"
    done
  done
done

python3 - "$WORK" "$processes" <<'PY'
import re, sys
work, processes = sys.argv[1], sys.argv[2].split()
def summary(name):
    ranks = [dict(re.findall(r"(\w+)=([^\s]+)", line)) for line in open(f"{work}/{name}")]
    return max(float(r["step_ms"]) for r in ranks), sum(float(r["sent"]) for r in ranks) / len(ranks)
MB = 1e6
print(f"\n{'processes':<10}{'transport':<11}{'collectives':<13}{'step ms':>9}{'sent MB/step':>14}"
      f"{'time vs fp32':>14}{'bytes vs fp32':>15}")
for n in processes:
    for transport in ("shm", "gloo"):
        base_ms, base_sent = summary(f"{n}.{transport}.fp32")
        for fmt in ("fp32", "bf16_grads", "qwz_qgz"):
            ms, sent = summary(f"{n}.{transport}.{fmt}")
            print(f"{n:<10}{transport:<11}{fmt:<13}{ms:>9.1f}{sent / MB:>14.2f}"
                  f"{ms / base_ms:>14.3f}{sent / base_sent:>15.3f}")
PY
