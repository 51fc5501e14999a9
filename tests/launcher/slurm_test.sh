#!/bin/bash
# Slurm: starts a private one-node cluster (slurmctld + slurmd on 127.0.0.1,
# no munge, state in a temporary folder, ports of its own, no systemd),
# then one sbatch job that runs a 2-rank collectives job three ways:
#   a. `accelerate launch` directly in the batch script,
#   b. `srun --ntasks=1 accelerate launch` (one launcher per node),
#   c. plain `srun --ntasks=2 PROBE` (one task per rank, no launcher).
# Exit 77 (skipped) where Slurm is not installed or we are not root.
#   slurm_test.sh ACCELERATE COLLECTIVES_PROBE
set -u
ACCELERATE=$1
PROBE=$2
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
state=""
for _ in $(seq 1 360); do
  state=$(scontrol show job "$JOB_ID" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 0.25
done
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
