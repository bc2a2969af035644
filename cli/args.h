/* Flag parsing for the subcommands: a table of --name value flags. */
#ifndef CB_CLI_ARGS_H
#define CB_CLI_ARGS_H

#include <stdio.h>

#include "cubist.h"

typedef enum { ARG_INT, ARG_FLOAT, ARG_DOUBLE, ARG_U64, ARG_STR, ARG_BOOL } arg_type;

typedef struct cli_flag {
    const char *name; /* without the leading -- */
    arg_type type;
    void *dst;
    const char *help;
} cli_flag;

/* Parses argv[0..argc) ("--name value", "--name=value", bare --name for
 * ARG_BOOL). Returns CB_EINPUT on an unknown flag or a bad value; sets
 * *help when --help or -h is given. */
int cli_parse(const char *cmd, int argc, char **argv, const cli_flag *flags, int n, int *help,
              cb_err *e);
void cli_usage(FILE *f, const char *cmd, const char *synopsis, const cli_flag *flags, int n,
               const char *epilog);
/* The graph models' trainers: --grad-accum M is --micro-batches M (one
 * stage accumulates micro-batches); renames the flag in argv. */
void cli_grad_accum_alias(int argc, char **argv);
/* glibc's malloc asks for transparent huge pages on its large blocks, as
 * cubist does for its buffers (src/util/mem.c): PyTorch 1.13 has no switch
 * of its own, and measured here it gains from them as cubist does
 * (docs/bert.md, Benchmark), so the reference runs with them */
#define CLI_TORCH_HUGEPAGES "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"

/* Runs bench/<script> (beside the cubist binary's directory) with args
 * under /usr/bin/python3, in the environment PyTorch benchmarks need, and
 * reads the numbers after "keys[i]": in its JSON output line into
 * values[i] (n of them); CB_ESYS with the script's last line when it fails
 * or values[0] is not positive. */
int cli_torch_bench(const char *script, const char *args, const char *const *keys,
                    double *values, int n, cb_err *e);

struct cb_dist;
/* `cubist bench --quick`'s rows for a GPT of the given depth, width and
 * heads (GPT-2 124M at 12, 768, 12; vocabulary 50304, T 64, B 4, 3 steps a
 * window) on `threads` threads of d's process: PyTorch's tokens/s (the
 * fastest of its programs) and cubist's (the fastest of as many windows):
 * the model benches' --vs-gpt reference ratio. peak: the caller's sgemm
 * peak (cb_peak_gflops), for the step's MFU */
int cli_bench_gpt_quick(struct cb_dist *d, int layers, int d_model, int heads, int threads,
                        double peak, double *cubist_tps, double *torch_tps, cb_err *e);

struct cb_prof;
/* A timed window of `steps` steps over `tokens` tokens a step, begun at
 * t0 (omp_get_wtime), ends: its tokens/s, the first window's into *first
 * (when *tps is still 0), the fastest window's into *tps and its kernel
 * classes, ms per step, from prof into prof_ms (the model benches'
 * matched windows: docs/cli.md) */
void cli_window_end(double tokens, int steps, double t0, const struct cb_prof *prof, double *tps,
                    double *first, double *prof_ms);
#endif
