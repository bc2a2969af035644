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
/* cubist train --model nmt (cli/cmd_train_nmt.c) */
int cmd_train_nmt(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plot(int argc, char **argv);
/* bleu: corpus BLEU of two line files (cli/cmd_bleu.c); cli_bleu_files adds
 * hyp's lines against ref's to b (struct cb_bleu, src/eval/bleu.h). */
int cmd_bleu(int argc, char **argv);
struct cb_bleu;
int cli_bleu_files(const char *hyp, const char *ref, struct cb_bleu *b, cb_err *e);
/* translate: greedy or beam search with an nmt checkpoint (cli/cmd_translate.c) */
int cmd_translate(int argc, char **argv);
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
struct cb_train_opts;
/* `cubist train`'s progress line and --log file (cli/train_log.c): the sink
 * cb_train_run hands its step records to on world rank 0. */
#include "train/train.h"
typedef struct cli_train_log {
    const cb_train_opts *o;
    FILE *f;
    int tty;
} cli_train_log;
cb_train_sink cli_train_sink(cli_train_log *l, const cb_train_opts *o);
/* The graph models' output (NCF, BERT): the task's startup note, `eval
 * step N name value...` and `step N loss L grad_norm G` on stdout; --log:
 * step loss lr grad_norm step_ms, the rate (tokens or rows per second)
 * under the key rate, the evaluation's metrics. */
typedef struct cli_train_lines {
    const cb_train_opts *o;
    const char *rate;
    FILE *f;
} cli_train_lines;
cb_train_sink cli_train_lines_sink(cli_train_lines *l, const cb_train_opts *o, const char *rate);
/* --log's file for a run (resumed >= 0: its lines up to that step kept,
 * then appended to); NULL path: *f = NULL. */
int cli_train_log_open(const char *path, int resumed, FILE **f, cb_err *e);
/* The flags every trainer shares (cli/train_flags.c) into f: their count
 * (at most 40). */
struct cli_flag;
int cli_train_run_flags(cb_train_opts *o, struct cli_flag *f);
/* The optimizer's and the run files' flags (steps, AdamW, init, save,
 * log...), their help showing the defaults already in o. */
int cli_train_opt_flags(cb_train_opts *o, struct cli_flag *f);
/* `cubist train --layout auto` (cli/train_auto.c), every model family:
 * the --layout and --cluster flags (2 rows into f, part of
 * cli_train_run_flags), and the check of the flags alone, before MPI, that
 * installs the planner's hook (o->layout_auto: on every rank alike, after
 * the family resolved its sizes, the planner's layout for the launched
 * ranks into o, its reason printed by rank 0). */
int cli_train_auto_flags(struct cli_flag *f);
int cli_train_family_auto(struct cb_train_opts *o, cb_err *e);
/* `cubist train`'s flags for any family: the distribution flags through
 * the reader every program uses (cb_dist_take, into o), the rest through
 * flags; --help prints both (then 0 with *help set). */
int cli_train_parse(int argc, char **argv, const struct cli_flag *flags, int n, const char *usage,
                    const char *epilog, cb_train_opts *o, int *help, cb_err *e);
/* The rest of a family's `cubist train` once its flags are read (rc: its
 * checks so far): --batch rows over the micro-batches into o->B, the
 * shared checks, the kernels of --precision, then the run (rate: the
 * progress line's throughput key). Returns the exit status. */
int cli_train_family_run(int argc, char **argv, cb_train_opts *o, int batch, const char *rate,
                         int rc, cb_err *e);
/* A failed cb_train_run: its agreed line once, and its exit status. */
void cli_train_exit(const cb_err *e);
/* Prints the one-line error; returns the exit status (2 for bad input). */
int cli_fail(const cb_err *e);
#endif
