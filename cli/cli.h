#ifndef CB_CLI_H
#define CB_CLI_H

#include "cubist.h"

int cmd_train(int argc, char **argv);
/* cubist train --model ncf (cli/cmd_train_ncf.c) */
int cmd_train_ncf(int argc, char **argv);
/* NCF's --mlp "256,128,64" into c->mlp, c->n_mlp; CB_EINPUT naming the flag */
int cli_ncf_mlp(const char *s, cb_ncf_config *c, cb_err *e);
/* cubist train --model bert|roberta (cli/cmd_train_bert.c) */
int cmd_train_bert(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plot(int argc, char **argv);
/* plan: the performance model (cli/cmd_plan.c) */
int cmd_plan(int argc, char **argv);
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
/* OpenMPI refuses root without these (containers, CI): set for child jobs. */
void cli_mpirun_allow_root(void);
/* `cubist train --layout auto` (cli/train_auto.c): the flags alone, before
 * MPI; then, on every rank alike, the planner's layout for `world` ranks
 * into o (dp, pp, tp, mode, schedule), its reason printed by rank 0. */
struct cb_train_opts;
int cli_train_check_auto(const struct cb_train_opts *o, const char *layout, cb_err *e);
int cli_train_auto(struct cb_train_opts *o, const char *cluster, int world, int rank, cb_err *e);
/* `cubist train`'s progress line and --log file (cli/train_log.c): the sink
 * cb_train_run hands its step records to on world rank 0. */
#include "train/train.h"
typedef struct cli_train_log {
    const cb_train_opts *o;
    FILE *f;
    int tty;
} cli_train_log;
cb_train_sink cli_train_sink(cli_train_log *l, const cb_train_opts *o);
/* Prints the one-line error; returns the exit status (2 for bad input). */
int cli_fail(const cb_err *e);
#endif
