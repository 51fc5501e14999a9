#!/usr/bin/env bash
# The GPT benchmark (docs/gpt-performance.md): tokens/s of examples/gpt
# (accelerate::Trainer) against its PyTorch Python twin (bench/gpt/gpt_twin.py),
# side by side in one run, on 1 process (the twin's plain loop) and 2
# processes (the twin under Python DDP on gloo), in fp32 and bf16, with the
# same model, initial weights, data order and hyper-parameters; then MFU and
# the validation loss both reach after the same steps. Optionally (HF_PYTHON
# below) two more sides per row: examples/gpt built on the newest LibTorch
# (CPP_NEW_BUILD) against what a Python user would pick on the newest PyTorch,
# transformers' GPT2LMHeadModel (SDPA attention) under Hugging Face
# Accelerate (bench/gpt/hf_gpt2_run.py), in a second table.
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
# loss must agree (checked and printed). The HF side reads the same token
# files in the same order, with the same dims, dropout (0), AdamW groups,
# clipping, schedule and bf16 autocast, but transformers initializes GPT-2
# itself (same distributions, other draws): its first-step loss is not
# comparable, and its validation loss is compared with the C++ one within a
# tolerance (2%, as a check, not bit for bit).
#
# MFU = FLOPs per token x tokens/s / peak, where
#   FLOPs per token = 6 N + 12 L d T   (PaLM's estimate: N = the parameters
#     that take part in matmuls, here all but the position embedding since
#     the head reuses the token embedding; L layers, width d, context T;
#     all T x T scores, no causal halving, as PaLM counts them: model
#     FLOPs, the same count for every side whatever its kernel computes
#     (the twin's explicit attention computes all scores; the C++ blocked
#     causal attention about 5/8 of them at T = 256; the HF side's fused
#     causal kernel skips the masked ones too)
#   peak = the best n=2048 matmul FLOP/s on all cores (bench/gpt/peak_matmul.py,
#     OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = cores), fp32 or bf16 to match,
#     measured before the runs and after each round; the highest counts.
#     The HF table's MFU uses the same with HF_PYTHON's torch (its LibTorch
#     is the one CPP_NEW_BUILD links).
#
# Threads: both sides get the same environment per process:
# OMP_NUM_THREADS = cores / N, OPENBLAS_NUM_THREADS = BLAS_THREADS (default:
# the same as OMP_NUM_THREADS), OMP_WAIT_POLICY = PASSIVE and
# OPENBLAS_THREAD_TIMEOUT = 4 (the launcher's defaults: idle OpenMP threads
# and OpenBLAS workers sleep); the launcher keeps exported values, the twin calls
# torch.set_num_threads(OMP_NUM_THREADS). OpenBLAS kernels: every run and
# the peak get the same OPENBLAS_CORETYPE, the one exported, else the one
# `accelerate launch` sets on this machine (`accelerate env`; empty where
# OpenBLAS knows the CPU: docs/launching.md, "OpenBLAS kernels"), so the twin
# does not run generic kernels where the launcher gave the C++ side the CPU's
# own. fp32 matmuls run in OpenBLAS, so
# BLAS_THREADS=1 (the launcher's own default) leaves one core idle in them on
# 1 process: both sides then drop alike (docs/gpt-performance.md). The
# HF side's ranks: hf_gpt2_run.py under torch.distributed.run, which keeps
# the exported OMP_NUM_THREADS.
#
# Goals (issue 36), printed after the tables from the medians: C++/Python
# tokens/s >= 1.2 in every row; C++ MFU >= 45% in bf16 and >= 60% in fp32;
# C++ eval loss within 2% of the twin's; with the HF side, C++ (newest
# LibTorch)/HF tokens/s >= 1.0 on every row.
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
#   REPEATS [1]     rounds; the tables show the median over them of each
#                   side's tokens/s and eval loss, and every round's
#                   tokens/s follow them
#   MAX_LOAD [0.5]  before each pair of runs (C++/Python, C++ newest/HF) and
#                   each peak measurement, wait (up to MAX_WAIT [1800] s,
#                   then warn) for the 1-minute load average to fall below
#                   it; a pair's two runs follow each other, in alternating
#                   order per round; the loads seen are printed
#   PYTHON [/usr/bin/python3]  DATA_DIR [data/brown]  LOG_DIR [a new folder]
#   HF_PYTHON [$ACCELERATE_REFERENCE_PYTHON]  the python of the HF side
#                   (scripts/install-reference-python.sh's venv: torch,
#                   transformers, accelerate from PyPI); empty: no HF side
#   CPP_NEW_BUILD [build-cuda]  examples/gpt and bin/accelerate built on the
#                   newest LibTorch (HF_PYTHON's; docs/building.md), which the
#                   HF side is compared with; it runs on CPU
#   The HF side runs when both are usable. Left to their defaults, a python
#   that cannot import transformers and accelerate, or a missing build,
#   drops the HF side with a note; set by the caller, either is an error.
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
hf_set="${HF_PYTHON+HF_PYTHON}${CPP_NEW_BUILD:+CPP_NEW_BUILD}"  # set by the caller: required
HF_PYTHON="${HF_PYTHON-${ACCELERATE_REFERENCE_PYTHON:-}}"
for v in VOCAB BATCH STEPS WARMUP EVAL_SAMPLES REPEATS MAX_WAIT; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if ! [[ "$SKIP" =~ ^[0-9]+$ ]] || ((SKIP >= STEPS)); then die "SKIP must be in [0, STEPS)"; fi
[[ -z "${BLAS_THREADS:-}" || "$BLAS_THREADS" =~ ^[1-9][0-9]*$ ]] || die "BLAS_THREADS must be a positive integer"
for f in train.txt validation.txt; do
  [[ -f "$DATA_DIR/$f" ]] || die "$DATA_DIR/$f not found: run scripts/fetch-brown.sh"
done
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || die "$PYTHON cannot import torch and numpy (Debian's python3-torch)"
hf=0 hf_note="HF_PYTHON is empty (and ACCELERATE_REFERENCE_PYTHON unset)"
new_build="${CPP_NEW_BUILD:-build-cuda}"
[[ "$new_build" = /* ]] || new_build="$root/$new_build"
if [[ -n "$HF_PYTHON" ]]; then
  if ! "$HF_PYTHON" -c 'import torch, numpy, transformers, accelerate' 2>/dev/null; then
    hf_note="HF_PYTHON=$HF_PYTHON cannot import torch, numpy, transformers and accelerate (scripts/install-reference-python.sh)"
  elif ! [[ -x "$new_build/examples/gpt" && -x "$new_build/bin/accelerate" ]]; then
    hf_note="CPP_NEW_BUILD: $new_build/examples/gpt or bin/accelerate not found (the build on the newest LibTorch: docs/building.md)"
  else hf=1; fi
  ((hf)) || [[ -z "$hf_set" ]] || die "$hf_note"
fi
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/gpt-bench.XXXXXX)}"
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  core="$("$launcher" env | sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\).*/\1/p')"
  [[ -z "$core" ]] || export OPENBLAS_CORETYPE="$core"
fi
cores="$(nproc)"
layers=${dims[0]} width=${dims[1]} context=${dims[2]}

# load1, busy, wait_quiet
source "$root/bench/gpt/quiet_machine.sh"

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
peak_fp32=0 peak_bf16=0 new_fp32=0 new_bf16=0
higher() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a) ? b : a }'; }
measure_peak() {
  local py line f b pys=("$PYTHON")
  ((!hf)) || pys+=("$HF_PYTHON")
  for py in "${pys[@]}"; do
    wait_quiet
    line="$(OMP_NUM_THREADS="$cores" OPENBLAS_NUM_THREADS="$cores" "$py" bench/gpt/peak_matmul.py)" ||
      die "peak_matmul.py failed with $py"
    f="$(sed -nE 's/.*fp32_gflops=([0-9.]+).*/\1/p' <<<"$line")"
    b="$(sed -nE 's/.*bf16_gflops=([0-9.]+).*/\1/p' <<<"$line")"
    if [[ "$py" == "$PYTHON" ]]; then
      peaks+=("$f/$b") peak_fp32="$(higher "$peak_fp32" "$f")" peak_bf16="$(higher "$peak_bf16" "$b")"
    else
      new_peaks+=("$f/$b") new_fp32="$(higher "$new_fp32" "$f")" new_bf16="$(higher "$new_bf16" "$b")"
    fi
  done
}
peaks=() new_peaks=()

# ---- the runs ------------------------------------------------------------------
declare -A vals   # "side.N.precision.field" -> values, one per round
add() { vals["$1"]="${vals[$1]:-} $2"; }
last() { tr ' ' '\n' <<<"${vals[$1]}" | tail -n 1; }
loads=()
run_one() {  # side N precision; sides: cpp python (LibTorch 1.13), cppnew hf (the newest)
  local side="$1" n="$2" prec="$3" log="$LOG_DIR/$1.$2p.$3.r$round.log" t=$((cores / $2))
  ((t >= 1)) || t=1
  local -a env_=(OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="${BLAS_THREADS:-$t}" OMP_WAIT_POLICY=PASSIVE
                 OPENBLAS_THREAD_TIMEOUT=4)
  local -a bf=(); [[ "$prec" == bf16 ]] && bf=(--bf16)
  local -a py=(--train "${train_tokens[0]}" --validation "${eval_tokens[0]}" --preset "$PRESET"
               --max_steps "$STEPS" --skip "$SKIP" --batch_size "$BATCH" --warmup_steps "$WARMUP"
               --max_eval_samples "$EVAL_SAMPLES" "${bf[@]}")
  local l0 b="$build"; l0="$(load1)"
  case "$side" in
  cpp | cppnew)
    [[ "$side" == cppnew ]] && b="$new_build"
    env "${env_[@]}" "$b/bin/accelerate" launch -q --cpu --num_processes "$n" --main_process_port 0 \
      "$b/examples/gpt" "${common[@]}" --max_steps "$STEPS" --logging_steps 1 "${bf[@]}" >"$log" 2>&1 ||
      { tail -n 5 "$log" >&2; die "C++ run ($b) failed ($log)"; }
    local tps
    tps="$(awk -v skip="$SKIP" -v tok=$((BATCH * n * context)) '
      { sub(/^\[rank[0-9]+\]: /, "") }
      /^step [0-9]+: tokens\/s / { k = $2 + 0; if (k > skip) { s += tok / $4; c++ } }
      END { if (c) printf "%.2f", c * tok / s }' "$log")"
    add "$side.$n.$prec.tps" "$tps"
    add "$side.$n.$prec.eval" "$(sed -nE "s/.*'eval_loss': '?([0-9.e+-]+).*/\1/p" "$log" | tail -n 1)"
    add "$side.$n.$prec.first" "$(sed -nE "s/.*'loss': '?([0-9.e+-]+).*/\1/p" "$log" | head -n 1)" ;;
  python | hf)
    if [[ "$side" == python ]]; then
      env "${env_[@]}" "$PYTHON" bench/gpt/gpt_twin.py "${py[@]}" --nproc "$n" >"$log" 2>&1 ||
        { tail -n 5 "$log" >&2; die "Python run failed ($log)"; }
    else
      env "${env_[@]}" "$HF_PYTHON" bench/gpt/hf_gpt2_run.py "${py[@]}" --num_processes "$n" >"$log" 2>&1 ||
        { tail -n 5 "$log" >&2; die "HF run failed ($log)"; }
    fi
    add "$side.$n.$prec.tps" "$(sed -nE 's/^result .*tokens_per_s=([0-9.]+).*/\1/p' "$log")"
    add "$side.$n.$prec.eval" "$(sed -nE 's/^result .*eval_loss=([0-9.]+).*/\1/p' "$log")"
    add "$side.$n.$prec.first" "$(sed -nE 's/^step 1: loss ([0-9.]+),.*/\1/p' "$log")" ;;
  esac
  [[ -n "$(last "$side.$n.$prec.tps")" && -n "$(last "$side.$n.$prec.eval")" ]] ||
    die "no tokens/s or eval loss in $log"
  loads+=("$l0")
  printf '  %-6s %dp %s: %s tokens/s, eval_loss %s (load %s)\n' "$side" "$n" "$prec" \
    "$(last "$side.$n.$prec.tps")" "$(last "$side.$n.$prec.eval")" "$l0" >&2
}
pair() {  # first-side second-side N precision, in alternating order per round
  wait_quiet  # then the two run back to back
  if ((round % 2)); then run_one "$1" "$3" "$4"; run_one "$2" "$3" "$4"
  else run_one "$2" "$3" "$4"; run_one "$1" "$3" "$4"; fi
}

echo "GPT benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), torch $("$PYTHON" -c 'import torch; print(torch.__version__)') in both"
echo "  preset $PRESET: $params parameters, vocab $VOCAB, $layers layers, width $width, context $context;"
echo "  batch $BATCH per process, $STEPS steps (first $SKIP untimed), LR warm-up $WARMUP then cosine, eval on $EVAL_SAMPLES windows"
echo "  OpenBLAS kernels: ${OPENBLAS_CORETYPE:-as OpenBLAS picks them} (OPENBLAS_CORETYPE, both sides)"
echo "  threads per process: 1 process $cores, 2 processes $((cores / 2)) (OMP_NUM_THREADS; OPENBLAS_NUM_THREADS=${BLAS_THREADS:-the same}; OMP_WAIT_POLICY=PASSIVE; OPENBLAS_THREAD_TIMEOUT=4)"
if ((hf)); then
  echo "  HF side: $("$HF_PYTHON" -c 'import torch, transformers, accelerate as a; print("torch %s, transformers %s, accelerate %s" % (torch.__version__, transformers.__version__, a.__version__))') ($HF_PYTHON) against C++ from $new_build"
else echo "  no HF side: $hf_note"; fi
echo "  $REPEATS round(s); logs in $LOG_DIR"
measure_peak
for ((round = 1; round <= REPEATS; round++)); do
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      if ((round % 2)); then pair cpp python "$n" "$prec"; ((!hf)) || pair cppnew hf "$n" "$prec"
      else ((!hf)) || pair cppnew hf "$n" "$prec"; pair cpp python "$n" "$prec"; fi
    done
  done
  measure_peak
done

# ---- the tables ----------------------------------------------------------------
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {if (!NR) print "na"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.10g\n", (v[NR/2]+v[NR/2+1])/2}'; }
med() { printf '%s' "${vals[$1]:-}" | median; }
table() {  # A B peak-fp32 peak-bf16 first-step?: medians of side A against side B, one row per run
  local n prec peak
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      peak="$3"; [[ "$prec" == bf16 ]] && peak="$4"
      awk -v n="$n" -v p="$prec" -v c="$(med "$1.$n.$prec.tps")" -v y="$(med "$2.$n.$prec.tps")" \
          -v ce="$(med "$1.$n.$prec.eval")" -v ye="$(med "$2.$n.$prec.eval")" -v f="$flops_per_token" \
          -v peak="$peak" -v cf="$(med "$1.$n.$prec.first")" -v yf="$(med "$2.$n.$prec.first")" -v first="$5" 'BEGIN {
        printf "%-5s %-5s %10.1f %10.1f %6.3f %6.1f%% %6.1f%% %9.4f %9.4f %+6.2f%%", n, p, c, y, c / y,
          100 * f * c / (peak * 1e9), 100 * f * y / (peak * 1e9), ce, ye, 100 * (ce - ye) / ye
        if (first) printf " %.6f / %.6f", cf, yf
        printf "\n" }'
    done
  done
}
goals() {  # A B "A's name" "B's name" peak-fp32 peak-bf16 speed-goal eval-goal-or-check
  local n prec peak
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      peak="$5"; [[ "$prec" == bf16 ]] && peak="$6"
      awk -v n="$n" -v p="$prec" -v a="$3" -v b="$4" -v c="$(med "$1.$n.$prec.tps")" \
          -v y="$(med "$2.$n.$prec.tps")" -v ce="$(med "$1.$n.$prec.eval")" -v ye="$(med "$2.$n.$prec.eval")" \
          -v f="$flops_per_token" -v peak="$peak" -v goal="$7" -v ev="$8" 'BEGIN {
        r = c / y; mfu = 100 * f * c / (peak * 1e9); mg = (p == "bf16") ? 45 : 60
        d = 100 * (ce - ye) / ye; if (d < 0) d = -d
        printf "  %dp %s: %s/%s tokens/s = %.3f (goal >= %.1f: %s)\n", n, p, a, b, r, goal,
          (r >= goal) ? "met" : "missed"
        printf "  %dp %s: %s MFU %.1f%% (goal >= %d%%: %s)\n", n, p, a, mfu, mg, (mfu >= mg) ? "met" : "missed"
        printf "  %dp %s: %s eval loss within %.2f%% of %s'\''s (%s <= 2%%: %s)\n", n, p, a, d, b, ev,
          (d <= 2) ? "met" : "missed" }'
    done
  done
}
hdr() { printf '%-5s %-5s %10s %10s %6s %7s %7s %9s %9s %7s %s\n' procs prec "$1 tok/s" "$2 tok/s" "$1/$2" \
  "$1 MFU" "$2 MFU" "$1 eval" "$2 eval" diff "$3"; }
echo
echo "FLOPs/token = 6N + 12LdT = $flops_per_token; peak matmul ($cores threads, best of ${peaks[*]}): fp32 $peak_fp32, bf16 $peak_bf16 GFLOP/s"
echo "tokens/s and eval (validation loss after $STEPS steps): medians of $REPEATS round(s)"
hdr C++ Py "first-step loss C++ / Py"
table cpp python "$peak_fp32" "$peak_bf16" 1
if ((hf)); then
  echo
  echo "C++ on the newest LibTorch ($new_build) vs transformers' GPT2LMHeadModel (SDPA) under Accelerate;"
  echo "peak matmul with HF_PYTHON's torch (best of ${new_peaks[*]}): fp32 $new_fp32, bf16 $new_bf16 GFLOP/s."
  echo "Not comparable: the initial weights (transformers draws its own), so no first-step loss and"
  echo "eval losses within a tolerance, not equal; comparable: dims, data, order, optimizer, schedule, threads"
  hdr C++ HF ""
  table cppnew hf "$new_fp32" "$new_bf16" 0
fi
echo
echo "goals (issue 36), from the medians"
goals cpp python "C++" "the twin" "$peak_fp32" "$peak_bf16" 1.2 goal
((!hf)) || goals cppnew hf "C++ (newest)" "HF" "$new_fp32" "$new_bf16" 1.0 check
echo
echo "tokens/s per round (1-minute load at each run's start: ${loads[*]})"
for k in $(printf '%s\n' "${!vals[@]}" | grep '\.tps$' | sort); do printf '  %-18s %s\n' "$k" "${vals[$k]}"; done
