/* Calibration: the rates of this machine from a probe (src/plan/probe.c
 * times the real kernels; tests feed a fake). A GEMM's efficiency is kept
 * against its arithmetic intensity 2mkn / 4(mk + kn + mn) FLOP per byte,
 * the one number that tells a skinny GEMM from a square one; collectives
 * as alpha + sent / beta from a small and a large vector. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"

/* iallreduce: the data-parallel gradient buckets' all-reduce as src/dp
 * runs it, in place, MPI_Iallreduce polled with MPI_Test (with cubist's
 * ring setting, src/comm/comm.c, as fast as the blocking one here: 0.66
 * against 0.68 ms at 4 MB, 4.86 against 5.25 at 25 MB) */
const char *const CB_PLAN_OPS[CB_PLAN_NOPS] = {"allreduce", "allgather", "reduce_scatter",
                                               "bcast",     "p2p",       "iallreduce"};

double cb_plan_op_sent(const char *op, int p, double n) {
    double b = 4 * n;
    if (!strcmp(op, "allreduce") || !strcmp(op, "iallreduce")) return 2.0 * (p - 1) / p * b;
    if (!strcmp(op, "p2p")) return b;
    return (p - 1.0) / p * b;
}

/* work / t: a rate; 0 when t is not a time (INFINITY: the probe had no
 * window where the cores were wanted, cb_plan_probe_placement) */
static double per_s(double work, double t) { return t > 0 && isfinite(t) ? work / t : 0; }

/* rate / peak, at most 1; 0 (not measured) without both */
static double eff_of(double rate, double peak) { return peak > 0 ? fmin(1, rate / peak) : 0; }

static double intensity(double m, double k, double n) {
    return 2 * m * k * n / (4 * (m * k + k * n + m * n));
}

/* Sweeps over the shapes: the fastest of each shape's windows over all of
 * them. This machine's speed drifts from outside (a virtual machine here:
 * an ALU-bound loop alone on its core ran at 1.9 to 3.0 GHz from one 50
 * ms window to the next, and one process's sgemm at 76 to 146 GFLOP/s
 * from one second to the next, with nothing else of the machine on the
 * cores; docs/plan.md, Calibration); one sweep times each shape in one
 * stretch of a fraction of a second, so the ratios between shapes, and
 * the peak, took whatever speed that stretch had. */
#define SWEEPS(quick) ((quick) ? 1 : 3)

/* the median of v (n), sorting it in place */
static double med(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every device of the node running the square GEMMs of 256, 512 and 1024
 * at once, one thread each: the share of its rate alone that a device
 * keeps (the probe alternates windows alone and together), the median of
 * the three: what one rank's kernels lose to the other ranks', which the
 * rate alone does not see (docs/plan.md, Compute shared). 0 when never
 * measured together. */
static void calibrate_gemm_shared(const cb_plan_probe *pr, int streams, cb_plan_cluster *c) {
    static const int SIZE[] = {256, 512, 1024};
    double share[3];
    c->gemm_shared = 0;
    for (int i = 0; i < 3; i++) {
        share[i] = pr->gemm_shared(pr->ctx, SIZE[i], SIZE[i], SIZE[i], streams);
        if (share[i] <= 0) return; /* never ran together: not known */
    }
    c->gemm_shared = med(share, 3);
}

static void calibrate_gemm(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    static const int SIZES[] = {16, 32, 64, 128, 256, 512, 1024};
    int n = quick ? 6 : 7;
    double rate[7] = {0}, best = 0;
    for (int sw = 0; sw < SWEEPS(quick); sw++)
        for (int i = 0; i < n; i++) {
            double s = SIZES[i];
            double t = pr->gemm(pr->ctx, SIZES[i], SIZES[i], SIZES[i]);
            rate[i] = fmax(rate[i], per_s(3 * 2 * s * s * s, t));
            if (rate[i] > best) best = rate[i];
        }
    c->peak_flops = best;
    c->neff = n;
    /* A GEMM does not get slower as its intensity grows; a dip is another
     * process taking the core, so the curve keeps its running maximum (a
     * size not measured stays 0, for cb_plan_cluster_best to fill). */
    double run = 0;
    for (int i = 0; i < n; i++) {
        c->eff_intensity[i] = intensity(SIZES[i], SIZES[i], SIZES[i]);
        double e = eff_of(rate[i], best);
        run = fmax(run, e);
        c->eff[i] = e > 0 ? run : 0;
    }
}

/* Shard shapes (tokens of a rank, in/q, out/q of 2-D and 3-D layouts and
 * 1-D's narrow sides), measured where a layout runs them rather than read
 * off the square shapes' curve: on one core here 0.78-1.19 of it, the
 * outputs of 32 columns lowest (docs/plan.md, Calibration). Widths to
 * 1024: the layers' own (C and 4C of C 256 to 512, within a factor 2 of
 * it) ran at 0.91-0.93 of the peak where the curve, by intensity, said
 * about 1 (2026-11-29). */
static void shapes_of(const cb_plan_probe *pr, const int *M, int nm, const int *kn, int nkn,
                      cb_plan_cluster *c) {
    c->nshape = 0;
    for (int a = 0; a < nm; a++)
        for (int b = 0; b < nkn; b++)
            for (int d = 0; d < nkn && c->nshape < CB_PLAN_MAXSHAPE; d++) {
                double *s = c->shape[c->nshape++];
                s[0] = M[a], s[1] = kn[b], s[2] = kn[d];
                double t = pr->gemm(pr->ctx, M[a], kn[b], kn[d]);
                s[3] = eff_of(per_s(3 * 2 * s[0] * s[1] * s[2], t), c->peak_flops);
            }
}

static void calibrate_shapes(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    static const int M[] = {256, 1024}, KN[] = {32, 64, 128, 256, 1024}, QKN[] = {64, 256};
    shapes_of(pr, M, quick ? 1 : 2, quick ? QKN : KN, quick ? 2 : 5, c);
}

/* The block's memory-bound kernels on (N, C): 72 C bytes per token forward
 * (src/plan/model.c: two LayerNorms, GELU over 4C, two residuals), twice
 * that backward. N 16384 x C 128: about 120 MB of buffers, several times
 * a CPU's last-level cache, as a step's activations are (a probe that
 * fits in cache measures the cache: 10% faster on one core here, more on
 * a team of threads that share one memory bus). */
#define MEM_N 16384
#define MEM_C 128
#define MEM_BYTES (3.0 * 72 * MEM_C * MEM_N)
/* the update, 40 bytes a parameter (src/plan/probe.c), on 8M parameters
 * (128 MB of p, g, m, v; --quick 4M, 64 MB, still twice the cache here) */
#define UPDATE_N(quick) ((quick) ? 1 << 22 : 1 << 23)

static void calibrate_memory(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    double t1 = INFINITY;
    for (int sw = 0; sw < SWEEPS(quick); sw++) t1 = fmin(t1, pr->memory(pr->ctx, MEM_N, MEM_C));
    c->mem_bandwidth = per_s(MEM_BYTES, t1);
    if (pr->update)
        c->update_bandwidth =
            per_s(40.0 * UPDATE_N(quick), pr->update(pr->ctx, UPDATE_N(quick), 1));
    /* one device a node, or not measured together: the rates alone */
    c->mem_bandwidth_shared = c->mem_bandwidth, c->update_bandwidth_shared = c->update_bandwidth;
    /* in cache: buffers (60 N C bytes) of a quarter of the last level */
    if (pr->cache_bytes <= 0) return;
    int n = 64, C = MEM_C;
    while (60.0 * 2 * n * C <= pr->cache_bytes / 4 && n < MEM_N) n *= 2;
    double tc = INFINITY;
    for (int sw = 0; sw < SWEEPS(quick); sw++) tc = fmin(tc, pr->memory(pr->ctx, n, C));
    c->cache_bytes = pr->cache_bytes;
    c->cache_bandwidth = per_s(3.0 * 72 * C * n, tc);
}

/* the seconds of a probe's run together as a rate of `work`: 0 when it
 * never ran together (1e30) */
static double together_rate(double work, double t) { return t < 1e29 ? per_s(work, t) : 0; }

void cb_plan_calibrate_shared(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int streams = c->devices_per_node;
    if (quick || streams < 2 || c->threads != 1) return;
    if (pr->gemm_shared) calibrate_gemm_shared(pr, streams, c);
    if (pr->memory_shared)
        c->mem_bandwidth_shared =
            together_rate(MEM_BYTES, pr->memory_shared(pr->ctx, MEM_N, MEM_C, streams));
    if (pr->update)
        c->update_bandwidth_shared =
            together_rate(40.0 * UPDATE_N(quick), pr->update(pr->ctx, UPDATE_N(quick), streams));
}

/* Attention at its FLOP count (4 T C per token forward, scores and
 * context, no causal discount), forward + backward = 3x, by head size:
 * the kernel's inner loops run over the head's C / NH channels, so a
 * small head runs slower (1 thread here: 0.55 of peak at 32 against 0.65
 * at 64). 4096 tokens (B 32 at T 128): probabilities of tens of MB, out
 * of the caches like the step's (a small batch kept in cache runs 10-20%
 * faster than the model sees it). attn_efficiency is the curve's value at
 * head size 64. Then by sequence length at head size 64, T 64 to 1024 on
 * the same 4096 tokens: the kernels change with T (the bf16 table's
 * causal attention runs whole, in blocks, or fused; the counted FLOPs
 * keep every key, so the causal half skipped is in the rate). */
static void calibrate_attention(const cb_plan_probe *pr, int quick, int T, cb_plan_cluster *c) {
    static const int SEQ[] = {64, 128, 256, 512, 1024}, QSEQ[] = {64, 256};
    const int *seq = quick ? QSEQ : SEQ;
    int tokens = quick ? 2048 : 4096, B = tokens / T, C = 256, ns = quick ? 2 : 5;
    double flops = 3.0 * 4 * T * C * (double)B * T;
    double t[4] = {INFINITY, INFINITY, INFINITY, INFINITY},
           ts[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
    for (int sw = 0; sw < SWEEPS(quick); sw++) {
        for (int i = 0, hs = 16; i < 4; i++, hs *= 2)
            t[i] = fmin(t[i], pr->attention(pr->ctx, B, T, C, C / hs));
        /* by sequence length at head size 64, the same tokens (B T) each */
        for (int i = 0; i < ns; i++)
            ts[i] = fmin(ts[i], pr->attention(pr->ctx, tokens / seq[i], seq[i], C, 4));
    }
    c->natt = 4;
    for (int i = 0, hs = 16; i < 4; i++, hs *= 2)
        c->att_hs[i] = hs, c->att_eff[i] = eff_of(per_s(flops, t[i]), c->peak_flops);
    c->attn_efficiency = c->att_eff[2];
    c->nseq = ns;
    for (int i = 0; i < ns; i++) {
        double f = 3.0 * 4 * seq[i] * C * (double)(tokens / seq[i]) * seq[i];
        c->att_seq[i] = seq[i], c->att_seq_eff[i] = eff_of(per_s(f, ts[i]), c->peak_flops);
    }
}

/* alpha, beta from a small (64 floats) and a large vector. */
void cb_plan_calibrate_comm(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int small = 64, large = quick ? 1 << 18 : 1 << 20, p = pr->ranks;
    c->ncoll = 0;
    for (int i = 0; i < CB_PLAN_NOPS; i++) {
        const char *op = CB_PLAN_OPS[i];
        double t1 = pr->coll(pr->ctx, op, small), t2 = pr->coll(pr->ctx, op, large);
        double s1 = cb_plan_op_sent(op, p, small), s2 = cb_plan_op_sent(op, p, large);
        double beta = t2 > t1 ? (s2 - s1) / (t2 - t1) : s2 / t2;
        cb_plan_coll *k = &c->coll[c->ncoll++];
        snprintf(k->op, sizeof k->op, "%s", op);
        k->ranks = p, k->beta = beta, k->alpha = fmax(t1 - s1 / beta, 1e-9);
    }
    /* The tier of a node's own links: the point-to-point fit. */
    c->intra = (cb_plan_tier){c->coll[4].beta, c->coll[4].alpha};
    c->inter = c->intra;
}

/* The exact GELU (erf) and dropout (a counter-based hash per element):
 * per element, forward + backward, on 4M elements (out of cache). Their
 * time follows their arithmetic, not their bytes (docs/plan.md). */
static void calibrate_elementwise(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    int n = quick ? 1 << 20 : 1 << 22;
    for (int k = 0; k < CB_PLAN_NEW && pr->elementwise; k++) {
        double r = per_s(n, pr->elementwise(pr->ctx, k, n)); /* elements a second */
        c->ew_s[k] = r > 0 ? 1 / r : 0;
    }
}

/* The best over the runs that measured it (non-zero: a figure a run
 * could not measure is 0) of the double at byte offset `off` of a
 * cluster: the highest of a rate (hi), the lowest of a time; when no run
 * measured it, fb's (0 without fb). spread: (max - min) / median. */
static double best_at(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb, size_t off,
                      int hi, double *spread) {
    double v[CB_PLAN_MAXRUNS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        v[k] = *(const double *)((const char *)&runs[i] + off);
        k += v[k] != 0;
    }
    double m = k ? med(v, k) : 0; /* sorts v */
    if (spread) *spread = m > 0 ? (v[k - 1] - v[0]) / m : 0;
    if (!k) return fb ? *(const double *)((const char *)fb + off) : 0;
    return hi ? v[k - 1] : v[0];
}

/* the highest of the runs' rates (FLOP/s), each the efficiency at byte
 * offset off times its own peak; fb's when no run measured it */
static double best_flops(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb,
                         size_t off) {
    double b = 0;
    for (int r = 0; r < n; r++)
        b = fmax(b, *(const double *)((const char *)&runs[r] + off) * runs[r].peak_flops);
    if (b == 0 && fb) b = *(const double *)((const char *)fb + off) * fb->peak_flops;
    return b;
}

/* whether a and b's curves have the same points (GEMM sizes and shapes,
 * head sizes, sequence lengths): a fallback's points stand in for a
 * run's only then */
static int same_points(const cb_plan_cluster *a, const cb_plan_cluster *b) {
    int same = a->neff == b->neff && a->nshape == b->nshape && a->natt == b->natt &&
               a->nseq == b->nseq;
    for (int i = 0; same && i < a->neff; i++) same = a->eff_intensity[i] == b->eff_intensity[i];
    for (int i = 0; same && i < a->nshape; i++)
        same = !memcmp(a->shape[i], b->shape[i], 3 * sizeof(double));
    for (int i = 0; same && i < a->natt; i++) same = a->att_hs[i] == b->att_hs[i];
    for (int i = 0; same && i < a->nseq; i++) same = a->att_seq[i] == b->att_seq[i];
    return same;
}

/* The runs' rate over fb's at each point of a curve (the double at off,
 * then every stride doubles, np points; efficiency times its cluster's
 * peak) that both measured, into r; returns how many. */
static int curve_ratios(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb, size_t off,
                        int stride, int np, double *r) {
    int k = 0;
    for (int i = 0; i < np; i++) {
        size_t o = off + sizeof(double) * stride * i;
        double f = *(const double *)((const char *)fb + o) * fb->peak_flops;
        double b = best_flops(runs, n, NULL, o);
        if (b > 0 && f > 0) r[k++] = b / f;
    }
    return k;
}

/* fb as a stand-in for what the runs did not measure: each of its
 * figures times the runs' ratio to it on the figures they did measure,
 * the median (a curve's points by that curve's own ratio when the runs
 * measured any of them), so that a state's calibration that timed only
 * part of its figures in that state fills the rest at the state's speed
 * rather than the fallback's: two threads of a small model ran 1.5x
 * slower with the cores apart (docs/plan.md, Validation). Curves only
 * with `curves` (fb has the runs' points). */
static void scaled_fallback(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb,
                            int curves, cb_plan_cluster *s) {
    static const size_t RATE[] = {
        offsetof(cb_plan_cluster, mem_bandwidth), offsetof(cb_plan_cluster, mem_bandwidth_shared),
        offsetof(cb_plan_cluster, cache_bandwidth), offsetof(cb_plan_cluster, update_bandwidth),
        offsetof(cb_plan_cluster, update_bandwidth_shared)};
    enum { NR = 5, NC = 4, MAXP = CB_PLAN_MAXSHAPE };
    const size_t coff[NC] = {offsetof(cb_plan_cluster, eff), offsetof(cb_plan_cluster, shape[0][3]),
                             offsetof(cb_plan_cluster, att_eff),
                             offsetof(cb_plan_cluster, att_seq_eff)};
    const int cstride[NC] = {1, 4, 1, 1}, cnp[NC] = {fb->neff, fb->nshape, fb->natt, fb->nseq};
    double all[NR + CB_PLAN_NEW + NC * MAXP], cr[NC][MAXP];
    int na = 0, nc[NC] = {0};
    *s = *fb;
    for (int i = 0; i < NR; i++) {
        double b = best_at(runs, n, NULL, RATE[i], 1, NULL);
        double f = *(const double *)((const char *)fb + RATE[i]);
        if (b > 0 && f > 0) all[na++] = b / f;
    }
    for (int k = 0; k < CB_PLAN_NEW; k++) { /* times: the inverse */
        double b = best_at(runs, n, NULL, offsetof(cb_plan_cluster, ew_s) + sizeof(double) * k, 0,
                           NULL);
        if (b > 0 && fb->ew_s[k] > 0) all[na++] = fb->ew_s[k] / b;
    }
    for (int c = 0; curves && c < NC; c++) {
        nc[c] = curve_ratios(runs, n, fb, coff[c], cstride[c], cnp[c], cr[c]);
        memcpy(all + na, cr[c], sizeof(double) * nc[c]), na += nc[c];
    }
    double g = na ? med(all, na) : 1;
    for (int i = 0; i < NR; i++) *(double *)((char *)s + RATE[i]) *= g;
    for (int k = 0; k < CB_PLAN_NEW; k++) s->ew_s[k] /= g;
    for (int c = 0; curves && c < NC; c++) {
        double f = nc[c] ? med(cr[c], nc[c]) : g;
        for (int i = 0; i < cnp[c]; i++)
            *(double *)((char *)s + coff[c] + sizeof(double) * cstride[c] * i) *= f;
    }
}

void cb_plan_cluster_best(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb,
                          cb_plan_cluster *out, double spread[CB_PLAN_NSPREAD]) {
    cb_plan_cluster scaled; /* fb at the runs' speed */
    const cb_plan_cluster *fc = NULL;
    if (n > CB_PLAN_MAXRUNS) n = CB_PLAN_MAXRUNS;
    if (fb) {
        int curves = same_points(fb, &runs[0]);
        scaled_fallback(runs, n, fb, curves, &scaled);
        fb = &scaled, fc = curves ? fb : NULL;
    }
#define HI(f, s) (out->f = best_at(runs, n, fb, offsetof(cb_plan_cluster, f), 1, s))
#define LO(f) (out->f = best_at(runs, n, fb, offsetof(cb_plan_cluster, f), 0, NULL))
#define FLOPS(f, i) best_flops(runs, n, fc, offsetof(cb_plan_cluster, f) + sizeof(double) * (i))
    *out = runs[0];
    for (int k = 0; k < CB_PLAN_NSPREAD; k++) spread[k] = 0;
    HI(peak_flops, &spread[CB_PLAN_SPREAD_PEAK]);
    /* the peak: also of a GEMM size no run measured, whose rate is fb's */
    for (int i = 0; i < out->neff; i++) out->peak_flops = fmax(out->peak_flops, FLOPS(eff, i));
    HI(mem_bandwidth, &spread[CB_PLAN_SPREAD_MEM]);
    HI(mem_bandwidth_shared, &spread[CB_PLAN_SPREAD_SHARED]);
    HI(cache_bandwidth, &spread[CB_PLAN_SPREAD_CACHE]);
    HI(update_bandwidth, &spread[CB_PLAN_SPREAD_UPDATE]);
    HI(update_bandwidth_shared, &spread[CB_PLAN_SPREAD_UPDATE_SHARED]);
    HI(attn_efficiency, &spread[CB_PLAN_SPREAD_ATTN]);
    HI(gemm_shared, &spread[CB_PLAN_SPREAD_GEMM_SHARED]);
    HI(reorder_bandwidth, NULL);
    /* efficiencies: the best rate over the best peak (each run's are of
     * its own peak), the curve kept non-decreasing */
#define EFF(f, i) eff_of(FLOPS(f, i), out->peak_flops)
    for (int i = 0; i < out->neff; i++) out->eff[i] = fmax(EFF(eff, i), i ? out->eff[i - 1] : 0);
    for (int i = 0; i < out->nshape; i++) out->shape[i][3] = EFF(shape, 4 * i + 3);
    for (int i = 0; i < out->natt; i++) out->att_eff[i] = EFF(att_eff, i);
    if (out->natt > 2) out->attn_efficiency = out->att_eff[2];
    for (int i = 0; i < out->nseq; i++) out->att_seq_eff[i] = EFF(att_seq_eff, i);
    for (int k = 0; k < CB_PLAN_NEW; k++) LO(ew_s[k]);
    if (runs[0].bf16.neff > 0) { /* the same, of the bf16 rates (a view's are not) */
        static cb_plan_cluster view[CB_PLAN_MAXRUNS], fbv;
        cb_plan_cluster m;
        double sp[CB_PLAN_NSPREAD];
        for (int r = 0; r < n; r++) cb_plan_cluster_bf16_view(&runs[r], &view[r]);
        if (fb) cb_plan_cluster_bf16_view(fb, &fbv);
        cb_plan_cluster_best(view, n, fb ? &fbv : NULL, &m, sp);
        cb_plan_cluster_set_bf16(out, &m);
    }
    for (int i = 0; i < out->ncoll; i++) LO(coll[i].alpha), HI(coll[i].beta, NULL);
    HI(intra.bandwidth, NULL), LO(intra.latency);
    HI(inter.bandwidth, NULL), LO(inter.latency);
#undef HI
#undef LO
#undef FLOPS
#undef EFF
}

void cb_plan_calibrate(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    calibrate_gemm(pr, quick, c);
    calibrate_shapes(pr, quick, c);
    calibrate_memory(pr, quick, c);
    cb_plan_calibrate_shared(pr, quick, c);
    calibrate_attention(pr, quick, 128, c);
    calibrate_elementwise(pr, quick, c);
    if (pr->ranks >= 2) cb_plan_calibrate_comm(pr, quick, c);
}

/* The bf16 rates: the GEMM sweep, shapes and attention, as above, on a
 * probe of the bf16 table, into c->bf16. The shapes are the layers' own
 * (rows 256 to 4096, widths 64 to 1024): oneDNN's bf16 products fall
 * further below the square GEMMs' curve on them than OpenBLAS's (a
 * 1024-row step of widths 256 and 768 ran its GEMMs at half the bf16
 * peak where the curve said 0.85-1; docs/plan.md). Attention at T 512,
 * where the bf16 table's causal attention runs fused, keeping only each
 * query block's keys, as it does at GPT-2's T 1024 (at T 128 it runs
 * blocked: another kernel); the FLOPs counted are still all T^2. */
void cb_plan_calibrate_bf16(const cb_plan_probe *pr, int quick, cb_plan_cluster *c) {
    static const int M[] = {256, 1024, 4096}, KN[] = {64, 256, 1024};
    cb_plan_cluster t = *c;
    calibrate_gemm(pr, quick, &t);
    shapes_of(pr, quick ? M + 1 : M, quick ? 1 : 3, KN, quick ? 2 : 3, &t);
    calibrate_attention(pr, quick, 512, &t);
    /* the weights' reorder after an update (predict.c, reorder_s): GPT-2's
     * fc weight (768 x 3072) read by products of 1024 rows */
    double bytes = 0, s = pr->reorder ? pr->reorder(pr->ctx, 1024, 768, 3072, &bytes) : 0;
    t.reorder_bandwidth = bytes > 0 && s > 0 && s < 1e29 ? 2 * bytes / s : 0;
    cb_plan_cluster_set_bf16(c, &t);
}
