/* `cubist plan --calibrate`: this machine's rates into a cluster file.
 * Compute is timed in this process; the collectives by a child job of two
 * ranks (`mpirun -np 2 cubist plan --calibrate-comm`), like the benchmarks
 * launch theirs (cli/launch.c). CUBIST_PLAN_FAKE replaces the timer (tests). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "comm/comm.h"
#include "plan_cli.h"

int plan_cache_path(int threads, char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) snprintf(buf, cap, "%s/cubist/cluster-T%d.json", x, threads);
    else if (h && *h) snprintf(buf, cap, "%s/.cache/cubist/cluster-T%d.json", h, threads);
    else return 0;
    return 1;
}

/* ------------------------------------------------------------ the fake timer */

typedef struct fake {
    double gflops, gbs, attn, knee, alpha, beta, share, bf16;
} fake;

static double f_gemm(void *ctx, int m, int k, int n) {
    const fake *f = ctx;
    double eff = fmin(1, fmin(fmin(m, k), n) / f->knee);
    return 3 * 2.0 * m * k * n / (f->gflops * 1e9 * eff);
}
/* every stream at `share` of the rate alone */
static double f_gemm_shared(void *ctx, int m, int k, int n, int streams) {
    (void)m, (void)k, (void)n, (void)streams;
    return ((fake *)ctx)->share;
}
static double f_memory(void *ctx, int N, int C) { return 3.0 * 72 * C * N / (((fake *)ctx)->gbs * 1e9); }
static double f_memory_shared(void *ctx, int N, int C, int streams) {
    (void)streams;
    return f_memory(ctx, N, C);
}
/* the update: its 40 bytes a parameter at the memory rate */
static double f_update(void *ctx, int n, int streams) {
    (void)streams;
    return 40.0 * n / (((fake *)ctx)->gbs * 1e9);
}
static double f_attention(void *ctx, int B, int T, int C, int NH) {
    const fake *f = ctx;
    (void)NH;
    return 3.0 * 4 * T * C * (double)B * T / (f->gflops * 1e9 * f->attn);
}
/* the weights' reorder: a bf16 copy (2 bytes an element) read and written
 * at the memory rate */
static double f_reorder(void *ctx, int m, int k, int n, double *bytes) {
    (void)m;
    *bytes = 2.0 * k * n;
    return 2 * *bytes / (((fake *)ctx)->gbs * 1e9);
}
/* element-wise kernels: 8 bytes an element at the memory rate */
static double f_elementwise(void *ctx, int kind, int n) {
    (void)kind;
    return 8.0 * n / (((fake *)ctx)->gbs * 1e9);
}
static double f_coll(void *ctx, const char *op, int n) {
    const fake *f = ctx;
    return f->alpha + cb_plan_op_sent(op, 2, n) / f->beta;
}

/* gflops=G,gbs=B,attn=A,knee=K,alpha=S,beta=B[,share=F][,bf16=H] (share
 * 1 unless given; H: the bf16 products' GFLOP/s, G unless given) */
static int parse_fake(const char *s, fake *f, cb_err *e) {
    *f = (fake){0, 0, 0, 0, 0, 0, 1, 0};
    int n = 0, m = 0;
    int got = sscanf(s, "gflops=%lf,gbs=%lf,attn=%lf,knee=%lf,alpha=%lf,beta=%lf%n", &f->gflops,
                     &f->gbs, &f->attn, &f->knee, &f->alpha, &f->beta, &n);
    if (got == 6 && !strncmp(s + n, ",share=", 7)) {
        if (sscanf(s + n, ",share=%lf%n", &f->share, &m) != 1) got = 0;
        n += m;
    }
    if (got == 6 && !strncmp(s + n, ",bf16=", 6)) {
        if (sscanf(s + n, ",bf16=%lf%n", &f->bf16, &m) != 1) got = 0;
        n += m;
    }
    if (got == 6 && s[n]) got = 0;
    if (!f->bf16) f->bf16 = f->gflops;
    if (got != 6 || f->gflops <= 0 || f->gbs <= 0 || f->attn <= 0 || f->knee <= 0 ||
        f->alpha <= 0 || f->beta <= 0 || f->share <= 0 || f->share > 1 || f->bf16 <= 0)
        return cb_fail(e, CB_EINPUT,
                       "CUBIST_PLAN_FAKE='%s': want gflops=G,gbs=B,attn=A,knee=K,"
                       "alpha=S,beta=B[,share=F][,bf16=H], all positive, F at most 1",
                       s);
    return CB_OK;
}

/* ------------------------------------------------------------ measuring */

static int comm_child(int quick, cb_plan_cluster *c, cb_err *e) {
    char cmd[2048], out[4096];
    const char *mr = cli_mpirun_cmd();
    cli_mpirun_allow_root();
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 timeout 300 %s %s -np 2 '%s' plan --calibrate-comm%s",
             mr, cli_mpirun_flags(mr), plan_exe(), quick ? " --quick" : "");
    int st = plan_run(cmd, "plan-comm ", out, sizeof out);
    c->ncoll = 0;
    for (char *l = out; *l && c->ncoll < CB_PLAN_MAXCOLL; l = strchr(l, '\n') + 1) {
        cb_plan_coll *k = &c->coll[c->ncoll];
        if (sscanf(l, "plan-comm %15s %d %lf %lf", k->op, &k->ranks, &k->alpha, &k->beta) == 4) c->ncoll++;
        if (!strchr(l, '\n')) break;
    }
    if (st || c->ncoll != CB_PLAN_NOPS)
        return cb_fail(e, CB_ESYS, "the collective probe `%s` failed (exit %d); set MPIRUN to the "
                       "MPI launcher", cmd, st);
    c->intra = (cb_plan_tier){c->coll[4].beta, c->coll[4].alpha};
    c->inter = c->intra;
    return CB_OK;
}

static void machine(int threads, cb_plan_cluster *c) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
    snprintf(c->name, sizeof c->name, "this machine (calibrated, %d thread%s per rank)", threads,
             threads > 1 ? "s" : "");
    c->nodes = 1, c->threads = threads;
    c->devices_per_node = cores / threads > 0 ? (int)(cores / threads) : 1;
    c->memory_bytes = (double)pages * sysconf(_SC_PAGESIZE) / c->devices_per_node;
}

/* The probe: the fake timer's (CUBIST_PLAN_FAKE, its rates into *f; 2
 * ranks, so that it fakes the collectives too) or this machine's CPU
 * kernels in this process (1 rank: the collectives are comm_child's). */
static int probe_of(fake *f, cb_plan_probe *pr, cb_err *e) {
    const char *fk = getenv("CUBIST_PLAN_FAKE");
    if (!fk) {
        cb_plan_probe_cpu(pr);
        pr->ranks = 1;
        return CB_OK;
    }
    if (parse_fake(fk, f, e)) return e->code;
    /* a last-level cache of 8 MiB, in-cache rate and shared rate = gbs */
    *pr = (cb_plan_probe){f_gemm,  f_memory, f_attention,   f_coll,
                          f,       2,        f_elementwise, f_memory_shared,
                          8 << 20, f_update, f_gemm_shared, NULL};
    return CB_OK;
}

int plan_measure(int threads, int quick, int comm, int bf16, cb_plan_cluster *c, cb_err *e) {
    fake f, fb;
    cb_plan_probe pr;
    memset(c, 0, sizeof *c);
    machine(threads, c);
    if (probe_of(&f, &pr, e)) return e->code;
    int was = omp_get_max_threads(), rc = CB_OK, faked = pr.ctx == &f;
    omp_set_num_threads(threads);
    cb_plan_calibrate(&pr, quick, c);
    if (bf16 && faked) { /* the same fake at the bf16 rate */
        fb = f, fb.gflops = f.bf16, pr.ctx = &fb, pr.reorder = f_reorder;
        cb_plan_calibrate_bf16(&pr, quick, c);
    } else if (bf16) {
        cb_plan_probe_cpu_bf16(&pr);
        pr.ranks = 1;
        if (!pr.ctx)
            rc = cb_fail(e, CB_ESYS, "--precision bf16: oneDNN could not start a CPU engine");
        else
            cb_plan_calibrate_bf16(&pr, quick, c);
    }
    omp_set_num_threads(was);
    return rc ? rc : comm && !faked ? comm_child(quick, c, e) : CB_OK;
}

int plan_measure_shared(int quick, cb_plan_cluster *c, cb_err *e) {
    fake f;
    cb_plan_probe pr;
    memset(c, 0, sizeof *c);
    machine(1, c);
    if (probe_of(&f, &pr, e)) return e->code;
    cb_plan_calibrate_shared(&pr, quick, c);
    return CB_OK;
}

int plan_measure_best(int n, const int *threads, int quick, int comm, int bf16, int runs,
                      plan_round_fn round, void *ctx, cb_plan_cluster *c,
                      double (*spread)[CB_PLAN_NSPREAD], cb_err *e) {
    static cb_plan_cluster r[2][CB_PLAN_MAXRUNS], coll;
    int k = runs < 1 ? 1 : runs > CB_PLAN_MAXRUNS ? CB_PLAN_MAXRUNS : runs, rc = CB_OK;
    n = n < 1 ? 1 : n > 2 ? 2 : n;
    /* the collectives in every run of the first count, each a child job
     * of about a second (the fake timer's are in every run): their best
     * over the runs, as every figure's (2 ranks' all-reduce of 4 MB
     * measured 7.0 and 9.5 GB/s half an hour apart, 2026-11-29) */
    comm = comm && !getenv("CUBIST_PLAN_FAKE");
    for (int i = 0; i < k && !rc; i++) { /* round-robin: every count in the same minutes */
        const cb_plan_cluster *now[2] = {&r[0][i], &r[1][i]};
        if (comm) rc = comm_child(quick, &coll, e);
        for (int t = 0; t < n && !rc; t++) {
            rc = plan_measure(threads[t], quick, 0, bf16, &r[t][i], e);
            if (comm && !t) {
                memcpy(r[t][i].coll, coll.coll, sizeof coll.coll);
                r[t][i].ncoll = coll.ncoll, r[t][i].intra = coll.intra, r[t][i].inter = coll.inter;
            }
        }
        if (!rc && round) rc = round(ctx, i, now, e);
    }
    for (int t = 0; t < n && !rc; t++) cb_plan_cluster_best(r[t], k, NULL, &c[t], spread[t]);
    return rc;
}

/* (max - min) / median of each figure measured (one not measured has none) */
static void print_spread(const cb_plan_cluster *c, const double *spread) {
    static const char *const NAME[CB_PLAN_NSPREAD] = {
        "peak", "memory", "shared", "cache", "attention", "update", "update shared", "GEMM shared"};
    const double val[CB_PLAN_NSPREAD] = {c->peak_flops,           c->mem_bandwidth,
                                         c->mem_bandwidth_shared, c->cache_bandwidth,
                                         c->attn_efficiency,      c->update_bandwidth,
                                         c->update_bandwidth_shared, c->gemm_shared};
    printf("; spread (max - min) / median:");
    for (int k = 0; k < CB_PLAN_NSPREAD; k++)
        if (val[k] > 0) printf("%s %s %.0f%%", k ? "," : "", NAME[k], 100 * spread[k]);
}

void plan_print_spread(const cb_plan_cluster *c, int runs, const double *spread) {
    printf("calibration of %s: best of %d run%s; peak %.1f GFLOP/s, memory-bound %.1f GB/s "
           "alone, ", c->name, runs, runs > 1 ? "s" : "", c->peak_flops / 1e9,
           c->mem_bandwidth / 1e9);
    if (c->devices_per_node < 2)
        printf("one device a node (no shared rate)");
    else if (c->mem_bandwidth_shared > 0)
        printf("%.1f GB/s each with %d streaming", c->mem_bandwidth_shared / 1e9,
               c->devices_per_node);
    else
        printf("with %d streaming not measured (they never ran together: a loaded machine)",
               c->devices_per_node);
    printf(", %.1f GB/s in the %.0f MiB cache; the update %.1f GB/s alone", c->cache_bandwidth / 1e9,
           c->cache_bytes / 1048576, c->update_bandwidth / 1e9);
    if (c->devices_per_node > 1 && c->update_bandwidth_shared > 0)
        printf(", %.1f GB/s each with %d updating", c->update_bandwidth_shared / 1e9,
               c->devices_per_node);
    else if (c->devices_per_node > 1)
        printf(", with %d updating not measured", c->devices_per_node);
    if (c->gemm_shared > 0)
        printf("; GEMMs keep %.0f%% of their rate with %d computing", 100 * c->gemm_shared,
               c->devices_per_node);
    if (runs > 1) print_spread(c, spread);
    printf("\n");
}

int plan_calibrate_comm(int quick, cb_err *e) {
    int ac = 0;
    char **av = NULL;
    if (cb_comm_init(&ac, &av, e)) return e->code;
    omp_set_num_threads(1);
    cb_plan_probe pr;
    cb_plan_cluster c;
    memset(&c, 0, sizeof c);
    cb_plan_probe_cpu(&pr);
    if (pr.ranks >= 2) cb_plan_calibrate_comm(&pr, quick, &c);
    if (cb_comm_world()->rank == 0)
        for (int i = 0; i < c.ncoll; i++)
            printf("plan-comm %s %d %.6g %.6g\n", c.coll[i].op, c.coll[i].ranks, c.coll[i].alpha,
                   c.coll[i].beta);
    cb_comm_finalize();
    return pr.ranks >= 2 ? CB_OK : cb_fail(e, CB_EINPUT, "--calibrate-comm needs >= 2 ranks");
}

static const char SOURCE[] =
    "cubist plan --calibrate on this machine: GEMM rates of cubist's matmul forward + backward on "
    "square shapes (peak = the best, efficiency = rate / peak by arithmetic intensity), the "
    "block's memory-bound kernels, the attention kernel, and MPI collectives of 2 ranks "
    "(alpha, beta fitted from 64 floats and a large vector); each figure the best of 15 windows, "
    "the best of --repeat runs; the memory-bound kernels, the update and the square GEMMs of "
    "256-1024 also with every device running them at once (gemm_shared: the share of the rate "
    "alone kept), the memory-bound kernels on a working set in the last-level cache. One node: the inter-node tier repeats the intra-node one.";

/* the cache file's directory and its parent ($HOME/.cache may not exist yet) */
static void cache_mkdir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *s = strrchr(dir, '/');
    if (!s) return;
    *s = 0;
    char *up = strrchr(dir, '/');
    if (up) *up = 0, mkdir(dir, 0755), *up = '/';
    mkdir(dir, 0755);
}

int plan_local_cluster(int threads, cb_plan_cluster *c, cb_err *e) {
    char path[4096];
    cb_err ignore;
    if (plan_cache_path(threads, path, sizeof path) && access(path, R_OK) == 0 &&
        cb_plan_cluster_read(path, c, &ignore) == CB_OK)
        return CB_OK;
    int rc = plan_measure(threads, 1, 1, 0, c, e);
    if (!rc && plan_cache_path(threads, path, sizeof path)) {
        cache_mkdir(path);
        cb_plan_cluster_write(path, c, SOURCE, &ignore); /* a failed cache costs a re-measure */
    }
    return rc;
}

int plan_calibrate(const plan_opts *o, cb_err *e) {
    char path[4096];
    if (o->out) snprintf(path, sizeof path, "%s", o->out);
    else if (!plan_cache_path(o->threads, path, sizeof path))
        return cb_fail(e, CB_EINPUT, "--calibrate: no --out and neither XDG_CACHE_HOME nor HOME set");
    else cache_mkdir(path);
    cb_plan_cluster c;
    double spread[CB_PLAN_NSPREAD];
    cb_precision p = CB_PREC_FP32;
    int rc = o->precision ? cb_precision_parse(o->precision, &p, e) : CB_OK;
    if (!rc)
        rc = plan_measure_best(1, &o->threads, o->quick, 1, p == CB_PREC_BF16, o->repeat, NULL,
                               NULL, &c, &spread, e);
    if (!rc) rc = cb_plan_cluster_write(path, &c, SOURCE, e);
    if (rc) return rc;
    plan_print_spread(&c, o->repeat, spread);
    printf("calibrated %s: peak %.2f GFLOP/s (GEMM efficiency %.2f at intensity %.3g .. %.2f at "
           "%.3g), memory-bound %.2f GB/s, attention %.2f of peak",
           c.name, c.peak_flops / 1e9, c.eff[0], c.eff_intensity[0], c.eff[c.neff - 1],
           c.eff_intensity[c.neff - 1], c.mem_bandwidth / 1e9, c.attn_efficiency);
    if (c.bf16.peak_flops > 0) {
        cb_plan_cluster b;
        cb_plan_cluster_bf16(&c, &b, e);
        printf("; bf16 peak %.2f GFLOP/s (%.2fx; GEMM efficiency %.2f .. %.2f), attention %.2f "
               "of it",
               b.peak_flops / 1e9, b.peak_flops / c.peak_flops, b.eff[0], b.eff[b.neff - 1],
               b.attn_efficiency);
    }
    for (int i = 0; i < c.ncoll; i++)
        printf("%s %s alpha %.2f us beta %.2f GB/s", i ? ";" : "\n  2 ranks:", c.coll[i].op,
               1e6 * c.coll[i].alpha, c.coll[i].beta / 1e9);
    printf("\nwrote %s\n", path);
    return CB_OK;
}
