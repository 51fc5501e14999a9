#!/bin/bash
# Bytes between machines and step time of FULL_SHARD against HYBRID_SHARD
# (docs/sharding.md, "Choosing a sharding strategy"). Two network namespaces
# joined by a veth pair act as two machines of 2 ranks each and train the
# GPT example's model (zero_network_bench), and DeepSpeed's stage 3 with
# ZeRO++ hpZ (zero_hpz_partition_size 2) and with bf16 gradient
# reduce-scatters (communication_data_type) and ZeRO++'s quantized weights
# and gradients (qwZ + qgZ) beside them; each rank reports the bytes its
# communicator counted per step, and each machine's local rank 0 the bytes
# its veth interface moved in the same steps. Runs unshaped, then with the
# link shaped to RATE by tc's token-bucket filter (netem's delay is used
# when the kernel has it). Then 4 ranks on one machine with shard groups of
# 2 (hybrid sharding inside one "node"): the groups' collectives through
# shared memory against the same run with it off (Gloo on loopback).
#   bench/zero/run_network_bench.sh [BUILD_DIR] [--preset small] [--steps 5]
#                                   [--rate 1gbit] [--delay 0.5ms]
# Needs root and iproute2 (exit 77 otherwise). Prints a table and ratios.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$repo/build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then build=$(cd "$1" && pwd); shift; fi
preset=small steps=5 rate=1gbit delay=0.5ms
while [ $# -gt 0 ]; do
  case $1 in
    --preset) preset=$2 ;; --steps) steps=$2 ;; --rate) rate=$2 ;; --delay) delay=$2 ;;
    *) echo "run_network_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2 || { echo "run_network_bench.sh: $1 needs a value" >&2; exit 2; }
done
ACCELERATE=$build/bin/accelerate
BENCH=$(find "$build" -name zero_network_bench -type f -perm -u+x | head -1)
[ -x "$ACCELERATE" ] && [ -n "$BENCH" ] ||
  { echo "run_network_bench.sh: build the accelerate CLI and zero_network_bench in $build first" >&2; exit 2; }

source "$repo/tests/support/netns_machines.sh"
WORK=$(mktemp -d)
cleanup() { netns_machines_down; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
netns_machines_up || { echo "SKIPPED: $NETNS_WHY"; exit 77; }

export ACCELERATE_TIMEOUT=300
FSDP=(--use_fsdp --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP --fsdp_transformer_layer_cls_to_wrap GPT2Block)
port=29600
echo '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}' >"$WORK/HPZ.json"
echo '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}, "communication_data_type": "bf16"}' >"$WORK/BF16_GRADS.json"
echo '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}}' >"$WORK/ZEROPP.json"
# run NAME STRATEGY: one 2-machine job; its rank lines in $WORK/NAME
run() {
  local name=$1 strategy=$2 sharding
  if [ -f "$WORK/$strategy.json" ]; then  # a DeepSpeed configuration
    sharding=(--use_deepspeed --deepspeed_config_file "$WORK/$strategy.json")
  else
    sharding=("${FSDP[@]}" --fsdp_sharding_strategy "$strategy")
  fi
  port=$((port + 1))
  for m in 0 1; do
    ip netns exec "$([ $m = 0 ] && echo "$NS0" || echo "$NS1")" "$ACCELERATE" launch --cpu \
      --num_processes 4 --num_machines 2 --machine_rank $m --main_process_ip 10.233.7.1 \
      --main_process_port $port "${sharding[@]}" \
      "$BENCH" --preset "$preset" --steps "$steps" >"$WORK/$name.m$m" 2>&1 &
  done
  wait %1 && wait %2 || { echo "run_network_bench.sh: $name failed:"; cat "$WORK/$name".m*; exit 1; }
  grep -h "network_bench: rank" "$WORK/$name".m* >"$WORK/$name"
}

shape() {  # on both ends of the link (each shapes what it sends)
  local dev m err
  for m in 0 1; do
    dev=veth_m$m
    if err=$(ip netns exec "$([ $m = 0 ] && echo "$NS0" || echo "$NS1")" \
             tc qdisc add dev $dev root netem rate "$rate" delay "$delay" 2>&1); then
      shaping="$rate, $delay delay (netem)"
    elif err=$(ip netns exec "$([ $m = 0 ] && echo "$NS0" || echo "$NS1")" \
               tc qdisc add dev $dev root tbf rate "$rate" burst 256kb latency 100ms 2>&1); then
      shaping="$rate (tbf; no delay: this kernel has no netem)"
    else
      shaping=""; echo "note: the link stays unshaped: tc: $err"; return 1
    fi
  done
}

echo "GPT '$preset' preset, 2 machines x 2 ranks, $steps measured steps after 2 warm-up steps"
run full_unshaped FULL_SHARD
run hybrid_unshaped HYBRID_SHARD
run hpz_unshaped HPZ
run bf16_unshaped BF16_GRADS
run zeropp_unshaped ZEROPP
shaped=0
if shape; then
  shaped=1
  run full_shaped FULL_SHARD
  run hybrid_shaped HYBRID_SHARD
  run hpz_shaped HPZ
fi

# One machine, 4 ranks, shard groups of 2: shared memory on and off.
one_machine() {  # NAME SHARED_MEMORY
  port=$((port + 1))
  in0 env ACCELERATE_SHARED_MEMORY_ALLREDUCE=$2 "$ACCELERATE" launch --cpu --num_processes 4 \
    --main_process_port $port "${FSDP[@]}" --fsdp_sharding_strategy HYBRID_SHARD \
    --use_parallelism_config --parallelism_config_dp_shard_size 2 \
    --parallelism_config_dp_replicate_size 2 \
    "$BENCH" --preset "$preset" --steps "$steps" >"$WORK/$1.out" 2>&1 ||
    { echo "run_network_bench.sh: $1 failed:"; cat "$WORK/$1.out"; exit 1; }
  grep -h "network_bench: rank" "$WORK/$1.out" >"$WORK/$1"
}
one_machine node_shm 1
one_machine node_gloo 0

python3 - "$WORK" "$shaped" "${shaping:-}" <<'PY'
import re, sys
work, shaped, shaping = sys.argv[1], sys.argv[2] == "1", sys.argv[3]

def load(name):
    ranks = []
    for line in open(f"{work}/{name}"):
        fields = dict(re.findall(r"(\w+)=([^\s]+)", line))
        ranks.append(fields)
    assert len(ranks) == 4, f"{name}: {len(ranks)} rank lines"
    return ranks

def summary(name):
    ranks = load(name)
    num = lambda key: [float(r[key]) for r in ranks if key in r]
    counted = sum(num("sent_off_machine")) / 4
    wire = sum(num("link_tx")) / 4 if num("link_tx") else float("nan")
    step = max(num("step_ms"))
    return counted, wire, step, ranks[0]

def formula(strategy, first):
    # Per rank, bytes sent to the other machine per step, fp32 (4 bytes per
    # parameter): U in the blocks (stage-3 units), W the rest (embeddings,
    # final LayerNorm: kept whole, their gradients sharded as at stage 2).
    # N = 4 ranks, G = 2 per machine, R = 2 machines; of each peer-to-peer
    # collective over the job, (N - G) / N of a rank's bytes leave its machine.
    U = 4 * float(first["unit_parameters"])
    W = 4 * (float(first["parameters"]) - float(first["unit_parameters"]))
    N, G, R = 4, 2, 2
    if strategy == "FULL_SHARD":
        # units: gather in forward, again in backward, reduce-scatter; the
        # rest: reduce-scatter, gather after the step
        return (3 * U + 2 * W) * (N - G) / N
    if strategy == "HPZ":  # as FULL_SHARD, the backward gather inside the machine
        return (2 * U + 2 * W) * (N - G) / N
    if strategy == "BF16_GRADS":  # as FULL_SHARD, the reduce-scatters in half the bytes
        return (2.5 * U + 1.5 * W) * (N - G) / N
    if strategy == "ZEROPP":  # gathers int8 (1 byte), reduce-scatters int4 (1/2), + scales
        per_element = lambda bits: bits / 8 + 4 / 4096  # about: blocks cut at each row's end
        # qgZ in two levels: only each machine's partial sums, 1/G of the
        # gradients, cross (R-1)/R to the other machines
        return ((2 * U + W) * per_element(8) * (N - G) / N
                + (U + W) * per_element(4) * (R - 1) / R / G) / 4
    # every gradient shard (1/G of each) all-reduced across the R machines
    # (a ring: 2 (R - 1) / R of it sent); the gathers stay on the machine
    return 2 * (R - 1) / R * (U + W) / G

MB = 1e6
print(f"\n{'run':<28}{'counted MB/step':>16}{'formula MB':>12}{'veth MB':>10}{'step ms':>10}")
rows = {}
for name, strategy, label in [("full_unshaped", "FULL_SHARD", "FULL_SHARD, unshaped"),
                              ("hybrid_unshaped", "HYBRID_SHARD", "HYBRID_SHARD, unshaped"),
                              ("hpz_unshaped", "HPZ", "stage 3 + hpZ 2, unshaped"),
                              ("bf16_unshaped", "BF16_GRADS", "stage 3, bf16 grads, unshaped"),
                              ("zeropp_unshaped", "ZEROPP", "stage 3, qwZ + qgZ, unshaped"),
                              ("full_shaped", "FULL_SHARD", "FULL_SHARD, shaped"),
                              ("hybrid_shaped", "HYBRID_SHARD", "HYBRID_SHARD, shaped"),
                              ("hpz_shaped", "HPZ", "stage 3 + hpZ 2, shaped")]:
    if "shaped" in name and "unshaped" not in name and not shaped:
        continue
    counted, wire, step, first = summary(name)
    rows[name] = (counted, wire, step)
    print(f"{label:<28}{counted / MB:>16.2f}{formula(strategy, first) / MB:>12.2f}"
          f"{wire / MB:>10.2f}{step:>10.1f}")
print("(bytes each rank sends to the other machine per step; veth: the interface's bytes "
      "sent per step / 2 ranks, headers included)")
if shaped:
    print(f"shaped link: {shaping}")
else:
    print("the link was not shaped (see the note above)")
for other, title in [("hybrid", "HYBRID_SHARD / FULL_SHARD (goal for bytes: <= 0.5)"),
                     ("hpz", "stage 3 + hpZ / FULL_SHARD"),
                     ("bf16", "stage 3 with bf16 gradient reduce-scatters / FULL_SHARD"),
                     ("zeropp", "stage 3 with qwZ + qgZ / FULL_SHARD (goal for bytes: <= 0.3)")]:
    print(f"\nratios {title}")
    for kind in ["unshaped", "shaped"]:
        if f"full_{kind}" not in rows or f"{other}_{kind}" not in rows:
            continue
        f, h = rows[f"full_{kind}"], rows[f"{other}_{kind}"]
        print(f"  {kind:<9} counted bytes {h[0] / f[0]:.3f}   veth bytes {h[1] / f[1]:.3f}"
              f"   step time {h[2] / f[2]:.3f}")
shm, gloo = summary("node_shm"), summary("node_gloo")
print(f"\none machine, 4 ranks, shard groups of 2: step {shm[2]:.1f} ms with shared memory, "
      f"{gloo[2]:.1f} ms through Gloo: ratio {shm[2] / gloo[2]:.3f}")
PY
