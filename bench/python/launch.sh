#!/usr/bin/env bash
# Starts N local ranks of a Python reference script on gloo, the way torchrun
# would (torchrun itself crashes on Debian's torch 1.13 + Python 3.11):
# each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT. Threads per rank: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS if
# set, else cores / N (at least 1). Rank output is prefixed with [rK].
# When one rank fails the others are stopped; exit status is the first
# failure's (0 when all succeed).
#
# Usage: bench/python/launch.sh N SCRIPT.py [ARGS...]
#   e.g. bench/python/launch.sh 2 bench/python/mnist_reference.py
# Environment: PYTHON (default /usr/bin/python3), MASTER_PORT (default: a
# free port), MASTER_ADDR (default 127.0.0.1).
set -euo pipefail

die() { printf 'launch: error: %s\n' "$*" >&2; exit 1; }

(($# >= 2)) || die "usage: launch.sh N SCRIPT.py [ARGS...]"
n="$1"; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
python="${PYTHON:-/usr/bin/python3}"
[[ -x "$python" ]] || die "$python not found (Debian's python3 with python3-torch)"

cores="$(nproc 2>/dev/null || echo 1)"
threads=$((cores / n)); ((threads >= 1)) || threads=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$threads}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
if [[ -z "${MASTER_PORT:-}" ]]; then
  MASTER_PORT="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
export MASTER_PORT WORLD_SIZE="$n" LOCAL_WORLD_SIZE="$n"

pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap 'cleanup; exit 130' INT TERM

for ((r = 0; r < n; r++)); do
  RANK="$r" LOCAL_RANK="$r" "$python" -u "$@" \
    > >(sed -u "s/^/[r$r] /") 2> >(sed -u "s/^/[r$r] /" >&2) &
  pids+=("$!")
done

status=0
remaining=$n
while ((remaining > 0)); do
  rc=0
  wait -n "${pids[@]}" 2>/dev/null || rc=$?
  remaining=$((remaining - 1))
  if ((rc != 0 && status == 0)); then
    status=$rc
    printf 'launch: a rank exited with status %d; stopping the others\n' "$rc" >&2
    cleanup
  fi
done
wait 2>/dev/null || true
exit "$status"
