#!/usr/bin/env bash
# examples/nlp against its Python twin (bench/nlp/complete_nlp_example.py:
# Hugging Face's complete_nlp_example.py logic with transformers and
# accelerate) on the same model, data, slice, seed and hyper-parameters, on
# 1 and 2 CPU processes: prints each side's final accuracy and F1, the
# difference in points, and training samples/s with the ratio ours / twin's
# (> 1: we are faster). docs/nlp.md has the figures.
#
#   bench/nlp/run_nlp_bench.sh [BUILD_DIR]            (default: build)
#
# Environment (defaults in brackets):
#   PYTHON             the reference venv's python with accelerate importable
#                      [$ACCELERATE_REFERENCE_PYTHON; scripts/install-reference-python.sh]
#   TRAIN_SAMPLES      first N training sentences, 0 = all 4000 [0]
#   EVAL_SAMPLES       first N validation sentences, 0 = all 1000 [0]
#   EPOCHS             [3]   BATCH_SIZE [16]   LR [2e-5]   WARMUP [100]   MAX_LENGTH [128]
#   PROCESSES          the process counts to run ["1 2"]
#   ROUNDS             runs of each side per process count, in alternating
#                      order (ours first in odd rounds); samples/s is the
#                      median over rounds, the metrics are the first round's
#                      (every round gives the same ones) [1]
#   SEEDS              the --seed of each side's runs ["42"]; with several,
#                      every seed runs ROUNDS rounds, each seed's metrics
#                      are printed, and the table gives the mean over seeds
#                      (one seed is one draw of the head, dropout and order:
#                      a 1-point goal needs several to be read)
# One thread per process on both sides (the launcher's default for 2
# processes on 2 cores; torchrun's too), so the 1-process runs compare the
# same compute. Each run's log is kept in LOG_DIR [/tmp/nlp-bench].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
python=${PYTHON:-${ACCELERATE_REFERENCE_PYTHON:-}}
die() { echo "run_nlp_bench: error: $*" >&2; exit 1; }
[[ -n $python && -x $python ]] ||
  die "set PYTHON (or ACCELERATE_REFERENCE_PYTHON) to the reference venv's python (scripts/install-reference-python.sh)"
"$python" -c "import accelerate, transformers" 2>/dev/null ||
  die "$python cannot import accelerate and transformers (scripts/reference-requirements.txt)"
[[ -x $build/examples/nlp && -x $build/bin/accelerate ]] || die "build the nlp and accelerate_cli targets in $build"
[[ -f $root/data/brown-genre/train.tsv && -f $root/data/all-MiniLM-L6-v2/model.safetensors ]] ||
  die "data missing: run scripts/fetch-minilm.sh and scripts/fetch-brown-genre.sh"
logs=${LOG_DIR:-/tmp/nlp-bench}
mkdir -p "$logs"

flags=(--model "$root/data/all-MiniLM-L6-v2" --train_file "$root/data/brown-genre/train.tsv"
       --validation_file "$root/data/brown-genre/validation.tsv"
       --max_train_samples "${TRAIN_SAMPLES:-0}" --max_eval_samples "${EVAL_SAMPLES:-0}"
       --num_epochs "${EPOCHS:-3}" --batch_size "${BATCH_SIZE:-16}" --learning_rate "${LR:-2e-5}"
       --num_warmup_steps "${WARMUP:-100}" --max_length "${MAX_LENGTH:-128}" --cpu)

# last_metrics LOG: "ACCURACY F1" of the last epoch line.
last_metrics() {
  grep -E "epoch [0-9]+: \{'accuracy'" "$1" | tail -n 1 |
    sed -E "s/.*'accuracy': ([0-9.e-]+), 'f1': ([0-9.e-]+)\}.*/\1 \2/"
}
# samples_per_second LOG: all epochs' training examples over their seconds.
samples_per_second() {
  grep -oE "train [0-9]+ examples in [0-9.e+-]+ s" "$1" |
    awk '{ n += $2; s += $5 } END { if (s > 0) printf "%.2f", n / s }'
}

printf '%-9s %-24s %-24s %-14s %-10s %-10s %s\n' processes "ours acc / f1" "twin acc / f1" \
  "diff (points)" "ours s/s" "twin s/s" "ratio"
run_ours() {  # run_ours PROCESSES LOG SEED
  "$build/bin/accelerate" launch --cpu --num_processes "$1" --num_cpu_threads_per_process 1 \
    --main_process_port 0 "$build/examples/nlp" "${flags[@]}" --seed "$3" \
    --output_dir "$logs/out" >"$2" 2>&1 ||
    die "ours failed on $1 processes: $(tail -n 1 "$2")"
}
run_twin() {  # run_twin PROCESSES LOG SEED
  (cd "$root" && OMP_NUM_THREADS=1 "$python" -m torch.distributed.run --nproc_per_node "$1" \
    --master_port $((29500 + RANDOM % 1000)) bench/nlp/complete_nlp_example.py "${flags[@]}" --seed "$3") \
    >"$2" 2>&1 || die "the twin failed on $1 processes: $(tail -n 1 "$2")"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

seeds=(${SEEDS:-42})
for p in ${PROCESSES:-1 2}; do
  our_rates=() twin_rates=() our_metrics=() twin_metrics=()
  for seed in "${seeds[@]}"; do
    for ((round = 1; round <= ${ROUNDS:-1}; ++round)); do
      ours=$logs/ours_${p}p_s${seed}_$round.log twin=$logs/twin_${p}p_s${seed}_$round.log
      if ((round % 2)); then run_ours "$p" "$ours" "$seed"; run_twin "$p" "$twin" "$seed"
      else run_twin "$p" "$twin" "$seed"; run_ours "$p" "$ours" "$seed"; fi
      our_rates+=("$(samples_per_second "$ours")") twin_rates+=("$(samples_per_second "$twin")")
    done
    our_metrics+=("$(last_metrics "$logs/ours_${p}p_s${seed}_1.log")")
    twin_metrics+=("$(last_metrics "$logs/twin_${p}p_s${seed}_1.log")")
    echo "$p processes, seed $seed: ours acc/f1 ${our_metrics[-1]}; twin ${twin_metrics[-1]}" >&2
  done
  # The mean over seeds of each side's accuracy and F1.
  read -r our_acc our_f1 <<<"$(printf '%s\n' "${our_metrics[@]}" | awk '{ a += $1; f += $2 } END { print a / NR, f / NR }')"
  read -r twin_acc twin_f1 <<<"$(printf '%s\n' "${twin_metrics[@]}" | awk '{ a += $1; f += $2 } END { print a / NR, f / NR }')"
  our_rate=$(printf '%s\n' "${our_rates[@]}" | median)
  twin_rate=$(printf '%s\n' "${twin_rates[@]}" | median)
  echo "$p processes: ours samples/s ${our_rates[*]}; twin ${twin_rates[*]}" >&2
  awk -v p="$p" -v a="$our_acc" -v f="$our_f1" -v b="$twin_acc" -v g="$twin_f1" \
    -v r="$our_rate" -v t="$twin_rate" 'BEGIN {
      printf "%-9s %-24s %-24s %-14s %-10.2f %-10.2f %.2fx\n", p,
        sprintf("%.4f / %.4f", a, f), sprintf("%.4f / %.4f", b, g),
        sprintf("%+.1f / %+.1f", 100 * (a - b), 100 * (f - g)), r, t, r / t }'
done
