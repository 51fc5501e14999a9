#!/usr/bin/env bash
# The GPT benchmark (docs/gpt.md, "Performance"): tokens/s of examples/gpt
# (accelerate::Trainer) against its PyTorch Python twin (bench/gpt/gpt_twin.py),
# side by side in one run, on 1 process (the twin's plain loop) and 2
# processes (the twin under Python DDP on gloo), in fp32 and bf16, with the
# same model, initial weights, data order and hyper-parameters; then MFU and
# the validation loss both reach after the same steps.
#
#   C++     accelerate launch --cpu --num_processes N build/examples/gpt
#           --logging_steps 1 --eval_strategy no --save_strategy no ...:
#           tokens/s from its per-step "step K: tokens/s X" lines
#   Python  gpt_twin.py --nproc N: tokens/s from its per-step times
#   both    tokens/s = (STEPS - SKIP) x tokens per step / the time of steps
#           SKIP+1..STEPS (each step timed end to end: data, forward,
#           backward, clipping, optimizer, the logged loss's mean over
#           processes); evaluation after training, outside the timing, on
#           the first EVAL_SAMPLES validation windows
#
# Data: the C++ program tokenizes data/brown into its cache (a private
# $LOG_DIR/data/cache, beside symlinks to the text files), and the twin reads
# those token files. Windows are shuffled by LibTorch's randperm seeded 42 on
# both sides, so the runs see the same batches; the twin also builds its
# model in the C++ order after torch.manual_seed(42), so the first step's
# loss must agree (checked and printed).
#
# MFU = FLOPs per token x tokens/s / peak, where
#   FLOPs per token = 6 N + 12 L d T   (PaLM's estimate: N = the parameters
#     that take part in matmuls, here all but the position embedding since
#     the head reuses the token embedding; L layers, width d, context T; the
#     explicit attention computes all T x T scores, so no causal halving)
#   peak = the best n=2048 matmul FLOP/s on all cores (bench/gpt/peak_matmul.py,
#     OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = cores), fp32 or bf16 to match,
#     measured before the runs and after each round; the highest counts.
#
# Threads: both sides get the same environment per process:
# OMP_NUM_THREADS = cores / N, OPENBLAS_NUM_THREADS = BLAS_THREADS (default:
# the same as OMP_NUM_THREADS) and OMP_WAIT_POLICY = PASSIVE (the launcher's
# default); the launcher keeps exported values, the twin calls
# torch.set_num_threads(OMP_NUM_THREADS). fp32 matmuls run in OpenBLAS, so
# BLAS_THREADS=1 (the launcher's own default) leaves one core idle in them on
# 1 process: both sides then drop alike (docs/gpt.md, "Performance").
#
# Usage: bash bench/gpt/run_gpt_bench.sh [BUILD_DIR]        (default: build)
#   needs BUILD_DIR/examples/gpt and BUILD_DIR/bin/accelerate
#   (cmake --build BUILD_DIR --target gpt accelerate_cli), data/brown
#   (scripts/fetch-brown.sh) and /usr/bin/python3 with python3-torch.
#
# Environment (defaults in brackets):
#   PRESET [small]  VOCAB [8192 small, 4096 tiny]  BATCH [16 per process]
#   STEPS [30]  SKIP [5] (untimed warm-up steps)  WARMUP [10] (LR warm-up)
#   EVAL_SAMPLES [128]  PROCS ["1 2"]  PRECISIONS ["fp32 bf16"]
#   BLAS_THREADS [OMP_NUM_THREADS of the run]
#   REPEATS [1]     rounds; the table shows each side's best tokens/s over
#                   them (other jobs on the machine only ever slow a run
#                   down), and every round's figures follow it
#   MAX_LOAD [0.5]  before each C++/Python pair and each peak measurement,
#                   wait (up to MAX_WAIT [1800] s, then warn) for the 1-minute
#                   load average to fall below it; a pair's two runs follow
#                   each other, in alternating order per round; the loads
#                   seen are printed
#   PYTHON [/usr/bin/python3]  DATA_DIR [data/brown]  LOG_DIR [a new folder]
set -euo pipefail

die() { printf 'run_gpt_bench: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
gpt="$build/examples/gpt"
launcher="$build/bin/accelerate"
for f in "$gpt" "$launcher"; do
  [[ -x "$f" ]] || die "$f not found: cmake --build $build --target gpt accelerate_cli"
done

PRESET="${PRESET:-small}"
case "$PRESET" in
  small) dims=(6 384 256); VOCAB="${VOCAB:-8192}" ;;
  tiny) dims=(4 128 128); VOCAB="${VOCAB:-4096}" ;;
  *) die "PRESET must be small or tiny, got '$PRESET'" ;;
esac
BATCH="${BATCH:-16}" STEPS="${STEPS:-30}" SKIP="${SKIP:-5}" WARMUP="${WARMUP:-10}"
EVAL_SAMPLES="${EVAL_SAMPLES:-128}" REPEATS="${REPEATS:-1}" MAX_LOAD="${MAX_LOAD:-0.5}"
MAX_WAIT="${MAX_WAIT:-1800}"
PROCS="${PROCS:-1 2}" PRECISIONS="${PRECISIONS:-fp32 bf16}"
PYTHON="${PYTHON:-/usr/bin/python3}" DATA_DIR="${DATA_DIR:-data/brown}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/gpt-bench.XXXXXX)}"
for v in VOCAB BATCH STEPS WARMUP EVAL_SAMPLES REPEATS MAX_WAIT; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if ! [[ "$SKIP" =~ ^[0-9]+$ ]] || ((SKIP >= STEPS)); then die "SKIP must be in [0, STEPS)"; fi
[[ -z "${BLAS_THREADS:-}" || "$BLAS_THREADS" =~ ^[1-9][0-9]*$ ]] || die "BLAS_THREADS must be a positive integer"
for f in train.txt validation.txt; do
  [[ -f "$DATA_DIR/$f" ]] || die "$DATA_DIR/$f not found: run scripts/fetch-brown.sh"
done
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || die "$PYTHON cannot import torch and numpy (Debian's python3-torch)"
cores="$(nproc)"
layers=${dims[0]} width=${dims[1]} context=${dims[2]}

load1() { cut -d' ' -f1 /proc/loadavg; }
busy() { awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }'; }
wait_quiet() {
  local waited=0
  while busy && ((waited < MAX_WAIT)); do sleep 10; waited=$((waited + 10)); done
  if busy; then
    printf '  warning: load %s still above %s after %ds; measuring anyway\n' "$(load1)" "$MAX_LOAD" "$waited"
  fi
}

# ---- the data: the C++ program writes the token files ----------------------
mkdir -p "$LOG_DIR/data" "$LOG_DIR/out"
for f in train.txt validation.txt; do ln -sf "$(cd "$DATA_DIR" && pwd)/$f" "$LOG_DIR/data/$f"; done
common=(--preset "$PRESET" --vocab_size "$VOCAB" --per_device_train_batch_size "$BATCH"
        --per_device_eval_batch_size "$BATCH" --warmup_steps "$WARMUP" --eval_strategy no
        --save_strategy no --max_eval_samples "$EVAL_SAMPLES" --output_dir "$LOG_DIR/out"
        --data_dir "$LOG_DIR/data")
OMP_NUM_THREADS="$cores" "$gpt" "${common[@]}" --max_steps 1 >"$LOG_DIR/prepare.log" 2>&1 ||
  die "the C++ program failed to prepare the data (see $LOG_DIR/prepare.log)"
train_tokens=("$LOG_DIR"/data/cache/train.txt-*.tokens)
eval_tokens=("$LOG_DIR"/data/cache/validation.txt-*.tokens)
[[ ${#train_tokens[@]} == 1 && -f "${train_tokens[0]}" && -f "${eval_tokens[0]}" ]] ||
  die "expected one token file per split in $LOG_DIR/data/cache"
params="$(sed -nE 's/^GPT preset [a-z]+: ([0-9]+) parameters.*/\1/p' "$LOG_DIR/prepare.log")"
[[ -n "$params" ]] || die "no parameter count in $LOG_DIR/prepare.log"
flops_per_token=$((6 * (params - context * width) + 12 * layers * width * context))

# ---- the peak: the highest of several measurements -----------------------------
peak_fp32=0 peak_bf16=0
measure_peak() {
  local line f b
  wait_quiet
  line="$(OMP_NUM_THREADS="$cores" OPENBLAS_NUM_THREADS="$cores" "$PYTHON" bench/gpt/peak_matmul.py)" ||
    die "peak_matmul.py failed"
  f="$(sed -nE 's/.*fp32_gflops=([0-9.]+).*/\1/p' <<<"$line")"
  b="$(sed -nE 's/.*bf16_gflops=([0-9.]+).*/\1/p' <<<"$line")"
  peaks+=("$f/$b")
  peak_fp32="$(awk -v a="$peak_fp32" -v b="$f" 'BEGIN { print (b > a) ? b : a }')"
  peak_bf16="$(awk -v a="$peak_bf16" -v c="$b" 'BEGIN { print (c > a) ? c : a }')"
}
peaks=()

# ---- the runs ------------------------------------------------------------------
declare -A vals   # "side.N.precision.field" -> values, one per round
add() { vals["$1"]="${vals[$1]:-} $2"; }
loads=()
run_one() {  # side N precision
  local side="$1" n="$2" prec="$3" log="$LOG_DIR/$1.$2p.$3.r$round.log" t=$((cores / $2))
  ((t >= 1)) || t=1
  local -a env_=(OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="${BLAS_THREADS:-$t}" OMP_WAIT_POLICY=PASSIVE)
  local -a bf=(); [[ "$prec" == bf16 ]] && bf=(--bf16)
  local l0; l0="$(load1)"
  if [[ "$side" == cpp ]]; then
    env "${env_[@]}" "$launcher" launch -q --cpu --num_processes "$n" --main_process_port 0 \
      "$gpt" "${common[@]}" --max_steps "$STEPS" --logging_steps 1 "${bf[@]}" >"$log" 2>&1 ||
      { tail -n 5 "$log" >&2; die "C++ run failed ($log)"; }
    local tps
    tps="$(awk -v skip="$SKIP" -v tok=$((BATCH * n * context)) '
      { sub(/^\[rank[0-9]+\]: /, "") }
      /^step [0-9]+: tokens\/s / { k = $2 + 0; if (k > skip) { s += tok / $4; c++ } }
      END { if (c) printf "%.2f", c * tok / s }' "$log")"
    add "$side.$n.$prec.tps" "$tps"
    add "$side.$n.$prec.eval" "$(sed -nE "s/.*'eval_loss': ([0-9.e+-]+).*/\1/p" "$log" | tail -n 1)"
    add "$side.$n.$prec.first" "$(sed -nE "s/.*'loss': ([0-9.e+-]+).*/\1/p" "$log" | head -n 1)"
  else
    env "${env_[@]}" "$PYTHON" bench/gpt/gpt_twin.py --train "${train_tokens[0]}" \
      --validation "${eval_tokens[0]}" --preset "$PRESET" --nproc "$n" --max_steps "$STEPS" \
      --skip "$SKIP" --batch_size "$BATCH" --warmup_steps "$WARMUP" \
      --max_eval_samples "$EVAL_SAMPLES" "${bf[@]}" >"$log" 2>&1 ||
      { tail -n 5 "$log" >&2; die "Python run failed ($log)"; }
    add "$side.$n.$prec.tps" "$(sed -nE 's/^result .*tokens_per_s=([0-9.]+).*/\1/p' "$log")"
    add "$side.$n.$prec.eval" "$(sed -nE 's/^result .*eval_loss=([0-9.]+).*/\1/p' "$log")"
    add "$side.$n.$prec.first" "$(sed -nE 's/^step 1: loss ([0-9.]+),.*/\1/p' "$log")"
  fi
  loads+=("$l0")
  printf '  %-6s %dp %s: %s tokens/s, eval_loss %s (load %s)\n' "$side" "$n" "$prec" \
    "$(tr ' ' '\n' <<<"${vals[$side.$n.$prec.tps]}" | tail -n 1)" \
    "$(tr ' ' '\n' <<<"${vals[$side.$n.$prec.eval]}" | tail -n 1)" "$l0" >&2
}

echo "GPT benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), torch $("$PYTHON" -c 'import torch; print(torch.__version__)') in both"
echo "  preset $PRESET: $params parameters, vocab $VOCAB, $layers layers, width $width, context $context;"
echo "  batch $BATCH per process, $STEPS steps (first $SKIP untimed), LR warm-up $WARMUP then cosine, eval on $EVAL_SAMPLES windows"
echo "  threads per process: 1 process $cores, 2 processes $((cores / 2)) (OMP_NUM_THREADS; OPENBLAS_NUM_THREADS=${BLAS_THREADS:-the same}; OMP_WAIT_POLICY=PASSIVE)"
echo "  $REPEATS round(s); logs in $LOG_DIR"
measure_peak
for ((round = 1; round <= REPEATS; round++)); do
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      wait_quiet  # before each C++/Python pair, which then runs back to back
      if ((round % 2)); then run_one cpp "$n" "$prec"; run_one python "$n" "$prec"
      else run_one python "$n" "$prec"; run_one cpp "$n" "$prec"; fi
    done
  done
  measure_peak
done

# ---- the table -----------------------------------------------------------------
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {if (!NR) print "na"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.10g\n", (v[NR/2]+v[NR/2+1])/2}'; }
med() { printf '%s' "${vals[$1]:-}" | median; }
best() { printf '%s' "${vals[$1]:-}" | tr ' ' '\n' | grep -v '^$' | sort -g | tail -n 1; }
echo
echo "FLOPs/token = 6N + 12LdT = $flops_per_token; peak matmul ($cores threads, best of ${peaks[*]}): fp32 $peak_fp32, bf16 $peak_bf16 GFLOP/s"
echo "tokens/s: best of $REPEATS round(s); eval: validation loss after $STEPS steps"
printf '%-5s %-5s %10s %10s %6s %7s %7s %9s %9s %7s %s\n' procs prec "C++ tok/s" "Py tok/s" "C++/Py" \
  "C++ MFU" "Py MFU" "C++ eval" "Py eval" "diff" "first-step loss C++ / Py"
for n in $PROCS; do
  for prec in $PRECISIONS; do
    peak="$peak_fp32"; [[ "$prec" == bf16 ]] && peak="$peak_bf16"
    awk -v n="$n" -v p="$prec" -v c="$(best "cpp.$n.$prec.tps")" -v y="$(best "python.$n.$prec.tps")" \
        -v ce="$(med "cpp.$n.$prec.eval")" -v ye="$(med "python.$n.$prec.eval")" -v f="$flops_per_token" \
        -v peak="$peak" -v cf="$(med "cpp.$n.$prec.first")" -v yf="$(med "python.$n.$prec.first")" 'BEGIN {
      printf "%-5s %-5s %10.1f %10.1f %6.3f %6.1f%% %6.1f%% %9.4f %9.4f %+6.2f%% %.6f / %.6f\n", n, p, c, y,
        c / y, 100 * f * c / (peak * 1e9), 100 * f * y / (peak * 1e9), ce, ye, 100 * (ce - ye) / ye, cf, yf }'
  done
done
echo
echo "goals"
for n in $PROCS; do
  for prec in $PRECISIONS; do
    label="2 processes vs Python DDP"; [[ "$n" == 1 ]] && label="1 process vs the Python loop"
    awk -v l="$label" -v p="$prec" -v c="$(best "cpp.$n.$prec.tps")" -v y="$(best "python.$n.$prec.tps")" 'BEGIN {
      r = c / y; verdict = (r >= 1.0) ? "met" : "missed"
      printf "  %s, %s: C++/Python tokens/s = %.3f (goal >= 1.0: %s)\n", l, p, r, verdict }'
  done
done
for n in $PROCS; do
  for prec in $PRECISIONS; do
    awk -v n="$n" -v p="$prec" -v ce="$(med "cpp.$n.$prec.eval")" -v ye="$(med "python.$n.$prec.eval")" 'BEGIN {
      d = 100 * (ce - ye) / ye; if (d < 0) d = -d
      verdict = (d <= 2) ? "met" : "missed"
      printf "  %dp %s: eval loss within %.2f%% of the twin (goal <= 2%%: %s)\n", n, p, d, verdict }'
  done
done
echo
echo "tokens/s per round (1-minute load at each run's start: ${loads[*]})"
for k in $(printf '%s\n' "${!vals[@]}" | grep '\.tps$' | sort); do printf '  %-18s %s\n' "$k" "${vals[$k]}"; done
