/* Launching MPI child jobs from the benchmarks that compare layouts
 * (bench --tp-compare, bench --pipeline): which launcher, and its flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "cli.h"

const char *cli_mpirun_cmd(void) {
    const char *m = getenv("MPIRUN");
#ifdef OPEN_MPI
    return m && *m ? m : "mpirun.openmpi";
#else
    return m && *m ? m : "mpirun.mpich";
#endif
}

const char *cli_mpirun_flags(const char *cmd) {
    char probe[512], line[256];
    snprintf(probe, sizeof probe, "%s --version 2>&1", cmd);
    FILE *p = popen(probe, "r");
    int ompi = 0;
    while (p && fgets(line, sizeof line, p))
        if (strstr(line, "Open MPI") || strstr(line, "OpenRTE") || strstr(line, "open-mpi")) ompi = 1;
    if (p) pclose(p);
    return ompi ? "-q --oversubscribe" : "";
}

void cli_mpirun_allow_root(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}
