# Sourced by every test script that launches MPI jobs (and by dp_common.sh):
# the one place that decides which launcher runs the build under test.
#   ROOT     the repository root (absolute); the script continues there
#   BUILD    absolute (BUILD=build, BUILD=/tmp/x and BUILD=build-mpich all work)
#   flavour  openmpi or mpich: the MPI library $BUILD's binaries link (ldd)
#   MPIRUN   the launcher: as given (make exports mpirun.$(MPI)), else
#            mpirun.$flavour; exported, so `cubist bench` child jobs use it
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
launch=("$MPIRUN")
if "$MPIRUN" --version 2>&1 | grep -qi "open-\?rte\|open mpi\|open-mpi"; then
    launch+=(--oversubscribe -q)
fi
