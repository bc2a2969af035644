/* Launcher mismatch: a job launched as N tasks whose MPI library does not
 * speak the launcher's protocol (an OpenMPI build under MPICH's hydra or
 * `srun --mpi=pmi2`, an MPICH build under OpenMPI's mpirun or
 * `srun --mpi=pmix`) starts N MPI singletons. Each would train alone and
 * overwrite the others' --log and --save, so cubist refuses: the launcher
 * said N > 1 tasks, MPI says 1. See comm.h. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#ifdef OPEN_MPI
#define BUILT_WITH "OpenMPI"
#define OWN_LAUNCHER "mpirun.openmpi"
#define SRUN_PLUGIN "pmix"
#define OTHER_MPI "mpich"
#else
#define BUILT_WITH "MPICH"
#define OWN_LAUNCHER "mpirun.mpich"
#define SRUN_PLUGIN "pmi2"
#define OTHER_MPI "openmpi"
#endif

/* Environment variables in which launchers state the task count, most
 * specific first. SLURM_NTASKS alone is not enough: a batch script's own
 * shell (one task of an allocation of N) has it too, so it counts only
 * inside a job step (SLURM_STEP_ID set, as srun sets it). */
typedef struct task_var {
    const char *var, *who;
    int slurm;      /* 1: srun's; the fix is srun's --mpi */
    int needs_step; /* 1: counts only inside a step */
} task_var;

static const task_var TASK_VARS[] = {
    {"SLURM_STEP_NUM_TASKS", "srun", 1, 0},
    {"SLURM_NTASKS", "srun", 1, 1},
    {"SLURM_NPROCS", "srun", 1, 1},
    {"OMPI_COMM_WORLD_SIZE", "OpenMPI's mpirun", 0, 0},
    {"PMI_SIZE", "MPICH's mpirun or srun --mpi=pmi2", 0, 0},
    {"MPI_LOCALNRANKS", "MPICH's mpirun", 0, 0},
};

static long env_long(const char *var) {
    const char *v = getenv(var);
    char *end = NULL;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return end && *end == '\0' ? n : 0;
}

int cb_comm_launcher_check(int mpi_size, cb_err *e) {
    const char *ok = getenv("CUBIST_SINGLETON_OK");
    if (mpi_size != 1 || (ok && !strcmp(ok, "1"))) return CB_OK;
    int in_step = getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID");
    for (size_t i = 0; i < sizeof TASK_VARS / sizeof *TASK_VARS; i++) {
        const task_var *t = &TASK_VARS[i];
        long n = env_long(t->var);
        if (n <= 1 || (t->needs_step && !in_step)) continue;
        return cb_fail(e, CB_EINPUT,
                       "launched as %ld tasks by %s (%s=%ld) but MPI sees 1 process, so every "
                       "task would train alone: this cubist is built with " BUILT_WITH
                       "; launch it with `srun --mpi=" SRUN_PLUGIN "` or " OWN_LAUNCHER "%s",
                       n, t->who, t->var, n,
                       t->slurm ? "" : ", or build it for this launcher's MPI (make MPI=" OTHER_MPI ")");
    }
    /* PMIx states no size, but a task of rank >= 1 proves there are more */
    if (env_long("PMIX_RANK") >= 1)
        return cb_fail(e, CB_EINPUT,
                       "launched by a PMIx launcher as task %s but MPI sees 1 process, so every "
                       "task would train alone: this cubist is built with " BUILT_WITH
                       "; launch it with " OWN_LAUNCHER " or `srun --mpi=" SRUN_PLUGIN "`",
                       getenv("PMIX_RANK"));
    return CB_OK;
}
