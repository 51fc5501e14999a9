#!/bin/bash
# Slurm: starts a private one-node cluster (slurmctld + slurmd on 127.0.0.1,
# no munge, state in a temporary folder, ports of its own, no systemd),
# then one sbatch job that runs a 2-rank collectives job three ways:
#   a. `accelerate launch` directly in the batch script,
#   b. `srun --ntasks=1 accelerate launch` (one launcher per node),
#   c. plain `srun --ntasks=2 PROBE` (one task per rank, no launcher).
# Then, given the gpt program and the Brown Corpus, the GPT example's batch
# scripts (examples/slurm/gpt_*.sbatch) as a user submits them, with only
# sbatch's command line adjusting them to this 2-CPU node without GPUs:
#   d. gpt_one_node.sbatch and gpt_multi_node.sbatch (--nodes=1) run 10 steps
#      on 2 CPU processes: they finish, only the main process prints, once per
#      evaluation, and they write the model;
#   e. gpt_one_node.sbatch again on d's output_dir with more steps resumes
#      from checkpoint-10; signalled as Slurm signals it before the time limit
#      (--signal=B:USR1), it requeues itself, and the rerun resumes from the
#      newest checkpoint and finishes.
# Then, given the nlp program, MiniLM and the labelled Brown sentences, the
# NLP example's batch script (examples/slurm/nlp.sbatch) the same way:
#   f. one epoch on a small slice on 2 CPU processes: it finishes, the
#      accuracy/F1 line comes from the main process only, once, and the
#      epoch's checkpoint is written; submitted again for two epochs on the
#      same output_dir, it resumes from epoch_0 and runs only epoch 1.
# Exit 77 (skipped) where Slurm is not installed or we are not root.
#   slurm_test.sh ACCELERATE COLLECTIVES_PROBE [TRAINING_PROBE [GPT BROWN_DIR
#                 [NLP MINILM_DIR BROWN_GENRE_DIR]]]
set -u
ACCELERATE=$1
PROBE=$2
GPT=${4:-}
BROWN=${5:-}
NLP=${6:-}
MINILM=${7:-}
BROWN_GENRE=${8:-}
EXAMPLES=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../examples/slurm" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() {
  echo "FAILED: $*"
  for log in "$WORK"/slurmctld.log "$WORK"/slurmd.log; do [ -f "$log" ] && tail -n 20 "$log"; done
  exit 1
}

for tool in slurmctld slurmd sbatch srun scontrol sinfo; do
  command -v $tool >/dev/null || skip "Slurm is not installed ($tool missing; Debian package slurm-wlm)"
done
[ "$(id -u)" = 0 ] || skip "a private Slurm cluster runs its daemons as root"
[ -x "$PROBE" ] || skip "collectives_probe was not built ($PROBE)"

WORK=$(mktemp -d /tmp/accelerate_slurm.XXXXXX)
chmod 755 "$WORK"
export SLURM_CONF=$WORK/slurm.conf
NODE=$(hostname -s)
CTLD_PORT=$((16000 + ($$ % 2000) * 2))
SLURMD_PORT=$((CTLD_PORT + 1))
cleanup() {
  scontrol shutdown >/dev/null 2>&1
  sleep 0.5
  # Only the daemons this script started (their pid files are in $WORK).
  for name in slurmctld slurmd; do
    [ -f "$WORK/$name.pid" ] && kill -KILL "$(cat "$WORK/$name.pid")" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mkdir -p "$WORK/state" "$WORK/spool"
cat >"$SLURM_CONF" <<EOF
ClusterName=accelerate-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

slurmctld -i || fail "slurmctld did not start"
slurmd -N "$NODE" || fail "slurmd did not start"
for _ in $(seq 1 60); do
  sinfo -h -o %t 2>/dev/null | grep -q idle && break
  sleep 0.25
done
sinfo -h -o %t | grep -q idle || fail "the node never became idle: $(sinfo 2>&1)"
echo "ok: one-node Slurm cluster is up (${SECONDS} s)"

cat >"$WORK/job.sh" <<EOF
#!/bin/bash
#SBATCH --nodes=1 --ntasks=2 --time=2
export ACCELERATE_TIMEOUT=30 OMP_NUM_THREADS=1
echo "== a (\$SECONDS s)"
"$ACCELERATE" launch --cpu --num_processes 2 "$PROBE" check || echo "a failed: \$?"
echo "== b (\$SECONDS s)"
srun --ntasks=1 "$ACCELERATE" launch --cpu --num_processes 2 "$PROBE" check || echo "b failed: \$?"
echo "== c (\$SECONDS s)"
ACCELERATE_USE_CPU=1 MASTER_PORT=\$((20000 + SLURM_JOB_ID % 10000)) srun --ntasks=2 "$PROBE" check || echo "c failed: \$?"
echo "== done (\$SECONDS s)"
EOF
# sbatch --wait polls with a growing pause (30 s here for an 11 s job); ask
# the controller ourselves instead.
sbatch --parsable --output="$WORK/job.out" "$WORK/job.sh" >"$WORK/sbatch.out" 2>&1 ||
  fail "sbatch failed: $(cat "$WORK/sbatch.out")"
JOB_ID=$(cut -d';' -f1 "$WORK/sbatch.out")
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_job ID: waits up to 90 s for the job to end; prints its final state.
wait_job() {
  local state=""
  for _ in $(seq 1 360); do
    state=$(job_state "$1")
    case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED) break ;; esac
    sleep 0.25
  done
  echo "$state"
}
state=$(wait_job "$JOB_ID")
cat "$WORK/job.out" 2>/dev/null
[ "$state" = COMPLETED ] || fail "job $JOB_ID ended as '$state'"
OUT=$WORK/job.out
grep -q "failed:" "$OUT" && fail "a part of the job failed"
section() { sed -n "/^== $1 /,/^== /p" "$OUT"; }
PORT=$((20000 + JOB_ID % 10000))
for part in a b; do
  section $part | grep -q "^accelerate launch: starting 2 process(es), ranks 0-1 of 2 on cpu, MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT," ||
    fail "part $part: no start line with the port derived from job $JOB_ID ($PORT)"
  for rank in 0 1; do
    section $part | grep -q "^\[rank$rank\]: rank $rank: collectives ok (rank $rank/2 (local $rank/2, node 0/1) cpu gloo via torchrun)" ||
      fail "part $part: rank $rank did not report"
  done
done
for rank in 0 1; do
  section c | grep -q "^rank $rank: collectives ok (rank $rank/2 (local $rank/2, node 0/1) cpu gloo via slurm)" ||
    fail "part c: rank $rank did not report"
done
echo "ok: sbatch ran the job through accelerate launch, srun + accelerate launch, and plain srun (${SECONDS} s)"

# ---- d, e: the GPT example's batch scripts, submitted as a user would ----
# (f, the NLP example's, runs first: it is quicker, and needs d's helpers.)
if [ -z "$GPT" ]; then
  echo "note: the examples' Slurm scripts were not run (no gpt program given)"
  exit 0
fi
[ -x "$GPT" ] || fail "the gpt program was not built ($GPT)"
[ -f "$BROWN/train.txt" ] || fail "Brown Corpus missing in $BROWN: run scripts/fetch-brown.sh"
t_gpt=$SECONDS
# The scripts ask for 4 GPUs, 16 CPUs and hours; on this node without GPUs
# sbatch's flags override that, as on a CPU-only cluster. The 2 CPUs give
# 2 processes (the scripts' default without GPUs: one per CPU). --time stays
# above 5 minutes: the scripts requeue themselves at 5 minutes left. The
# paths come from the environment, which sbatch passes to the job.
export ACCELERATE GPT DATA_DIR=$BROWN
TINY=(--preset tiny --block_size 64 --max_eval_samples 32 --warmup_steps 2
      --logging_steps 5 --eval_steps 5 --save_steps 5)
# submit SCRIPT OUTPUT_DIR LOG [sbatch flags...] -- [gpt flags...]: prints the job id.
submit() {
  local script=$1 dir=$2 log=$3 flags=()
  shift 3
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  OUTPUT_DIR=$dir sbatch --parsable --gres=none --cpus-per-task=2 --time=15 "${flags[@]}" \
    --output="$log" "$EXAMPLES/$script" "$@" 2>"$WORK/sbatch.err" | cut -d';' -f1
}
# run_of N LOG: the Nth run in LOG (a requeued job appends each run to it).
run_of() { awk -v n="$1" '/^gpt_[a-z_]+: start:/ { k++ } k == n' "$2"; }
# first_step: the first step the main process logged ("step N: tokens/s").
first_step() { sed -n 's/^\[rank0\]: step \([0-9]*\): tokens\/s .*/\1/p' | head -n 1; }
# check_finished WHAT DIR EVALS RUN_OUTPUT: the run ended with status 0
# after the final train_loss, printed eval_loss EVALS times, all from the
# main process (the others print no metrics), and wrote DIR/model.
check_finished() {
  local what=$1 dir=$2 evals=$3 run=$4
  grep -q "^gpt_[a-z_]*: end: .* status 0$" <<<"$run" || fail "$what: the script did not end with status 0"
  grep -q "^\[rank0\]: {.*'train_loss'" <<<"$run" || fail "$what: training did not finish (no train_loss)"
  local n
  n=$(grep -c "'eval_loss'" <<<"$run")
  [ "$n" = "$evals" ] || fail "$what: eval_loss printed $n times for $evals evaluations"
  n=$(grep -c "^\[rank0\]: {.*'eval_loss'" <<<"$run")
  [ "$n" = "$evals" ] || fail "$what: eval_loss printed by a process other than the main one"
  grep -q "^\[rank[1-9][0-9]*\]: {" <<<"$run" && fail "$what: a process other than the main one printed metrics"
  for file in config.json model.safetensors tokenizer.bpe; do
    [ -s "$dir/model/$file" ] || fail "$what: $dir/model/$file was not written"
  done
}

# f. The NLP example's script: one epoch of a slice, then resubmitted for
# two, which resumes from epoch_0.
if [ -n "$NLP" ] && [ -f "$MINILM/model.safetensors" ] && [ -f "$BROWN_GENRE/train.tsv" ]; then
  t_nlp=$SECONDS
  [ -x "$NLP" ] || fail "the nlp program was not built ($NLP)"
  NLP_DIR=$WORK/nlp
  SLICE=(--max_train_samples 32 --max_eval_samples 24 --batch_size 8 --max_length 32
         --num_warmup_steps 0)
  submit_nlp() {  # submit_nlp LOG [nlp flags...]: prints the job id
    local log=$1
    shift
    NLP=$NLP MODEL=$MINILM DATA_DIR=$BROWN_GENRE OUTPUT_DIR=$NLP_DIR sbatch --parsable \
      --gres=none --cpus-per-task=2 --time=15 --output="$log" "$EXAMPLES/nlp.sbatch" "$@" \
      2>"$WORK/sbatch.err" | cut -d';' -f1
  }
  J=$(submit_nlp "$WORK/f-1.out" "${SLICE[@]}" --num_epochs 1)
  [ -n "$J" ] || fail "sbatch nlp.sbatch failed: $(cat "$WORK/sbatch.err")"
  state=$(wait_job "$J")
  echo "== f, nlp.sbatch, job $J"
  cat "$WORK/f-1.out"
  [ "$state" = COMPLETED ] || fail "nlp.sbatch: job $J ended as '$state'"
  grep -q "^accelerate launch: starting 2 process(es), ranks 0-1 of 2 on cpu," "$WORK/f-1.out" ||
    fail "nlp.sbatch: no start line for 2 CPU processes"
  [ "$(grep -c "^\[rank0\]: epoch 0: {'accuracy'" "$WORK/f-1.out")" = 1 ] ||
    fail "nlp.sbatch: the main process did not print epoch 0's metrics once"
  grep -q "^\[rank[1-9][0-9]*\]: epoch" "$WORK/f-1.out" && fail "nlp.sbatch: another process printed metrics"
  [ -f "$NLP_DIR/epoch_0/accelerate_checkpoint.json" ] || fail "nlp.sbatch: no complete epoch_0 checkpoint"
  J=$(submit_nlp "$WORK/f-2.out" "${SLICE[@]}" --num_epochs 2)
  [ -n "$J" ] || fail "sbatch nlp.sbatch failed: $(cat "$WORK/sbatch.err")"
  state=$(wait_job "$J")
  echo "== f, nlp.sbatch again for 2 epochs, job $J"
  cat "$WORK/f-2.out"
  [ "$state" = COMPLETED ] || fail "nlp.sbatch (2 epochs): job $J ended as '$state'"
  grep -q "^nlp: start: .*resuming from $NLP_DIR/epoch_0$" "$WORK/f-2.out" ||
    fail "nlp.sbatch (2 epochs): did not resume from epoch_0"
  grep -q "epoch 0: {'accuracy'" "$WORK/f-2.out" && fail "nlp.sbatch (2 epochs): epoch 0 ran again"
  [ "$(grep -c "^\[rank0\]: epoch 1: {'accuracy'" "$WORK/f-2.out")" = 1 ] ||
    fail "nlp.sbatch (2 epochs): the main process did not print epoch 1's metrics once"
  echo "ok: nlp.sbatch ran an epoch on 2 processes and, resubmitted, resumed from epoch_0 ($((SECONDS - t_nlp)) s)"
else
  echo "note: the NLP example's Slurm script was not run (no nlp program, MiniLM or labelled Brown sentences given)"
fi

# d. Both scripts, 10 steps, evaluations at steps 5 and 10.
ONE=$WORK/gpt-one
MULTI=$WORK/gpt-multi
J1=$(submit gpt_one_node.sbatch "$ONE" "$WORK/d-one.out" -- "${TINY[@]}" --max_steps 10)
[ -n "$J1" ] || fail "sbatch gpt_one_node.sbatch failed: $(cat "$WORK/sbatch.err")"
J2=$(submit gpt_multi_node.sbatch "$MULTI" "$WORK/d-multi.out" --nodes=1 -- "${TINY[@]}" --max_steps 10)
[ -n "$J2" ] || fail "sbatch gpt_multi_node.sbatch failed: $(cat "$WORK/sbatch.err")"
for pair in "$J1:one" "$J2:multi"; do
  job=${pair%%:*} kind=${pair#*:}
  state=$(wait_job "$job")
  echo "== d, gpt_${kind}_node.sbatch, job $job"
  cat "$WORK/d-$kind.out"
  [ "$state" = COMPLETED ] || fail "gpt_${kind}_node.sbatch: job $job ended as '$state'"
done
grep -q "^accelerate launch: starting 2 process(es), ranks 0-1 of 2 on cpu," "$WORK/d-one.out" ||
  fail "gpt_one_node.sbatch: no start line for 2 CPU processes"
# The multi-node script passed the first node of the job and its own port.
grep -q "^accelerate launch: starting 2 process(es), ranks 0-1 of 2 on cpu, MASTER_ADDR=$NODE MASTER_PORT=$((20000 + J2 % 10000))," "$WORK/d-multi.out" ||
  fail "gpt_multi_node.sbatch: no start line with MASTER_ADDR=$NODE and the job's port"
check_finished gpt_one_node.sbatch "$ONE" 2 "$(run_of 1 "$WORK/d-one.out")"
check_finished gpt_multi_node.sbatch "$MULTI" 2 "$(run_of 1 "$WORK/d-multi.out")"
echo "ok: gpt_one_node.sbatch and gpt_multi_node.sbatch (--nodes=1) trained, evaluated and saved the model ($((SECONDS - t_gpt)) s)"

# e. The one-node script again on the same output_dir, to step 60: it
# resumes from checkpoint-10. Once checkpoint-20 exists, USR1 to the batch
# shell (what --signal=B:USR1@300 sends before the time limit) makes it
# requeue itself; the rerun resumes from the newest checkpoint.
t_resume=$SECONDS
rm -rf "$ONE/model"  # must be written again by this job
J3=$(submit gpt_one_node.sbatch "$ONE" "$WORK/e.out" -- "${TINY[@]}" --max_steps 60)
[ -n "$J3" ] || fail "sbatch gpt_one_node.sbatch failed: $(cat "$WORK/sbatch.err")"
for _ in $(seq 1 240); do
  [ -d "$ONE/checkpoint-20" ] && break
  case "$(job_state "$J3")" in PENDING|RUNNING|CONFIGURING) ;; *) break ;; esac
  sleep 0.25
done
[ -d "$ONE/checkpoint-20" ] || { cat "$WORK/e.out"; fail "job $J3 wrote no checkpoint-20 (it is '$(job_state "$J3")')"; }
scancel --batch --signal=USR1 "$J3" || fail "scancel --batch --signal=USR1 $J3 failed"
for _ in $(seq 1 120); do
  [ "$(job_state "$J3")" = PENDING ] && ! pgrep -f -- "--output_dir $ONE " >/dev/null && break
  sleep 0.25
done
[ "$(job_state "$J3")" = PENDING ] || { cat "$WORK/e.out"; fail "job $J3 was not requeued (it is '$(job_state "$J3")')"; }
# The newest complete checkpoint (a killed save leaves checkpoint-N.incomplete).
newest=$(find "$ONE" -maxdepth 1 -type d -name 'checkpoint-*' -printf '%f\n' |
  sed -n 's/^checkpoint-\([0-9]*\)$/\1/p' | sort -n | tail -n 1)
# Slurm holds a requeued job back for about 2 minutes; let it start sooner,
# but not within the second of the requeue: slurmd refuses a credential made
# in the second its job's old one was revoked ("Job credential revoked").
sleep 2
scontrol update JobId="$J3" StartTime=now || fail "scontrol update JobId=$J3 StartTime=now failed"
state=$(wait_job "$J3")
echo "== e, gpt_one_node.sbatch again, job $J3 (requeued once)"
cat "$WORK/e.out"
[ "$state" = COMPLETED ] || fail "job $J3 ended as '$state'"
[ "$(grep -c '^gpt_one_node: start:' "$WORK/e.out")" = 2 ] || fail "job $J3 did not run exactly twice"
grep -q "^gpt_one_node: time limit near; requeueing job $J3," "$WORK/e.out" || fail "job $J3 did not requeue itself"
step=$(run_of 1 "$WORK/e.out" | first_step)
[ "$step" = 15 ] || fail "the resubmitted job's first logged step is '$step', not 15 (after checkpoint-10)"
run_of 2 "$WORK/e.out" | grep -q "^gpt_one_node: start: job $J3 restart 1 " || fail "the rerun is not restart 1"
step=$(run_of 2 "$WORK/e.out" | first_step)
if [ "${newest:-0}" -lt 20 ] || [ "$step" != $((newest + 5)) ]; then
  fail "the requeued run's first logged step is '$step', not $((newest + 5)) (after checkpoint-$newest)"
fi
check_finished "the requeued run" "$ONE" $(((60 - newest) / 5)) "$(run_of 2 "$WORK/e.out")"
echo "ok: resubmitted, gpt_one_node.sbatch resumed from checkpoint-10; requeued at the signal, from checkpoint-$newest ($((SECONDS - t_resume)) s)"
echo "ok: the GPT example's Slurm scripts (${SECONDS} s in all)"
