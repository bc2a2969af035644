# Sourced by every test script that launches MPI jobs (and by dp_common.sh):
# the one place that decides which launcher runs the build under test.
#   ROOT     the repository root (absolute); the script continues there
#   BUILD    absolute (BUILD=build, BUILD=/tmp/x and BUILD=build-mpich all work)
#   flavour  openmpi or mpich: the MPI library $BUILD's binaries link (ldd)
#   MPIRUN   the launcher: as given (make exports mpirun.$(MPI)), else
#            mpirun.$flavour; exported, so `cubist bench` child jobs use it
#   tmo N    N seconds times TMO_SCALE (MPICH: 10), for `timeout`
#   launch   array: MPIRUN and its flags (OpenMPI: --oversubscribe for more
#            ranks than the 2 cores, -q to drop its banners), so a script
#            runs "${launch[@]}" -np N prog ...
# One thread per rank; OpenMPI refuses root unless told (MPICH ignores it).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export BUILD
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the MPI of the build: any linked binary of it tells
flavour=openmpi
for _bin in "$BUILD/cubist" "$BUILD"/tests/test_*; do
    [ -x "$_bin" ] || continue
    ldd "$_bin" 2>/dev/null | grep -q libmpich && flavour=mpich
    break
done
unset _bin
MPIRUN=${MPIRUN:-mpirun.$flavour}
export MPIRUN
# MPICH (ch4) busy-polls inside every blocking call and, unlike OpenMPI with
# --oversubscribe, does not yield: 8 to 32 ranks on 2 cores run about ten
# times slower (pp2 x 2d4 test_pipeline: 35 s OpenMPI, over 300 s MPICH), so
# the hang-detecting timeouts scale with the flavour: timeout "$(tmo 120)".
TMO_SCALE=${TMO_SCALE:-$([ "$flavour" = mpich ] && echo 10 || echo 1)}
tmo() { echo $(($1 * TMO_SCALE)); }
launch=("$MPIRUN")
if "$MPIRUN" --version 2>&1 | grep -qi "open-\?rte\|open mpi\|open-mpi"; then
    launch+=(--oversubscribe -q)
fi
