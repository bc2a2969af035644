/* `cubist bench --model ncf`: NeuMF's training step through the graph
 * engine next to the same model and step in PyTorch (bench/torch_ncf.py)
 * in the same invocation: samples/s, model GFLOP/s and MFU. Rows are
 * uniform random (user, item, label); the update is AdamW on every
 * parameter in both. */
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "graph/graph.h"
#include "kernels/peak.h"
#include "util/rng.h"

typedef struct ncf_bench {
    int users, items, factors, batch, steps, threads, no_torch;
    const char *mlp;
} ncf_bench;

/* PyTorch's samples/s and parameter count (bench/torch_ncf.py) */
static int torch_run(const ncf_bench *b, double *sps, double *params, cb_err *e) {
    char args[256];
    snprintf(args, sizeof args, "--users %d --items %d --factors %d --mlp %s --batch %d "
             "--steps %d --threads %d", b->users, b->items, b->factors, b->mlp, b->batch,
             b->steps, b->threads);
    const char *keys[2] = {"samples_per_s", "params"};
    double v[2];
    int rc = cli_torch_bench("torch_ncf.py", args, keys, v, 2, e);
    *sps = v[0], *params = v[1];
    return rc;
}

/* cubist's samples/s over b->steps steps after one untimed step. */
static int cubist_run(const ncf_bench *b, const cb_ncf_config *c, double *sps, size_t *params,
                      cb_err *e) {
    char *argv0[] = {"bench", NULL}, **av = argv0;
    int ac = 1;
    cb_dist *d;
    if (cb_dist_init(&ac, &av, &d, e)) return e->code;
    cb_model *m = cb_model_new(d, b->batch, 1);
    cb_model_declare_ncf(m, c);
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-8f, .steps = b->steps + 1};
    int rc = cb_model_build(m, 1, &opt, e);
    int *ids = malloc(sizeof(int) * 2 * b->batch), *tg = malloc(sizeof(int) * b->batch);
    if (!rc && (!ids || !tg)) rc = cb_fail(e, CB_ENOMEM, "out of memory for a batch");
    cb_rng r;
    cb_rng_seed(&r, 1);
    double t0 = 0;
    for (int s = 0; !rc && s <= b->steps; s++) {
        if (s == 1) t0 = omp_get_wtime();
        for (int k = 0; k < b->batch; k++) {
            ids[2 * k] = (int)cb_rng_below(&r, (uint64_t)b->users);
            ids[2 * k + 1] = (int)cb_rng_below(&r, (uint64_t)b->items);
            tg[k] = (int)cb_rng_below(&r, 2);
        }
        cb_model_train_step(m, ids, tg, s, NULL);
    }
    if (!rc) {
        *sps = b->batch * b->steps / (omp_get_wtime() - t0);
        size_t adam;
        cb_model_sizes(m, params, &adam);
    }
    free(ids), free(tg);
    cb_model_free(m);
    cb_dist_finalize(d);
    return rc;
}

int cmd_bench_ncf(int argc, char **argv) {
    ncf_bench b = {.users = 100000, .items = 10000, .factors = 64, .batch = 2048, .steps = 10,
                   .threads = 0, .mlp = "256,128,64"};
    const char *model = NULL;
    const cli_flag flags[] = {
        {"model", ARG_STR, &model, "ncf"},
        {"users", ARG_INT, &b.users, "rows of the user tables (100000)"},
        {"items", ARG_INT, &b.items, "rows of the item tables (10000)"},
        {"factors", ARG_INT, &b.factors, "GMF factor width (64)"},
        {"mlp", ARG_STR, &b.mlp, "MLP widths (256,128,64)"},
        {"batch", ARG_INT, &b.batch, "rows per step (2048)"},
        {"steps", ARG_INT, &b.steps, "timed steps after one warm-up (10)"},
        {"threads", ARG_INT, &b.threads, "threads of both (default: all cores)"},
        {"no-torch", ARG_BOOL, &b.no_torch, "cubist only"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    cb_ncf_config c = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--model ncf [flags]", flags, n,
                  "NeuMF's training step (forward, backward, AdamW on every parameter) on random\n"
                  "rows, cubist's graph engine and PyTorch (bench/torch_ncf.py) on one process\n"
                  "each, the same thread count. MFU = samples/s x FLOPs per row / the sgemm\n"
                  "peak, measured at the run's start as `cubist bench --peak` does; FLOPs per\n"
                  "row = 6 x (the linears' and the head's multiply-adds), lookups and\n"
                  "element-wise work left out.\n");
        return 0;
    }
    if (!rc && (b.users < 1 || b.items < 1 || b.batch < 1 || b.steps < 1))
        rc = cb_fail(&e, CB_EINPUT, "--users, --items, --batch and --steps must be >= 1");
    c.users = b.users, c.items = b.items, c.factors = b.factors;
    if (!rc) rc = cli_ncf_mlp(b.mlp, &c, &e);
    if (rc) return cli_fail(&e);
    if (b.threads < 1) b.threads = omp_get_max_threads();
    omp_set_num_threads(b.threads);
    double sps = 0, tsps = 0, tparams = 0, peak = cb_peak_fresh(CB_PREC_FP32);
    size_t params = 0;
    if (cubist_run(&b, &c, &sps, &params, &e) || (!b.no_torch && torch_run(&b, &tsps, &tparams, &e)))
        return cli_fail(&e);
    double gf = sps * cb_ncf_flops_per_row(&c) / 1e9;
    printf("ncf: %d users x %d items, factors %d, MLP %s, batch %d, %d threads, %zu parameters\n",
           b.users, b.items, b.factors, b.mlp, b.batch, b.threads, params);
    printf("cubist:  %.0f samples/s, %.2f model GFLOP/s, MFU %.2f%% of %.1f GFLOP/s\n", sps, gf,
           100 * gf / peak, peak);
    if (!b.no_torch)
        printf("PyTorch: %.0f samples/s (%.0f parameters); cubist / PyTorch = %.2f\n", tsps,
               tparams, sps / tsps);
    return 0;
}
