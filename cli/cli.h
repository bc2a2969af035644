#ifndef CB_CLI_H
#define CB_CLI_H

#include "cubist.h"

int cmd_train(int argc, char **argv);
/* cubist train --model ncf (cli/cmd_train_ncf.c) */
int cmd_train_ncf(int argc, char **argv);
/* NCF's --mlp "256,128,64" into c->mlp, c->n_mlp; CB_EINPUT naming the flag */
int cli_ncf_mlp(const char *s, cb_ncf_config *c, cb_err *e);
int cmd_sample(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* bench --allreduce | --dp-step | --embed-grad (cli/bench_dp.c) */
int cmd_bench_dp(int argc, char **argv);
/* The MPI launcher for child jobs ($MPIRUN, else the one of the MPI cubist
 * was built with) and the flags it needs to run more ranks than cores
 * (OpenMPI: -q --oversubscribe; MPICH: none). cli/launch.c */
const char *cli_mpirun_cmd(void);
const char *cli_mpirun_flags(const char *cmd);
/* Prints the one-line error; returns the exit status (2 for bad input). */
int cli_fail(const cb_err *e);
#endif
