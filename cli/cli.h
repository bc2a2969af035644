#ifndef CB_CLI_H
#define CB_CLI_H

#include "cubist.h"

int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plot(int argc, char **argv);
/* bench --allreduce | --dp-step | --embed-grad (cli/bench_dp.c) */
int cmd_bench_dp(int argc, char **argv);
/* bench --tokenizer (cli/bench_tok.c) */
int cmd_bench_tok(int argc, char **argv);
/* <dir of the cubist binary>/../bench/name: the benchmark scripts. */
void cli_bench_file(char *buf, size_t n, const char *name);
/* The MPI launcher for child jobs ($MPIRUN, else the one of the MPI cubist
 * was built with) and the flags it needs to run more ranks than cores
 * (OpenMPI: -q --oversubscribe; MPICH: none). cli/launch.c */
const char *cli_mpirun_cmd(void);
const char *cli_mpirun_flags(const char *cmd);
/* Prints the one-line error; returns the exit status (2 for bad input). */
int cli_fail(const cb_err *e);
#endif
