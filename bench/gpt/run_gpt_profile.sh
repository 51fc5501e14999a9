#!/usr/bin/env bash
# Where a GPT training step's time goes (docs/gpt-performance.md, "Profile"): for the
# small preset, per precision (bf16; PRECISIONS="fp32 bf16" for both), on 1
# and 2 processes, on LibTorch 1.13 (BUILD_DIR) and on the newest LibTorch
# (NEW_BUILD_DIR, when built), runs
#   C++     accelerate launch --cpu --num_processes N bench/gpt/gpt_profile
#           (the Trainer's step with a clock per phase) --trace
#   Python  bench/gpt/gpt_twin.py --nproc N (the PyTorch twin, same phases;
#           PYTHON, torch 1.13, beside BUILD_DIR; NEW_PYTHON beside
#           NEW_BUILD_DIR) --trace
# with the same model, data, seed and threads as bench/gpt/run_gpt_bench.sh,
# and prints, C++ beside Python:
#
# 1. per phase, ms per step, the mean over steps SKIP+1..STEPS (the traced
#    step, SKIP+1, is among them: the profiler's few ms are in its share):
#      data      the next batch          forward   the loss
#      backward  the gradients, and on N > 1 their all-reduce, as much of
#                it as backward waited for
#      clip      clip_grad_norm_         optimizer AdamW, schedule, zero_grad
#      log       the loss as a number, averaged over processes
#      comm      C++ only: the gradient reducer's all-reduces in flight
#                (they overlap backward); exposed: the part backward waited
#                for, included in backward. Python DDP's gloo time shows in
#                the trace tables ("other threads").
#      step      tokens per step / tokens/s (the whole step; a bit above the
#                phases' sum, which leaves out the loop's own code)
# 2. the traced step (the main process's) by phase and by op family, from
#    bench/gpt/trace_summary.py: self time per family in ms and % of the
#    step. Read "matmul" against the rest: what is not matmul is what the
#    two programs can still lose or win; "between ops" is time in no op
#    (Python, the Trainer, waits the profiler does not record).
# 3. C++ on LibTorch 1.13 beside C++ on the newest LibTorch, per family.
#
# Every log, trace (Chrome trace JSON: chrome://tracing, ui.perfetto.dev)
# and the full trace_summary.py output (per-op view, family x phase) stays
# in LOG_DIR: <row>.<N>p.<precision>.{cpp,py}.{log,json} and .summary.txt.
#
# Threads per process, both sides: OMP_NUM_THREADS = cores / N,
# OPENBLAS_NUM_THREADS = BLAS_THREADS (default the same), OMP_WAIT_POLICY =
# PASSIVE, OPENBLAS_THREAD_TIMEOUT = 4 (the launcher's);
# bench/gpt/run_gpt_threads.sh checks which sizes are fastest.
# examples/gpt's attention is the library's blocked causal kernel (blocks
# of 64 queries skipping the masked keys, its fused causal softmax;
# docs/kernels.md) on both LibTorch versions and precisions. The twin keeps
# PyTorch's explicit masked softmax over all T x T scores, so "attention"
# (and part of "matmul") compares different kernels.
#
# Usage: bash bench/gpt/run_gpt_profile.sh [BUILD_DIR [NEW_BUILD_DIR]]
#   defaults build and build-cuda. BUILD_DIR needs bench/gpt/gpt_profile,
#   examples/gpt (writes the token files) and bin/accelerate; NEW_BUILD_DIR
#   bench/gpt/gpt_profile and bin/accelerate (skipped with a note if absent).
#
# Environment (defaults in brackets):
#   PRESET [small]  VOCAB [8192 small, 4096 tiny]  BATCH [16 per process]
#   STEPS [30]  SKIP [5] (untimed warm-up steps; the trace is of step SKIP+1)
#   WARMUP [10] (LR warm-up)  EVAL_SAMPLES [16] (the twin's evaluation)
#   PROCS ["1 2"]  PRECISIONS [bf16]  ROWS ["1.13 new"]  TOP [25] (ops in
#   the summary files)  BLAS_THREADS [OMP_NUM_THREADS of the run]
#   MAX_LOAD [0.5]  before each C++/Python pair, wait (up to MAX_WAIT [1800]
#                   s, then warn) for the 1-minute load average to fall
#                   below it
#   PYTHON [/usr/bin/python3]  NEW_PYTHON [$ACCELERATE_REFERENCE_PYTHON, from
#   /var/cache/accelerate-cpp/torch-cuda.env if that exists]
#   DATA_DIR [data/brown]  LOG_DIR [a new folder]
set -euo pipefail

die() { printf 'run_gpt_profile: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
abs() { if [[ "$1" = /* ]]; then printf '%s' "$1"; else printf '%s' "$root/$1"; fi; }
build="$(abs "${1:-build}")"
new_build="$(abs "${2:-build-cuda}")"

PRESET="${PRESET:-small}"
case "$PRESET" in
  small) VOCAB="${VOCAB:-8192}" context=256 ;;
  tiny) VOCAB="${VOCAB:-4096}" context=128 ;;
  *) die "PRESET must be small or tiny, got '$PRESET'" ;;
esac
BATCH="${BATCH:-16}" STEPS="${STEPS:-30}" SKIP="${SKIP:-5}" WARMUP="${WARMUP:-10}"
EVAL_SAMPLES="${EVAL_SAMPLES:-16}" MAX_LOAD="${MAX_LOAD:-0.5}" MAX_WAIT="${MAX_WAIT:-1800}"
PROCS="${PROCS:-1 2}" PRECISIONS="${PRECISIONS:-bf16}" ROWS="${ROWS:-1.13 new}" TOP="${TOP:-25}"
PYTHON="${PYTHON:-/usr/bin/python3}" DATA_DIR="${DATA_DIR:-data/brown}"
if [[ -z "${NEW_PYTHON:-}" && -f /var/cache/accelerate-cpp/torch-cuda.env ]]; then
  NEW_PYTHON="$(sed -n 's/^ACCELERATE_REFERENCE_PYTHON=//p' /var/cache/accelerate-cpp/torch-cuda.env)"
fi
NEW_PYTHON="${NEW_PYTHON:-}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/gpt-profile.XXXXXX)}"
for v in VOCAB BATCH STEPS WARMUP EVAL_SAMPLES MAX_WAIT TOP; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if ! [[ "$SKIP" =~ ^[0-9]+$ ]] || ((SKIP >= STEPS)); then die "SKIP must be in [0, STEPS)"; fi
[[ "$MAX_LOAD" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "MAX_LOAD must be a number, got '$MAX_LOAD'"
[[ -z "${BLAS_THREADS:-}" || "$BLAS_THREADS" =~ ^[1-9][0-9]*$ ]] || die "BLAS_THREADS must be a positive integer"
for n in $PROCS; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "PROCS must list positive integers, got '$PROCS'"; done
for p in $PRECISIONS; do [[ "$p" == fp32 || "$p" == bf16 ]] || die "PRECISIONS must list fp32/bf16, got '$p'"; done
for r in $ROWS; do [[ "$r" == 1.13 || "$r" == new ]] || die "ROWS must list 1.13/new, got '$r'"; done
for f in train.txt validation.txt; do
  [[ -f "$DATA_DIR/$f" ]] || die "$DATA_DIR/$f not found: run scripts/fetch-brown.sh"
done
for f in "$build/examples/gpt" "$build/bin/accelerate"; do
  [[ -x "$f" ]] || die "$f not found: cmake --build $build --target gpt accelerate_cli"
done
cores="$(nproc)"
mkdir -p "$LOG_DIR/data" "$LOG_DIR/out" || die "cannot create $LOG_DIR"

# ---- the rows: LibTorch 1.13 and the newest, each with its Python -------------
declare -A row_build row_python row_torch
rows=()
add_row() {  # name build python
  local name="$1" b="$2" py="$3" torch
  if [[ ! -x "$b/bench/gpt/gpt_profile" || ! -x "$b/bin/accelerate" ]]; then
    printf 'note: row %s skipped: %s/bench/gpt/gpt_profile or bin/accelerate not built (cmake --build %s --target gpt_profile accelerate_cli)\n' \
      "$name" "$b" "$b" >&2
    return
  fi
  if [[ -z "$py" ]] || ! torch="$("$py" -c 'import numpy, torch; print(torch.__version__)' 2>/dev/null)"; then
    printf 'note: row %s skipped: no Python with torch and numpy (%s)\n' "$name" "${py:-NEW_PYTHON unset}" >&2
    return
  fi
  rows+=("$name"); row_build[$name]="$b"; row_python[$name]="$py"; row_torch[$name]="$torch"
}
for r in $ROWS; do
  if [[ "$r" == 1.13 ]]; then add_row 1.13 "$build" "$PYTHON"; else add_row new "$new_build" "$NEW_PYTHON"; fi
done
((${#rows[@]})) || die "no row to run (see the notes above)"

# load1, busy, wait_quiet
source "$root/bench/gpt/quiet_machine.sh"

# ---- the data: the C++ example writes the token files (as run_gpt_bench.sh) ---
for f in train.txt validation.txt; do ln -sf "$(cd "$DATA_DIR" && pwd)/$f" "$LOG_DIR/data/$f"; done
OMP_NUM_THREADS="$cores" "$build/examples/gpt" --preset "$PRESET" --vocab_size "$VOCAB" \
  --per_device_train_batch_size "$BATCH" --per_device_eval_batch_size "$BATCH" --eval_strategy no \
  --save_strategy no --max_eval_samples 1 --output_dir "$LOG_DIR/out" --data_dir "$LOG_DIR/data" \
  --max_steps 1 >"$LOG_DIR/prepare.log" 2>&1 ||
  die "the C++ example failed to prepare the data (see $LOG_DIR/prepare.log)"
train_tokens=("$LOG_DIR"/data/cache/train.txt-*.tokens)
eval_tokens=("$LOG_DIR"/data/cache/validation.txt-*.tokens)
[[ ${#train_tokens[@]} == 1 && -f "${train_tokens[0]}" && -f "${eval_tokens[0]}" ]] ||
  die "expected one token file per split in $LOG_DIR/data/cache"

# ---- the runs -------------------------------------------------------------------
declare -A res  # "row.N.prec.side" -> the result line's fields
run_pair() {  # row N precision
  local row="$1" n="$2" prec="$3" b="${row_build[$1]}" py="${row_python[$1]}"
  local base="$LOG_DIR/$row.${n}p.$prec" t=$((cores / n))
  ((t >= 1)) || t=1
  local -a env_=(OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="${BLAS_THREADS:-$t}" OMP_WAIT_POLICY=PASSIVE
                 OPENBLAS_THREAD_TIMEOUT=4)
  local -a bf=(); [[ "$prec" == bf16 ]] && bf=(--bf16)
  wait_quiet
  local l0; l0="$(load1)"
  rm -f "$base.cpp.json" "$base.py.json"
  env "${env_[@]}" "$b/bin/accelerate" launch -q --cpu --num_processes "$n" --main_process_port 0 \
    "$b/bench/gpt/gpt_profile" --train "${train_tokens[0]}" --preset "$PRESET" --steps "$STEPS" \
    --skip "$SKIP" --batch_size "$BATCH" --warmup_steps "$WARMUP" "${bf[@]}" \
    --trace "$base.cpp.json" >"$base.cpp.log" 2>&1 ||
    die "C++ run failed: $(tail -n 1 "$base.cpp.log") ($base.cpp.log)"
  env "${env_[@]}" "$py" bench/gpt/gpt_twin.py --train "${train_tokens[0]}" \
    --validation "${eval_tokens[0]}" --preset "$PRESET" --nproc "$n" --max_steps "$STEPS" \
    --skip "$SKIP" --batch_size "$BATCH" --warmup_steps "$WARMUP" \
    --max_eval_samples "$EVAL_SAMPLES" "${bf[@]}" --trace "$base.py.json" >"$base.py.log" 2>&1 ||
    die "Python run failed: $(tail -n 1 "$base.py.log") ($base.py.log)"
  local side
  for side in cpp py; do
    res["$row.$n.$prec.$side"]="$(sed -nE 's/^(\[rank[0-9]+\]: )?(result side=.*)/\2/p' "$base.$side.log" | tail -n 1)"
    [[ -n "${res[$row.$n.$prec.$side]}" ]] || die "no result line in $base.$side.log"
    [[ -s "$base.$side.json" ]] || die "no trace written: $base.$side.json"
  done
  python3 bench/gpt/trace_summary.py "$base.cpp.json" "$base.py.json" --labels C++ Py --top "$TOP" \
    --matrix >"$base.summary.txt" 2>&1 || die "trace_summary.py failed on $base.{cpp,py}.json ($base.summary.txt)"
  printf '  %-4s %dp %s: C++ %s tokens/s, Python %s tokens/s (load %s)\n' "$row" "$n" "$prec" \
    "$(field "${res[$row.$n.$prec.cpp]}" tokens_per_s)" "$(field "${res[$row.$n.$prec.py]}" tokens_per_s)" "$l0" >&2
}
field() { sed -nE "s/.*(^| )$2=([^ ]+).*/\2/p" <<<"$1"; }

echo "GPT profile: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))"
for r in "${rows[@]}"; do
  echo "  row $r: C++ ${row_build[$r]} ($(ldd "${row_build[$r]}/bench/gpt/gpt_profile" 2>/dev/null | sed -nE 's/.*libtorch_cpu\.so[^ ]* => ([^ ]+).*/\1/p' | head -n 1)), Python ${row_python[$r]} (torch ${row_torch[$r]})"
done
echo "  preset $PRESET, vocab $VOCAB, batch $BATCH per process, $STEPS steps (first $SKIP untimed; step $((SKIP + 1)) traced)"
echo "  threads per process: OMP_NUM_THREADS = $cores / processes, OPENBLAS_NUM_THREADS=${BLAS_THREADS:-the same}, OMP_WAIT_POLICY=PASSIVE, OPENBLAS_THREAD_TIMEOUT=4"
echo "  logs and traces in $LOG_DIR"
for r in "${rows[@]}"; do
  for n in $PROCS; do
    for prec in $PRECISIONS; do run_pair "$r" "$n" "$prec"; done
  done
done

# ---- the tables ------------------------------------------------------------------
phase_fields=(data forward backward clip optimizer log comm exposed)
for r in "${rows[@]}"; do
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      base="$LOG_DIR/$r.${n}p.$prec"
      echo
      echo "=== LibTorch ${row_torch[$r]} ($r), $n process(es), $prec ==="
      printf '%-7s %9s' side "tokens/s"
      for f in "${phase_fields[@]}" step; do printf ' %9s' "$f"; done
      echo "   (ms per step)"
      for side in cpp py; do
        line="${res[$r.$n.$prec.$side]}"
        tps="$(field "$line" tokens_per_s)"
        printf '%-7s %9.1f' "$([[ $side == cpp ]] && echo C++ || echo Python)" "$tps"
        for f in "${phase_fields[@]}"; do
          v="$(field "$line" "${f}_ms")"
          if [[ -n "$v" ]]; then printf ' %9.1f' "$v"; else printf ' %9s' -; fi
        done
        awk -v t="$tps" -v tok=$((BATCH * n * context)) 'BEGIN { printf " %9.1f\n", (t > 0) ? 1000 * tok / t : 0 }'
      done
      echo
      sed -n '/^per phase/,$p' "$base.summary.txt" | sed '/^per op (self time/,$d'
    done
  done
done
if [[ " ${rows[*]} " == *" 1.13 "* && " ${rows[*]} " == *" new "* ]]; then
  for n in $PROCS; do
    for prec in $PRECISIONS; do
      echo
      echo "=== C++ on LibTorch ${row_torch[1.13]} beside C++ on LibTorch ${row_torch[new]}, $n process(es), $prec (traced step) ==="
      python3 bench/gpt/trace_summary.py "$LOG_DIR/1.13.${n}p.$prec.cpp.json" "$LOG_DIR/new.${n}p.$prec.cpp.json" \
        --labels "${row_torch[1.13]%%+*}" "${row_torch[new]%%+*}" --view phases,families |
        sed '1,2d' || die "trace_summary.py failed on the C++ traces"
    done
  done
fi
echo
echo "full summaries (per op, family x phase): $LOG_DIR/*.summary.txt"
