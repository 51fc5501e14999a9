#!/bin/bash
# Programs started by the real torchrun: PyPI's torch 2.x (the reference venv,
# $ACCELERATE_REFERENCE_PYTHON), whose agent serves the rendezvous store on
# MASTER_PORT itself and tells the workers so (TORCHELASTIC_USE_AGENT_STORE).
# Each run trains training_probe, whose rank 0 prints the trained weights and
# one plain process's; every run must equal `accelerate launch` with as many
# ranks, and the plain process to 1e-5:
#   1. --standalone, 2 processes
#   2. c10d rendezvous on a fixed port
#   3. --max-restarts 1, one worker killed with SIGKILL: the restarted group
#      (TORCHELASTIC_RESTART_COUNT=1) trains in a fresh section of the
#      agent's store, which still holds the first attempt's keys
#   4. two machines (network namespaces), each running torchrun --nnodes 2
#      with 2 processes, against 4 local ranks
# Older torchruns, whose workers host the store themselves, are covered by
# tests/distributed/rendezvous_test.cpp (torchrun's variables, no agent store).
# Exit 77 (skipped) without the Python reference; step 4 is skipped alone
# where network namespaces cannot be made.
#   torchrun_test.sh ACCELERATE TRAINING_PROBE
set -u
ACCELERATE=$1
TRAINING=$2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

PYTHON=${ACCELERATE_REFERENCE_PYTHON:-}
[ -n "$PYTHON" ] || skip "no Python reference (ACCELERATE_REFERENCE_PYTHON unset)"
"$PYTHON" -c 'import torch.distributed.run' 2>/dev/null || skip "$PYTHON has no torch.distributed.run"
echo "torchrun: $("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
# Not a shell function: `timeout` runs programs (and a bare `torchrun` could be
# Debian's 1.13 one, /usr/bin/torchrun).
TORCHRUN=("$PYTHON" -m torch.distributed.run)

WORK=$(mktemp -d)
PIDS=()
NETNS=0
source "$(dirname "$0")/../support/netns_machines.sh"
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  ((NETNS)) && netns_machines_down
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
export ACCELERATE_TIMEOUT=60 OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore

result_of() { grep -o 'trained a=[-0-9.]* b=[-0-9.]* on [0-9]* ranks' "$1"; }
# same_as_one_process FILE: its result equals its plain one-process reference to 1e-5.
same_as_one_process() {
  local trained reference
  trained=$(result_of "$1")
  reference=$(grep -o 'reference a=[-0-9.]* b=[-0-9.]*' "$1")
  [ -n "$trained" ] && [ -n "$reference" ] || return 1
  echo "$trained / $reference" | awk '{
    split($2, a, "="); split($3, b, "="); split($9, ra, "="); split($10, rb, "=");
    d1 = a[2] - ra[2]; d2 = b[2] - rb[2]; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2;
    exit !(d1 < 1e-5 && d2 < 1e-5) }'
}
# expect_training NAME FILE EXPECTED: FILE's result is EXPECTED and one process's.
expect_training() {
  local got
  got=$(result_of "$2")
  [ -n "$got" ] && [ "$got" = "$3" ] || fail "$1: trained '$got', accelerate launch '$3': $(cat "$2")"
  same_as_one_process "$2" || fail "$1: the result differs from one process: $(cat "$2")"
  echo "ok: $1: $got"
}

"$ACCELERATE" launch --cpu --num_processes 2 --main_process_port 0 "$TRAINING" >"$WORK/ours2" 2>&1 ||
  fail "accelerate launch with 2 processes: $(cat "$WORK/ours2")"
ours2=$(result_of "$WORK/ours2")
"$ACCELERATE" launch --cpu --num_processes 4 --main_process_port 0 "$TRAINING" >"$WORK/ours4" 2>&1 ||
  fail "accelerate launch with 4 processes: $(cat "$WORK/ours4")"
ours4=$(result_of "$WORK/ours4")

# 1. --standalone: the agent picks the port and serves the store on it.
timeout 120 "${TORCHRUN[@]}" --standalone --nproc-per-node 2 --no-python "$TRAINING" >"$WORK/standalone" 2>&1 ||
  fail "torchrun --standalone: exit $?: $(cat "$WORK/standalone")"
expect_training "torchrun --standalone, 2 processes" "$WORK/standalone" "$ours2"

# 2. The c10d rendezvous on a port of our choosing.
port=$(( (RANDOM % 5000) + 41000 ))
timeout 120 "${TORCHRUN[@]}" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d \
  --rdzv-endpoint "127.0.0.1:$port" --no-python "$TRAINING" >"$WORK/c10d" 2>&1 ||
  fail "torchrun --rdzv-backend c10d: exit $?: $(cat "$WORK/c10d")"
expect_training "torchrun --rdzv-backend c10d on port $port" "$WORK/c10d" "$ours2"

# 3. A worker killed with SIGKILL; torchrun restarts the group once.
mkdir -p "$WORK/hold"
timeout 180 "${TORCHRUN[@]}" --standalone --nproc-per-node 2 --max-restarts 1 --monitor-interval 0.5 \
  --no-python "$TRAINING" --hold-first-attempt "$WORK/hold" >"$WORK/restart" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do
  [ -f "$WORK/hold/rank0.pid" ] && [ -f "$WORK/hold/rank1.pid" ] && break
  kill -0 "${PIDS[-1]}" 2>/dev/null || break
  sleep 0.1
done
[ -f "$WORK/hold/rank1.pid" ] || fail "the first attempt never formed its group: $(cat "$WORK/restart")"
kill -KILL "$(cat "$WORK/hold/rank1.pid")"
wait "${PIDS[-1]}" || fail "torchrun --max-restarts 1 after a SIGKILL: exit $?: $(cat "$WORK/restart")"
grep -qx 'attempt 1' "$WORK/restart" || fail "the job did not train in attempt 1: $(cat "$WORK/restart")"
expect_training "torchrun --max-restarts 1, rank 1 killed, restarted" "$WORK/restart" "$ours2"

# 4. Two machines, each its own torchrun with 2 of the job's 4 processes.
if ! netns_machines_up; then
  echo "note: two-machine torchrun skipped: $NETNS_WHY"
  exit 0
fi
NETNS=1
port=$(( (RANDOM % 5000) + 46000 ))
# Both namespaces share this host's name, so torchrun can neither tell which
# of them the endpoint is on (is_host) nor give the other its address
# (--local-addr) by looking the name up, as it would on real machines.
for node in 0 1; do
  "in$node" timeout 150 "${TORCHRUN[@]}" --nnodes 2 --nproc-per-node 2 \
    --rdzv-backend c10d --rdzv-endpoint "10.233.7.1:$port" --rdzv-id netns-job \
    --rdzv-conf "is_host=$((node == 0))" --local-addr "10.233.7.$((node + 1))" \
    --no-python "$TRAINING" >"$WORK/m$node" 2>&1 &
  PIDS+=($!)
done
wait "${PIDS[-2]}"; code0=$?
wait "${PIDS[-1]}"; code1=$?
((code0 == 0 && code1 == 0)) ||
  fail "two machines: exit codes $code0 and $code1: $(cat "$WORK/m0") --- $(cat "$WORK/m1")"
# torchrun's rendezvous decides which machine is node 0; its rank 0 reports.
cat "$WORK/m0" "$WORK/m1" >"$WORK/machines"
expect_training "torchrun --nnodes 2 on two machines x 2 processes" "$WORK/machines" "$ours4"
echo "torchrun_test: all passed"
