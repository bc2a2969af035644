#!/usr/bin/env bash
# cubist under Slurm's srun, on a one-node cluster made here and removed
# after (`make test-slurm`; not in `make test`: CI has no Slurm).
#  1. installs slurm-wlm and munge if missing (apt-get, as root);
#  2. starts munged on a private socket, slurmctld and slurmd from a
#     slurm.conf in a scratch directory (this host, 2 CPUs, proctrack/
#     linuxproc, task/none, no cgroups, no accounting), on private ports;
#  3. runs `srun --mpi=P -n 2 cubist train --dp 2` (P = pmix for an OpenMPI
#     build, pmi2 for MPICH's) against the single process: loss trajectory
#     and final parameters to 1e-5 (tests/dp_compare.py); a bad grid under
#     srun (one message, exit 2); srun without the MPI plugin (MPICH: the
#     launcher guard's exit 2 on each task; OpenMPI: its own refusal in
#     MPI_Init, exit non-zero); no log or checkpoint left by a refused run;
#  4. stops the daemons it started (by their pid files).
#   BUILD=build-mpich scripts/test_slurm.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
C=$BUILD/cubist
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
[ -x "$C" ] || { echo "FAIL slurm: $C not built; run make (BUILD=$BUILD)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "FAIL slurm: slurmd must run as root here; run as root"; exit 2; }
missing=()
for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "# installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
        { echo "FAIL slurm: apt-get install ${missing[*]} failed"; exit 1; }
fi
if ldd "$C" | grep -q libmpich; then flavour=mpich plugin=pmi2; else flavour=openmpi plugin=pmix; fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

W=$(mktemp -d /tmp/cubist-slurm.XXXXXX)
chmod 755 "$W"
mkdir -p "$W/state" "$W/spool"
stop() {
    for d in slurmd slurmctld munged; do
        [ -s "$W/$d.pid" ] && kill "$(cat "$W/$d.pid")" 2>/dev/null
    done
    sleep 1
    rm -rf "$W"
}
trap stop EXIT
port=$((20000 + $$ % 20000))
host=$(hostname)
export SLURM_CONF=$W/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=cubist
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge.sock
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ReturnToService=2
NodeName=$host CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
munged -f --socket="$W/munge.sock" --pid-file="$W/munged.pid" --log-file="$W/munged.log" \
    --seed-file="$W/munged.seed" || { echo "FAIL slurm: munged did not start"; exit 1; }
slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || { echo "FAIL slurm: daemons did not start"; exit 1; }
for _ in $(seq 60); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.5; done
if ! sinfo -h -o %t 2>/dev/null | grep -q idle; then
    echo "FAIL slurm: the node never became idle: $(tail -n 3 "$W/slurmctld.log" "$W/slurmd.log" | tr '\n' '|')"
    exit 1
fi
echo "# Slurm $(sinfo -V | cut -d' ' -f2) on $host, $C ($flavour), srun --mpi=$plugin"

cd "$W" || exit 1
/usr/bin/python3 -c "import base64, random; random.seed(1); print(base64.encodebytes(bytes(random.getrandbits(8) for _ in range(225000))).decode())" >text.txt
"$C" prepare --input text.txt --output train.bin >/dev/null || { echo "FAIL slurm: prepare"; exit 1; }
A=(--data train.bin --layers 2 --d-model 32 --heads 4 --seq-len 16 --batch 8 --steps 30 --lr 3e-3
   --min-lr 1e-4 --warmup 3 --clip 0.5 --eps 1e-6 --seed 5 --quiet --peak-gflops 100)
"$C" train "${A[@]}" --log ref.jsonl --save ref.st || { echo "FAIL slurm: single-process reference"; exit 1; }

if timeout 120 srun --mpi=$plugin -n 2 "$C" train "${A[@]}" --dp 2 --log srun.jsonl --save srun.st 2>srun.err; then
    out=$(/usr/bin/python3 "$ROOT/tests/dp_compare.py" "srun --mpi=$plugin -n 2 --dp 2 = one process" \
        ref.jsonl srun.jsonl ref.st srun.st 2>&1)
    echo "$out"
    grep -q '^FAIL\|Traceback' <<<"$out" && failed=$((failed + 1))
else
    fail "srun --mpi=$plugin -n 2 --dp 2: exit $?: $(head -c 400 srun.err)"
fi

timeout 60 srun --mpi=$plugin -n 2 "$C" train "${A[@]}" --dp 3 --log bad.jsonl >bad.out 2>bad.err
rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c '^cubist: ' bad.err)" = 1 ] && grep -q 'needs 3 processes but the job has 2' bad.err &&
        [ ! -e bad.jsonl ]; then
    pass "srun bad grid (--dp 3 on 2 tasks): exit 2, one message: $(grep '^cubist: ' bad.err)"
else
    fail "srun bad grid: exit $rc: $(head -c 400 bad.err | tr '\n' '|')"
fi

timeout 60 srun -n 2 "$C" train "${A[@]}" --log none.jsonl --save none.st >none.out 2>none.err
rc=$?
if [ "$flavour" = mpich ]; then
    n=$(grep -c 'launched as 2 tasks by srun (SLURM_STEP_NUM_TASKS=2) but MPI sees 1 process' none.err)
    if [ "$rc" = 2 ] && [ "$n" = 2 ] && [ ! -e none.jsonl ] && [ ! -e none.st ]; then
        pass "srun without --mpi (MPICH build): each task refuses with exit 2: $(grep -m1 launched none.err)"
    else
        fail "srun without --mpi (MPICH build): exit $rc, $n guard lines: $(head -c 400 none.err | tr '\n' '|')"
    fi
else
    if [ "$rc" != 0 ] && [ ! -e none.jsonl ] && [ ! -e none.st ]; then
        pass "srun without --mpi (OpenMPI build): OpenMPI refuses in MPI_Init, exit $rc, nothing written"
    else
        fail "srun without --mpi (OpenMPI build): exit $rc: $(head -c 400 none.err | tr '\n' '|')"
    fi
fi
[ "$failed" = 0 ]
