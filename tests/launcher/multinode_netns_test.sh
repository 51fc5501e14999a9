#!/bin/bash
# Two machines on one host: two network namespaces joined by a veth pair
# (10.233.7.1 and 10.233.7.2), each running one `accelerate launch` with two
# ranks of a real 4-rank job (static rendezvous on machine 0): first the
# collectives, then a training run whose result must equal 4 local ranks' and
# one process's, then the same run under FSDP's HYBRID_SHARD (sharded within
# each machine, replicated across them), then a Llama at tensor parallelism 2
# inside each machine and data parallelism across (with and without
# Megatron's sequence parallelism): only the data-parallel bytes cross the
# link. Also checks, before anything starts, that a main address with no
# route is one clear error. Exit 77 (skipped) where namespaces cannot
# be created.
#   multinode_netns_test.sh ACCELERATE COLLECTIVES_PROBE TRAINING_PROBE [TENSOR_PARALLEL_PROBE]
set -u
ACCELERATE=$1
PROBE=$2
TRAINING=${3:-}
TENSOR_PARALLEL=${4:-}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[ -x "$PROBE" ] || skip "collectives_probe was not built ($PROBE)"
source "$(dirname "$0")/../support/netns_machines.sh"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  netns_machines_down
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
netns_machines_up || skip "$NETNS_WHY"

# 1. An address this machine has no route to: one line, exit 2, nothing runs.
in1 "$ACCELERATE" launch --cpu --num_processes 4 --num_machines 2 --machine_rank 1 \
  --main_process_ip 10.99.0.1 "$PROBE" check >"$WORK/out" 2>"$WORK/err"
code=$?
[ $code = 2 ] || fail "unroutable address: exit code $code, expected 2: $(cat "$WORK/err")"
grep -q "^accelerate launch: error: no route from this machine to --main_process_ip 10.99.0.1; " "$WORK/err" ||
  fail "unroutable address message: $(cat "$WORK/err")"
[ "$(wc -l <"$WORK/err")" = 1 ] || fail "more than one error line: $(cat "$WORK/err")"
echo "ok: unroutable --main_process_ip is one error line"

# 2. The real job: machine 0 hosts the rendezvous, machine 1 joins it; the
# flags of machine 1 use the dashed spelling.
export ACCELERATE_TIMEOUT=40
two_machines() {  # PORT PROGRAM [ARGS...]: output in $WORK/m0 and $WORK/m1
  local port=$1
  shift
  in0 timeout 60 "$ACCELERATE" launch --cpu --num_processes 4 --num_machines 2 --machine_rank 0 \
    --main_process_ip 10.233.7.1 --main_process_port "$port" "$@" >"$WORK/m0" 2>&1 &
  PIDS+=($!)
  in1 timeout 60 "$ACCELERATE" launch --cpu --num-processes 4 --num-machines 2 --machine-rank 1 \
    --main-process-ip 10.233.7.1 --main-process-port "$port" "$@" >"$WORK/m1" 2>&1 &
  PIDS+=($!)
  wait "${PIDS[-2]}"; code0=$?
  wait "${PIDS[-1]}"; code1=$?
  echo "--- machine 0 (exit $code0)"; cat "$WORK/m0"
  echo "--- machine 1 (exit $code1)"; cat "$WORK/m1"
  [ $code0 = 0 ] && [ $code1 = 0 ] || fail "the 2-machine job failed: $*"
}
two_machines 29517 "$PROBE" check
for rank in 0 1; do
  grep -q "^\[rank$rank\]: rank $rank: collectives ok (rank $rank/4 (local $rank/2, node 0/2) cpu gloo" "$WORK/m0" ||
    fail "rank $rank did not report on machine 0"
done
for rank in 2 3; do
  local_rank=$((rank - 2))
  grep -q "^\[rank$rank\]: rank $rank: collectives ok (rank $rank/4 (local $local_rank/2, node 1/2) cpu gloo" "$WORK/m1" ||
    fail "rank $rank did not report on machine 1"
done
# The launcher named the interface towards the main address for Gloo.
grep -q "note: GLOO_SOCKET_IFNAME=veth_m1 (the interface towards 10.233.7.1)" "$WORK/m1" ||
  fail "GLOO_SOCKET_IFNAME was not chosen on machine 1"
echo "ok: 2 machines x 2 ranks ran the collectives over the veth pair"

# 3. Training: 2 machines x 2 ranks, then 4 ranks on machine 0 alone.
[ -x "$TRAINING" ] || { echo "note: no training_probe given; training check skipped"; exit 0; }
two_machines 29518 "$TRAINING"
in0 timeout 60 "$ACCELERATE" launch --cpu --num_processes 4 --main_process_port 29519 "$TRAINING" >"$WORK/local" 2>&1 ||
  fail "4 local ranks failed: $(cat "$WORK/local")"
cat "$WORK/local"
multi=$(grep -o 'trained a=[-0-9.]* b=[-0-9.]* on 4 ranks' "$WORK/m0")
local_result=$(grep -o 'trained a=[-0-9.]* b=[-0-9.]* on 4 ranks' "$WORK/local")
[ -n "$multi" ] && [ "$multi" = "$local_result" ] ||
  fail "2 machines gave '$multi', 4 local ranks gave '$local_result'"
# And one process with the global batch (to 1e-5, as the equivalence tests).
reference=$(grep -o 'reference a=[-0-9.]* b=[-0-9.]*' "$WORK/m0")
echo "$multi / $reference" | awk '{
  split($2, a, "="); split($3, b, "="); split($9, ra, "="); split($10, rb, "=");
  d1 = a[2] - ra[2]; d2 = b[2] - rb[2]; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2;
  exit !(d1 < 1e-5 && d2 < 1e-5) }' || fail "the 2-machine result '$multi' differs from one process: '$reference'"
echo "ok: training on 2 machines x 2 ranks = 4 local ranks = one process ($multi)"

# 4. Hybrid sharding (FSDP's HYBRID_SHARD): each machine's 2 ranks shard the
# model, the machines replicate it; the result is one process's (to 1e-5).
two_machines 29520 --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD "$TRAINING"
grep -q "note: hybrid sharding: groups of 2 consecutive processes" "$WORK/m0" ||
  fail "HYBRID_SHARD did not make a shard group of each machine"
hybrid=$(grep -o 'trained a=[-0-9.]* b=[-0-9.]* on 4 ranks' "$WORK/m0")
[ -n "$hybrid" ] || fail "HYBRID_SHARD printed no result"
echo "$hybrid / $reference" | awk '{
  split($2, a, "="); split($3, b, "="); split($9, ra, "="); split($10, rb, "=");
  d1 = a[2] - ra[2]; d2 = b[2] - rb[2]; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2;
  exit !(d1 < 1e-5 && d2 < 1e-5) }' || fail "HYBRID_SHARD gave '$hybrid', one process '$reference'"
echo "ok: HYBRID_SHARD on 2 machines x 2 ranks = one process ($hybrid)"

# 5. Tensor parallelism inside each machine (the mesh's innermost
# dimension: ranks 0-1 on machine 0, 2-3 on machine 1), data parallelism
# across: the tp groups move their activations without a byte off the
# machine, the data-parallel group's gradients cross it, and the losses are
# 4 local ranks'.
[ -x "$TENSOR_PARALLEL" ] || { echo "note: no tensor_parallel_probe given; tp check skipped"; exit 0; }
for megatron in false true; do
  tp_flags=(--use_parallelism_config --parallelism_config_tp_size 2
            --parallelism_config_tp_sequence_parallel "$megatron")
  two_machines 29521 "${tp_flags[@]}" "$TENSOR_PARALLEL"
  cat "$WORK/m0" "$WORK/m1" >"$WORK/tp_all"
  for rank in 0 1 2 3; do
    grep -q "^\[rank$rank\]: traffic tp group .* sent [1-9][0-9]* off_machine 0$" "$WORK/tp_all" ||
      fail "rank $rank: its tp group moved nothing, or moved bytes off its machine (sequence parallel $megatron)"
    grep -q "^\[rank$rank\]: traffic dp_replicate[a-z_ x]* group .* off_machine [1-9][0-9]*$" "$WORK/tp_all" ||
      fail "rank $rank: its data-parallel group sent nothing across machines (sequence parallel $megatron)"
  done
  crossing=$(grep "traffic .* off_machine [1-9]" "$WORK/tp_all" | grep -v "traffic dp_replicate")
  [ -z "$crossing" ] || fail "bytes crossed machines outside the data-parallel groups: $crossing"
  in0 timeout 60 "$ACCELERATE" launch --cpu --num_processes 4 --main_process_port 29522 \
    "${tp_flags[@]}" "$TENSOR_PARALLEL" >"$WORK/tp_local" 2>&1 ||
    fail "4 local ranks at tp 2 failed: $(cat "$WORK/tp_local")"
  multi=$(grep -o 'loss [0-9.]*' "$WORK/m0")
  local_loss=$(grep -o 'loss [0-9.]*' "$WORK/tp_local")
  [ -n "$multi" ] && [ "$multi" = "$local_loss" ] ||
    fail "tp 2 x dp 2 on 2 machines gave '$multi', on 4 local ranks '$local_loss' (sequence parallel $megatron)"
  echo "ok: tp 2 inside each machine x dp 2 across (sequence parallel $megatron): only dp bytes crossed; $multi as 4 local ranks"
done
