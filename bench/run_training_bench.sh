#!/usr/bin/env bash
# The training benchmark of issue 3 (docs/performance.md): one run that times,
# side by side on this machine, two workloads
#
#   mnist   BasicNet on data/mnist, the seed's recipe (AdamW, batch 64 per
#           process): bench/linear/mnist_profile (examples/mnist's training
#           loop with clocks around it) and bench/python/mnist_reference.py;
#           mean ms/step over the last epoch's training loop
#   linear  6 x (Linear(1024,1024) + ReLU), batch 32, synthetic data, SGD:
#           bench/linear/linear_bench and bench/python/linear_ddp.py;
#           median ms/step over the timed steps
#
# in five configurations
#
#   plain1  a plain single-process LibTorch loop         THREADS_1P threads
#   acc1    our Accelerator, 1 process                   THREADS_1P threads
#   acc2    our Accelerator, 2 processes                 THREADS_2P threads each
#           (accelerate launch --cpu --num_processes 2)
#   acc2gloo  the same with ACCELERATE_SHARED_MEMORY_ALLREDUCE=0: gradients
#           travel through Gloo as DDP's do (for comparison; the default
#           sums them in shared memory, docs/distributed.md)
#   ddp2    PyTorch's Python DDP on gloo, 2 processes    THREADS_2P threads each
#           (bench/python/launch.sh 2)
#   py1     PyTorch's Python loop, 1 process (for reference only)
#
# and, as a cross-check, the example programs themselves (examples/mnist:
# mnist_plain, mnist on 1 and 2 processes) with the ms/step they print.
#
# REPEATS rounds; each round runs every measurement once (the order reversed
# on every other round, so load drifts hit all alike), and the table shows
# the median over rounds. Then the goal ratios: acc1/plain1 (goal <= 1.02)
# and acc2/ddp2 (goal <= 1.00) for each workload, the share of all-reduce
# time hidden behind backward (the reducer's GradientSyncStats), and where
# the step time goes (data, forward, backward, sync, optimizer).
#
# Usage: bash bench/run_training_bench.sh [BUILD_DIR]     (default: build)
#   needs, in BUILD_DIR: bench/linear/linear_bench, bench/linear/mnist_profile,
#   bin/accelerate, examples/mnist, examples/mnist_plain, e.g.
#     cmake --build build --target linear_bench mnist_profile mnist mnist_plain accelerate_cli
#   and data/mnist (scripts/fetch-mnist.sh), /usr/bin/python3 with python3-torch.
#   A build/ configured by scripts/test.sh compiles test code and the programs
#   sharing its precompiled header (these benchmarks, the examples) at -O1;
#   reconfigure with -DACCELERATE_TEST_OPTIMIZATION= (or use another build
#   directory with -DACCELERATE_BUILD_TESTS=OFF) before measuring.
#
# Environment (defaults in brackets):
#   REPEATS [5]            rounds; medians are taken over them
#   THREADS_1P [nproc]     OMP_NUM_THREADS = OPENBLAS_NUM_THREADS for 1-process runs
#   THREADS_2P [nproc/2]   the same for each of the 2 processes
#   MNIST_EPOCHS [2]       epochs per MNIST run; the last one is timed
#   LINEAR_STEPS [100]     timed steps per linear run, after LINEAR_WARMUP [10]
#   EXAMPLES [1]           also run the examples/mnist programs (cross-check)
#   MAX_LOAD [unset]       before each round, wait (up to 15 min) until the
#                          1-minute load average is below this
#   PYTHON [/usr/bin/python3], DATA_DIR [data/mnist]
#   LOG_DIR [a new temporary folder]  every run's full output is kept there
#   GLIBC_TUNABLES         passed on to every run (C++ and Python alike); see
#                          docs/performance.md on glibc malloc and page faults
#
# Not part of CI: it takes several minutes and its figures depend on the
# machine and its load.
set -euo pipefail

die() { printf 'run_training_bench: error: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
[[ -d "$build" ]] || die "build folder $build not found (usage: run_training_bench.sh [BUILD_DIR])"

cores="$(nproc 2>/dev/null || echo 1)"
REPEATS="${REPEATS:-5}"
THREADS_1P="${THREADS_1P:-$cores}"
t2=$((cores / 2)); ((t2 >= 1)) || t2=1
THREADS_2P="${THREADS_2P:-$t2}"
MNIST_EPOCHS="${MNIST_EPOCHS:-2}"
LINEAR_STEPS="${LINEAR_STEPS:-100}"
LINEAR_WARMUP="${LINEAR_WARMUP:-10}"
EXAMPLES="${EXAMPLES:-1}"
PYTHON="${PYTHON:-/usr/bin/python3}"
DATA_DIR="${DATA_DIR:-data/mnist}"
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/training-bench.XXXXXX)}"
mkdir -p "$LOG_DIR"
for v in REPEATS THREADS_1P THREADS_2P MNIST_EPOCHS LINEAR_STEPS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ "$LINEAR_WARMUP" =~ ^[0-9]+$ ]] || die "LINEAR_WARMUP must be a non-negative integer"

mnist_plain="$build/examples/mnist_plain"
mnist_acc="$build/examples/mnist"
launcher="$build/bin/accelerate"
linear="$build/bench/linear/linear_bench"
profile="$build/bench/linear/mnist_profile"
needed=("$launcher" "$linear" "$profile")
[[ "$EXAMPLES" == 1 ]] && needed+=("$mnist_plain" "$mnist_acc")
for f in "${needed[@]}"; do
  [[ -x "$f" ]] || die "$f not found: build it first (cmake --build $build --target linear_bench mnist_profile mnist mnist_plain accelerate_cli)"
done
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [[ -f "$DATA_DIR/$f" ]] || die "$DATA_DIR/$f not found: run scripts/fetch-mnist.sh"
done
"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch (needs Debian's python3-torch)"

load1() { cut -d' ' -f1 /proc/loadavg; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---- one measurement ---------------------------------------------------------
# run NAME THREADS CMD...: runs CMD with the thread variables set, output to
# $LOG_DIR/NAME.rROUND.log; fails loudly.
round=0
run() {
  local name="$1" threads="$2"; shift 2
  local log="$LOG_DIR/$name.r$round.log"
  if ! OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "$name failed (round $round, full output in $log)"
  fi
  last_log="$log"
}
# The ms/step on the last "epoch N: test accuracy ..." line (any rank prefix).
epoch_ms() {
  local v
  v="$(grep -E 'epoch [0-9]+: test accuracy' "$1" | tail -n 1 | sed -nE 's#.* ([0-9.]+) ms/step.*#\1#p')"
  [[ -n "$v" ]] || die "no 'epoch N: ... ms/step' line in $1"
  printf '%s' "$v"
}
# KEY=VALUE from a "result ..." line.
field() {
  local v
  v="$(grep -F 'result workload=' "$1" | tail -n 1 | grep -oE "(^| )$2=[^ ]+" | cut -d= -f2)"
  [[ -n "$v" ]] || die "no $2= in the result line of $1"
  printf '%s' "$v"
}
python_linear_ms() {
  local v
  v="$(sed -nE 's#.*linear_ddp: world [0-9]+, ([0-9.]+) ms/step median.*#\1#p' "$1" | tail -n 1)"
  [[ -n "$v" ]] || die "no 'ms/step median' line in $1"
  printf '%s' "$v"
}

declare -A vals   # "workload.config" -> values, one per round, space separated
add() {
  [[ -n "$2" ]] || die "no value for $1 (round $round; see the logs in $LOG_DIR)"
  vals["$1"]="${vals[$1]:-} $2"
}

launch2() {  # our launcher, 2 CPU processes, a free port
  "$launcher" launch -q --cpu --num_processes 2 --main_process_port 0 \
    --num_cpu_threads_per_process "$THREADS_2P" "$@"
}
launch2_gloo() { env ACCELERATE_SHARED_MEMORY_ALLREDUCE=0 "$launcher" launch -q --cpu \
  --num_processes 2 --main_process_port 0 --num_cpu_threads_per_process "$THREADS_2P" "$@"; }
pylaunch2() { bash bench/python/launch.sh 2 "$@"; }

linear_args=(--steps "$LINEAR_STEPS" --warmup "$LINEAR_WARMUP")
mnist_args=(--epochs "$MNIST_EPOCHS" --data_dir "$DATA_DIR")

profile_fields() {  # keeps the figures of an mnist_profile run
  local key="$1" f
  add "$key" "$(field "$last_log" ms_per_step)"
  for f in data_ms fwd_ms bwd_ms sync_ms opt_ms comm_ms exposed_ms hidden_fraction; do
    add "$key.$f" "$(field "$last_log" "$f")"; done
}
m_mnist_plain1() { run mnist.plain1 "$THREADS_1P" "$profile" --mode plain "${mnist_args[@]}"; profile_fields mnist.plain1; }
m_mnist_acc1()   { run mnist.acc1 "$THREADS_1P" "$profile" --mode accelerated "${mnist_args[@]}"; profile_fields mnist.acc1; }
m_mnist_acc2()   { run mnist.acc2 "$THREADS_2P" launch2 "$profile" --mode accelerated "${mnist_args[@]}"; profile_fields mnist.acc2; }
m_mnist_acc2gloo() { run mnist.acc2gloo "$THREADS_2P" launch2_gloo "$profile" --mode accelerated "${mnist_args[@]}"; profile_fields mnist.acc2gloo; }
m_mnist_ddp2()   { run mnist.ddp2 "$THREADS_2P" pylaunch2 bench/python/mnist_reference.py --epochs "$MNIST_EPOCHS" --data "$DATA_DIR"; add mnist.ddp2 "$(epoch_ms "$last_log")"; }
m_mnist_py1()    { run mnist.py1 "$THREADS_1P" "$PYTHON" bench/python/mnist_reference.py --epochs "$MNIST_EPOCHS" --data "$DATA_DIR"; add mnist.py1 "$(epoch_ms "$last_log")"; }
m_example_plain1() { run example.plain1 "$THREADS_1P" "$mnist_plain" "${mnist_args[@]}"; add example.plain1 "$(epoch_ms "$last_log")"; }
m_example_acc1()   { run example.acc1 "$THREADS_1P" "$mnist_acc" "${mnist_args[@]}"; add example.acc1 "$(epoch_ms "$last_log")"; }
m_example_acc2()   { run example.acc2 "$THREADS_2P" launch2 "$mnist_acc" "${mnist_args[@]}"; add example.acc2 "$(epoch_ms "$last_log")"; }
linear_fields() {  # keeps the phase figures of a linear_bench run
  local key="$1" f
  add "$key" "$(field "$last_log" ms_per_step)"
  for f in fwd_ms bwd_ms sync_ms opt_ms comm_ms exposed_ms hidden_fraction; do
    add "$key.$f" "$(field "$last_log" "$f")"; done
}
m_linear_plain1() { run linear.plain1 "$THREADS_1P" "$linear" --mode plain "${linear_args[@]}"; linear_fields linear.plain1; }
m_linear_acc1()   { run linear.acc1 "$THREADS_1P" "$linear" --mode accelerated "${linear_args[@]}"; linear_fields linear.acc1; }
m_linear_acc2()   { run linear.acc2 "$THREADS_2P" launch2 "$linear" --mode accelerated "${linear_args[@]}"; linear_fields linear.acc2; }
m_linear_acc2gloo() { run linear.acc2gloo "$THREADS_2P" launch2_gloo "$linear" --mode accelerated "${linear_args[@]}"; linear_fields linear.acc2gloo; }
m_linear_ddp2()   { run linear.ddp2 "$THREADS_2P" pylaunch2 bench/python/linear_ddp.py "${linear_args[@]}"; add linear.ddp2 "$(python_linear_ms "$last_log")"; }
m_linear_py1()    { run linear.py1 "$THREADS_1P" "$PYTHON" bench/python/linear_ddp.py "${linear_args[@]}"; add linear.py1 "$(python_linear_ms "$last_log")"; }

measurements=(m_mnist_plain1 m_mnist_acc1 m_mnist_acc2 m_mnist_acc2gloo m_mnist_ddp2 m_mnist_py1
              m_linear_plain1 m_linear_acc1 m_linear_acc2 m_linear_acc2gloo m_linear_ddp2
              m_linear_py1)
[[ "$EXAMPLES" == 1 ]] && measurements+=(m_example_plain1 m_example_acc1 m_example_acc2)

# ---- statistics ----------------------------------------------------------------
median() { tr ' ' '\n' | grep -v -e '^$' -e '^na$' | sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "na"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
minmax() { tr ' ' '\n' | grep -v -e '^$' -e '^na$' | sort -g | awk -v d="${1:-1}" 'NR==1{lo=$1} {hi=$1} END {if (NR) printf "%.*f-%.*f", d, lo, d, hi; else print "na"}'; }
med() { printf '%s' "${vals[$1]:-}" | median; }
fmt() { awk -v v="$1" -v d="${2:-1}" 'BEGIN { if (v == "na" || v == "") print "na"; else printf "%.*f", d, v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "na" || b == "na" || b == 0) print "na"; else printf "%.3f", a / b }'; }
# Per-round ratios a/b: their median and range.
round_ratios() {
  local -a a b; read -r -a a <<<"${vals[$1]}"; read -r -a b <<<"${vals[$2]}"
  local i out=""
  for ((i = 0; i < ${#a[@]} && i < ${#b[@]}; i++)); do out+=" $(ratio "${a[$i]}" "${b[$i]}")"; done
  printf '%s' "$out"
}

# ---- the run -------------------------------------------------------------------
echo "training benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))"
echo "  build $build; logs in $LOG_DIR"
echo "  $REPEATS rounds; threads: 1 process $THREADS_1P, 2 processes $THREADS_2P each (OMP_NUM_THREADS = OPENBLAS_NUM_THREADS)"
echo "  mnist: $MNIST_EPOCHS epochs per run, last epoch timed; linear: $LINEAR_WARMUP warm-up + $LINEAR_STEPS timed steps, median"
echo "  GLIBC_TUNABLES=${GLIBC_TUNABLES:-(unset)}"
echo "  load average at start: $(loadavg)"
loads=()
start_s=$SECONDS
for ((round = 1; round <= REPEATS; round++)); do
  if [[ -n "${MAX_LOAD:-}" ]]; then
    waited=0
    while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN { exit !(l >= m) }' && ((waited < 900)); do
      sleep 15; waited=$((waited + 15))
    done
  fi
  order=("${measurements[@]}")
  if ((round % 2 == 0)); then
    order=(); for ((i = ${#measurements[@]} - 1; i >= 0; i--)); do order+=("${measurements[$i]}"); done
  fi
  l0="$(load1)"
  for m in "${order[@]}"; do "$m"; done
  loads+=("$l0-$(load1)")
  printf '  round %d/%d done (%ds so far), 1-min load %s at start, %s at end\n' \
    "$round" "$REPEATS" $((SECONDS - start_s)) "$l0" "$(load1)"
done
echo "  load average at end: $(loadavg)"

# ---- the report ----------------------------------------------------------------
label() {
  case "$1" in
    plain1) echo "(a) plain LibTorch loop, 1 process" ;;
    acc1) echo "(b) Accelerator, 1 process" ;;
    acc2) echo "(c) Accelerator, 2 processes" ;;
    acc2gloo) echo "    Accelerator, 2 processes, Gloo only" ;;
    ddp2) echo "(d) PyTorch Python DDP, 2 processes" ;;
    py1) echo "    PyTorch Python loop, 1 process" ;;
  esac
}
threads_of() { case "$1" in *1) echo "$THREADS_1P" ;; *) echo "$THREADS_2P each" ;; esac; }

echo
echo "ms per training step (per process; median over $REPEATS rounds, range in brackets)"
printf '%-8s %-38s %-10s %s\n' workload configuration threads "ms/step"
for w in mnist linear; do
  for c in plain1 acc1 acc2 acc2gloo ddp2 py1; do
    printf '%-8s %-38s %-10s %s [%s]\n' "$w" "$(label $c)" "$(threads_of $c)" \
      "$(fmt "$(med $w.$c)")" "$(printf '%s' "${vals[$w.$c]}" | minmax)"
  done
done

echo
echo "goal ratios (ratio of medians; median and range of the per-round ratios in brackets)"
for w in mnist linear; do
  r1="$(ratio "$(med $w.acc1)" "$(med $w.plain1)")"
  r2="$(ratio "$(med $w.acc2)" "$(med $w.ddp2)")"
  rr1="$(round_ratios $w.acc1 $w.plain1)"; rr2="$(round_ratios $w.acc2 $w.ddp2)"
  v1="$(awk -v r="$r1" 'BEGIN { print (r != "na" && r <= 1.02) ? "meets" : "misses" }')"
  v2="$(awk -v r="$r2" 'BEGIN { print (r != "na" && r <= 1.00) ? "meets" : "misses" }')"
  printf '%-8s Accelerator 1p / plain      = %s  (goal <= 1.02: %s) [%s; %s]\n' "$w" "$r1" "$v1" \
    "$(printf '%s' "$rr1" | median)" "$(printf '%s' "$rr1" | minmax 3)"
  printf '%-8s Accelerator 2p / Python DDP = %s  (goal <= 1.00: %s) [%s; %s]\n' "$w" "$r2" "$v2" \
    "$(printf '%s' "$rr2" | median)" "$(printf '%s' "$rr2" | minmax 3)"
  rg="$(round_ratios $w.acc2gloo $w.ddp2)"
  printf '%-8s   with Gloo only / Python DDP = %s  (for comparison) [%s; %s]\n' "$w" \
    "$(ratio "$(med $w.acc2gloo)" "$(med $w.ddp2)")" "$(printf '%s' "$rg" | median)" \
    "$(printf '%s' "$rg" | minmax 3)"
done

if [[ "$EXAMPLES" == 1 ]]; then
  echo
  echo "cross-check: the ms/step examples/mnist prints for its last epoch (median over rounds)."
  echo "It stops its clock after the epoch's evaluation, so it includes test-set time; the mnist"
  echo "rows above time the training loop alone, as mnist_reference.py does."
  printf '  mnist_plain, 1 process %s [%s]; mnist, 1 process %s [%s]; mnist, 2 processes %s [%s]\n' \
    "$(fmt "$(med example.plain1)")" "$(printf '%s' "${vals[example.plain1]}" | minmax)" \
    "$(fmt "$(med example.acc1)")" "$(printf '%s' "${vals[example.acc1]}" | minmax)" \
    "$(fmt "$(med example.acc2)")" "$(printf '%s' "${vals[example.acc2]}" | minmax)"
fi

echo
echo "all-reduce hidden behind backward, Accelerator on 2 processes (GradientSyncStats:"
echo "1 - time blocked in finalize_backward / time communication was in flight; median over rounds)"
for w in linear mnist; do
  for c in acc2 acc2gloo; do
    printf '  %-16s %s  (in flight %s ms/step, exposed wait %s ms/step; finalize_backward %s ms/step)\n' \
      "$w $c:" "$(fmt "$(med $w.$c.hidden_fraction)" 3)" "$(fmt "$(med $w.$c.comm_ms)")" \
      "$(fmt "$(med $w.$c.exposed_ms)")" "$(fmt "$(med $w.$c.sync_ms)")"
  done
done

echo
echo "phase profile, ms per step (medians over rounds; bwd includes the gradient sync, sync = finalize_backward)"
printf '%-16s %8s %8s %8s %8s %8s %8s\n' run step data fwd bwd sync opt
for w in linear mnist; do
  for c in plain1 acc1 acc2 acc2gloo; do
    data="-"; [[ "$w" == mnist ]] && data="$(fmt "$(med $w.$c.data_ms)")"
    printf '%-16s %8s %8s %8s %8s %8s %8s\n' "$w $c" "$(fmt "$(med $w.$c)")" "$data" \
      "$(fmt "$(med $w.$c.fwd_ms)")" "$(fmt "$(med $w.$c.bwd_ms)")" \
      "$(fmt "$(med $w.$c.sync_ms)")" "$(fmt "$(med $w.$c.opt_ms)")"
  done
done
echo
echo "1-min load per round (start-end): ${loads[*]}"
echo "raw values per round:"
for k in $(printf '%s\n' "${!vals[@]}" | sort); do
  [[ "$k" == *.*.* ]] && continue
  printf '  %-16s %s\n' "$k" "${vals[$k]}"
done
