#!/usr/bin/env bash
# Which thread pool sizes train the GPT example fastest (docs/gpt-performance.md,
# "Profile"): examples/gpt through `accelerate launch --cpu --num_processes N`
# for N in PROCS, once per OMP_NUM_THREADS x OPENBLAS_NUM_THREADS pair per
# process, and once with neither set (the launcher's default: OMP_NUM_THREADS
# = max(1, cores / N), OPENBLAS_NUM_THREADS = 1, OMP_WAIT_POLICY = PASSIVE,
# OPENBLAS_THREAD_TIMEOUT = 4; docs/launching.md, "Threads"). Every pair also
# runs with OMP_WAIT_POLICY = PASSIVE and (from the launcher) the timeout, so
# the pools' sizes are all that differs from the default.
#
# Which pool does what (per process):
#   OpenMP (OMP_NUM_THREADS; the Accelerator calls at::set_num_threads with
#     it): LibTorch's own kernels, and oneDNN, which runs on the same OpenMP
#     pool (its verbose mode says "runtime:OpenMP,nthr:T"): bf16 matmuls go
#     through oneDNN on LibTorch 1.13 and 2.x alike, and so do 2.x's fp32
#     ones through MKL, also on that pool.
#   OpenBLAS (OPENBLAS_NUM_THREADS): its own pthread pool, used by LibTorch
#     1.13's fp32 matmuls (Debian links OpenBLAS); PyPI's LibTorch 2.x links
#     MKL and no OpenBLAS, where the variable changes nothing.
# With PROBE=1 each setting first runs a 1-step bench/gpt/gpt_profile
# (tiny preset, bf16) with ONEDNN_VERBOSE=1 and prints the pool sizes each
# process reports: "omp=T" (at::get_num_threads, the main process) and
# "onednn=T,T" (oneDNN's nthr, one per process).
#
# Output: one line per run, then per N and precision a table of tokens/s
# (the best of REPEATS rounds; each round runs the settings in a rotated
# order), each setting's ratio to the fastest, and whether the default is
# the fastest or within NOISE percent of it (runs on a shared machine vary
# by a few percent: read a gap below NOISE as a tie).
#
# Usage: bash bench/gpt/run_gpt_threads.sh [BUILD_DIR]       (default: build)
#   needs BUILD_DIR/examples/gpt and bin/accelerate (and bench/gpt/gpt_profile
#   for PROBE=1), data/brown.
#
# Environment (defaults in brackets):
#   PROCS ["2 1"]  PRECISIONS [bf16]  PRESET [small]  VOCAB [8192 small,
#   4096 tiny]  BATCH [16 per process]  STEPS [20]  SKIP [5] (untimed)
#   THREADS [1, cores / N and cores, each once]: the sizes tried for each
#     pool, e.g. "1 2" on 2 cores gives 1x1, 1x2, 2x1, 2x2
#   REPEATS [1]  NOISE [3] (percent)  PROBE [1]
#   MAX_LOAD [0.5]  before each run, wait (up to MAX_WAIT [1800] s, then warn)
#                   for the 1-minute load average to fall below it
#   DATA_DIR [data/brown]  LOG_DIR [a new folder]
set -euo pipefail

die() { printf 'run_gpt_threads: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
gpt="$build/examples/gpt" launcher="$build/bin/accelerate" profile="$build/bench/gpt/gpt_profile"
for f in "$gpt" "$launcher"; do
  [[ -x "$f" ]] || die "$f not found: cmake --build $build --target gpt accelerate_cli"
done

PRESET="${PRESET:-small}"
case "$PRESET" in
  small) VOCAB="${VOCAB:-8192}" context=256 ;;
  tiny) VOCAB="${VOCAB:-4096}" context=128 ;;
  *) die "PRESET must be small or tiny, got '$PRESET'" ;;
esac
BATCH="${BATCH:-16}" STEPS="${STEPS:-20}" SKIP="${SKIP:-5}" REPEATS="${REPEATS:-1}"
NOISE="${NOISE:-3}" PROBE="${PROBE:-1}" MAX_LOAD="${MAX_LOAD:-0.5}" MAX_WAIT="${MAX_WAIT:-1800}"
PROCS="${PROCS:-2 1}" PRECISIONS="${PRECISIONS:-bf16}" DATA_DIR="${DATA_DIR:-data/brown}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/gpt-threads.XXXXXX)}"
for v in VOCAB BATCH STEPS REPEATS MAX_WAIT; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if ! [[ "$SKIP" =~ ^[0-9]+$ ]] || ((SKIP >= STEPS)); then die "SKIP must be in [0, STEPS)"; fi
[[ "$NOISE" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "NOISE must be a number, got '$NOISE'"
[[ "$MAX_LOAD" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "MAX_LOAD must be a number, got '$MAX_LOAD'"
[[ "$PROBE" == 0 || "$PROBE" == 1 ]] || die "PROBE must be 0 or 1, got '$PROBE'"
[[ "$PROBE" == 0 || -x "$profile" ]] || die "$profile not found (PROBE=1): cmake --build $build --target gpt_profile, or PROBE=0"
for n in $PROCS; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "PROCS must list positive integers, got '$PROCS'"; done
for p in $PRECISIONS; do [[ "$p" == fp32 || "$p" == bf16 ]] || die "PRECISIONS must list fp32/bf16, got '$p'"; done
for t in ${THREADS:-}; do [[ "$t" =~ ^[1-9][0-9]*$ ]] || die "THREADS must list positive integers, got '$THREADS'"; done
for f in train.txt validation.txt; do
  [[ -f "$DATA_DIR/$f" ]] || die "$DATA_DIR/$f not found: run scripts/fetch-brown.sh"
done
cores="$(nproc)"
mkdir -p "$LOG_DIR/data" "$LOG_DIR/out" || die "cannot create $LOG_DIR"

# load1, busy, wait_quiet
source "$root/bench/gpt/quiet_machine.sh"

# ---- the data (as run_gpt_bench.sh) --------------------------------------------
for f in train.txt validation.txt; do ln -sf "$(cd "$DATA_DIR" && pwd)/$f" "$LOG_DIR/data/$f"; done
common=(--preset "$PRESET" --vocab_size "$VOCAB" --per_device_train_batch_size "$BATCH"
        --per_device_eval_batch_size "$BATCH" --eval_strategy no --save_strategy no
        --max_eval_samples 1 --output_dir "$LOG_DIR/out" --data_dir "$LOG_DIR/data")
OMP_NUM_THREADS="$cores" "$gpt" "${common[@]}" --max_steps 1 >"$LOG_DIR/prepare.log" 2>&1 ||
  die "the C++ program failed to prepare the data (see $LOG_DIR/prepare.log)"
train_tokens=("$LOG_DIR"/data/cache/train.txt-*.tokens)
[[ ${#train_tokens[@]} == 1 && -f "${train_tokens[0]}" ]] || die "expected one train token file in $LOG_DIR/data/cache"

# The settings for N processes: "OMPxBLAS" pairs, then "default".
settings_for() {
  local n="$1" per=$((cores / $1)) sizes o b
  ((per >= 1)) || per=1
  sizes="$(printf '%s\n' ${THREADS:-1 "$per" "$cores"} | sort -un | tr '\n' ' ')"
  for o in $sizes; do for b in $sizes; do printf '%sx%s ' "$o" "$b"; done; done
  echo default
}
# The environment of one setting: `env` arguments.
env_for() {
  if [[ "$1" == default ]]; then
    echo "-u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u OMP_WAIT_POLICY"
  else
    echo "OMP_NUM_THREADS=${1%x*} OPENBLAS_NUM_THREADS=${1#*x} OMP_WAIT_POLICY=PASSIVE"
  fi
}

declare -A tps probe chosen
run_one() {  # N precision setting round
  local n="$1" prec="$2" s="$3" r="$4" log="$LOG_DIR/${1}p.$2.$3.r$4.log"
  local -a bf=(); [[ "$prec" == bf16 ]] && bf=(--bf16)
  wait_quiet
  local l0; l0="$(load1)"
  # shellcheck disable=SC2046
  env $(env_for "$s") "$launcher" launch --cpu --num_processes "$n" --main_process_port 0 \
    "$gpt" "${common[@]}" --max_steps "$STEPS" --logging_steps 1 "${bf[@]}" >"$log" 2>&1 ||
    die "$n process(es) $prec $s failed: $(tail -n 1 "$log") ($log)"
  local v
  v="$(awk -v skip="$SKIP" -v tok=$((BATCH * n * context)) '
    { sub(/^\[rank[0-9]+\]: /, "") }
    /^step [0-9]+: tokens\/s / { k = $2 + 0; if (k > skip) { s += tok / $4; c++ } }
    END { if (c) printf "%.2f", c * tok / s }' "$log")"
  [[ -n "$v" ]] || die "no 'step K: tokens/s' lines after step $SKIP in $log"
  tps["$n.$prec.$s"]="${tps[$n.$prec.$s]:-} $v"
  # What the launcher chose (its start line names OMP_NUM_THREADS).
  chosen["$n.$s"]="$(sed -nE 's/^accelerate launch: starting .*(OMP_NUM_THREADS=[0-9]+).*/\1/p' "$log" | head -n 1)"
  printf '  %dp %s %-8s %10s tokens/s (load %s)\n' "$n" "$prec" "$s" "$v" "$l0" >&2
}
probe_one() {  # N setting
  local n="$1" s="$2" log="$LOG_DIR/${1}p.$2.probe.log" omp dnnl
  # shellcheck disable=SC2046
  env $(env_for "$s") ONEDNN_VERBOSE=1 DNNL_VERBOSE=1 "$launcher" launch -q --cpu --num_processes "$n" \
    --main_process_port 0 "$profile" --train "${train_tokens[0]}" --preset tiny --steps 1 --skip 0 \
    --bf16 >"$log" 2>&1 || die "the pool probe failed: $(tail -n 1 "$log") ($log)"
  omp="$(sed -nE 's/.*gpt_profile: .*, ([0-9]+) thread\(s\) per process.*/\1/p' "$log" | head -n 1)"
  dnnl="$(sed -nE 's/.*_verbose,(v1,)?info,cpu,runtime:[A-Za-z]+,nthr:([0-9]+).*/\2/p' "$log" | paste -sd, -)"
  probe["$n.$s"]="omp=${omp:-?} onednn=${dnnl:-?}"
}

echo "GPT threads: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $build"
echo "  examples/gpt preset $PRESET, batch $BATCH per process, $STEPS steps (first $SKIP untimed), $REPEATS round(s); logs in $LOG_DIR"
echo "  pairs are OMP_NUM_THREADS x OPENBLAS_NUM_THREADS per process, with OMP_WAIT_POLICY=PASSIVE; default: none of the three set"
for n in $PROCS; do
  read -ra settings <<<"$(settings_for "$n")"
  if [[ "$PROBE" == 1 ]]; then
    for s in "${settings[@]}"; do probe_one "$n" "$s"; done
  fi
  for ((round = 1; round <= REPEATS; round++)); do
    for prec in $PRECISIONS; do
      k=${#settings[@]}
      for ((i = 0; i < k; i++)); do run_one "$n" "$prec" "${settings[(i + round - 1) % k]}" "$round"; done
    done
  done
done

# ---- the tables ------------------------------------------------------------------
best() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | tail -n 1; }
for n in $PROCS; do
  read -ra settings <<<"$(settings_for "$n")"
  for prec in $PRECISIONS; do
    echo
    echo "$n process(es), $prec: tokens/s (best of $REPEATS), per process OMP x OPENBLAS threads"
    top=0 top_s=""
    for s in "${settings[@]}"; do
      b="$(best "${tps[$n.$prec.$s]}")"
      if awk -v a="$b" -v t="$top" 'BEGIN { exit !(a > t) }'; then top="$b" top_s="$s"; fi
    done
    printf '  %-9s %10s %8s  %-24s %s\n' setting "tokens/s" "vs best" "pools seen" "every round"
    for s in "${settings[@]}"; do
      b="$(best "${tps[$n.$prec.$s]}")"
      label="$s"; [[ "$s" == default ]] && label="default (${chosen[$n.$s]:-?}, OPENBLAS_NUM_THREADS=1)"
      printf '  %-9s %10.1f %7.3fx  %-24s%s\n' "$s" "$b" "$(awk -v a="$b" -v t="$top" 'BEGIN { print a / t }')" \
        "${probe[$n.$s]:-}" "${tps[$n.$prec.$s]}"
      [[ "$s" == default ]] && default_label="$label" && default_tps="$b"
    done
    awk -v d="$default_tps" -v t="$top" -v s="$top_s" -v noise="$NOISE" -v l="$default_label" 'BEGIN {
      gap = 100 * (t - d) / t
      if (s == "default") verdict = "the default is the fastest"
      else if (gap <= noise) verdict = sprintf("the default is within %.1f%% of the fastest (%s): a tie at NOISE %s%%", gap, s, noise)
      else verdict = sprintf("the default is %.1f%% slower than the fastest (%s)", gap, s)
      printf "  fastest: %s; %s; %s\n", s, l, verdict }'
  done
done
