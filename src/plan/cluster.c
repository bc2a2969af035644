/* Cluster files: plain JSON, one device kind per file (docs/plan.md).
 *   {"name", "nodes", "devices_per_node", "threads",
 *    "device": {"peak_flops", "memory_bytes", "mem_bandwidth", "attn_efficiency",
 *               "gemm_efficiency": [[intensity, efficiency], ...],
 *               "attn_head_efficiency": [[head size, efficiency], ...] (optional),
 *               "attn_seq_efficiency": [[T, efficiency], ...] (optional),
 *               "bf16": {the same rates for bf16 products} (optional)},
 *    "links": {"intra": {"bandwidth", "latency"}, "inter": {...}},
 *    "collectives": [{"op", "ranks", "alpha", "beta"}, ...]   (optional),
 *    "sources": {"field": "where the figure comes from", ...}}
 * Every number must be present and positive: a planner fed a zero bandwidth
 * predicts nonsense silently, so the reader names the field instead. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/fileio.h"
#include "formats/json.h"
#include "plan/plan.h"

typedef struct reader {
    const char *path;
    cb_err *e;
} reader;

static int bad(const reader *r, const char *field, const char *what) {
    return cb_fail(r->e, CB_EINPUT, "cluster file %s: field '%s' %s; give it a positive number "
                   "(see docs/plan.md, cluster files)", r->path, field, what);
}

/* v.key as a positive number into *out; `field` names it in errors. */
static int num(const reader *r, const json_val *v, const char *key, const char *field,
               double *out) {
    const json_val *x = json_get(v, key);
    if (!x) return bad(r, field, "is missing");
    if (x->type != JSON_INT && x->type != JSON_NUM) return bad(r, field, "is not a number");
    if (!(x->d > 0) || !isfinite(x->d)) return bad(r, field, x->d < 0 ? "is negative" : "is not positive");
    *out = x->d;
    return CB_OK;
}

static int inum(const reader *r, const json_val *v, const char *key, const char *field, int *out) {
    double d = 0;
    int rc = num(r, v, key, field, &d);
    if (!rc && (d != floor(d) || d > 1e9)) return bad(r, field, "is not a whole number");
    if (!rc) *out = (int)d;
    return rc;
}

static const json_val *obj(const reader *r, const json_val *v, const char *key, int *rc) {
    const json_val *x = json_get(v, key);
    if (*rc) return NULL;
    if (!x || x->type != JSON_OBJ) {
        *rc = cb_fail(r->e, CB_EINPUT, "cluster file %s: field '%s' is missing or not an object; "
                      "see docs/plan.md, cluster files", r->path, key);
        return NULL;
    }
    return x;
}

static int read_tier(const reader *r, const json_val *links, const char *name, cb_plan_tier *t) {
    int rc = CB_OK;
    const json_val *v = obj(r, links, name, &rc);
    char f[64];
    snprintf(f, sizeof f, "links.%s.bandwidth", name);
    if (!rc) rc = num(r, v, "bandwidth", f, &t->bandwidth);
    snprintf(f, sizeof f, "links.%s.latency", name);
    if (!rc) rc = num(r, v, "latency", f, &t->latency);
    return rc;
}

/* device.<key>: [[x, efficiency], ...], x increasing, efficiencies in (0, 1] */
static int read_curve(const reader *r, const json_val *dev, const char *pre, const char *key,
                      double *x, double *y, int *n) {
    char f[64];
    snprintf(f, sizeof f, "%s.%s", pre, key);
    const json_val *a = json_get(dev, key);
    if (!a) return bad(r, f, "is missing");
    if (a->type != JSON_ARR || a->n < 1 || a->n > CB_PLAN_MAXEFF)
        return bad(r, f, "is not a list of 1 to 16 [x, efficiency] pairs");
    for (int i = 0; i < a->n; i++) {
        const json_val *p = &a->v[i];
        int ok = p->type == JSON_ARR && p->n == 2 && p->v[0].type >= JSON_INT &&
                 p->v[0].type <= JSON_NUM && p->v[1].type >= JSON_INT && p->v[1].type <= JSON_NUM;
        if (!ok) return bad(r, f, "has an entry that is not [x, efficiency]");
        x[i] = p->v[0].d, y[i] = p->v[1].d;
        if (!(x[i] > 0) || !(y[i] > 0) || y[i] > 1 || (i && x[i] <= x[i - 1]))
            return bad(r, f, "needs x > 0 increasing and efficiencies in (0, 1]");
    }
    *n = a->n;
    return CB_OK;
}

/* device.gemm_shapes: [[m, k, n, efficiency], ...], sizes > 0, efficiencies in (0, 1] */
static int read_shapes(const reader *r, const json_val *dev, const char *pre, cb_plan_cluster *c) {
    char f[64];
    snprintf(f, sizeof f, "%s.gemm_shapes", pre);
    const json_val *a = json_get(dev, "gemm_shapes");
    if (a->type != JSON_ARR || a->n > CB_PLAN_MAXSHAPE)
        return bad(r, f, "is not a list of at most 64 [m, k, n, efficiency]");
    for (int i = 0; i < a->n; i++) {
        const json_val *p = &a->v[i];
        int ok = p->type == JSON_ARR && p->n == 4;
        for (int d = 0; ok && d < 4; d++) {
            ok = p->v[d].type >= JSON_INT && p->v[d].type <= JSON_NUM && p->v[d].d > 0;
            c->shape[i][d] = ok ? p->v[d].d : 0;
        }
        if (!ok || c->shape[i][3] > 1)
            return bad(r, f, "needs entries [m, k, n, efficiency], sizes > 0, efficiency in (0, 1]");
    }
    c->nshape = a->n;
    return CB_OK;
}

/* The compute rates of object dev (pre: its name in errors): peak,
 * attention, the GEMM curve, and optionally the GEMM shapes and
 * attention by head size and by sequence length (calibrated files) */
static int read_rates(const reader *r, const json_val *dev, const char *pre, cb_plan_cluster *c) {
    char f[64];
    snprintf(f, sizeof f, "%s.peak_flops", pre);
    int rc = num(r, dev, "peak_flops", f, &c->peak_flops);
    snprintf(f, sizeof f, "%s.attn_efficiency", pre);
    if (!rc) rc = num(r, dev, "attn_efficiency", f, &c->attn_efficiency);
    if (!rc) rc = read_curve(r, dev, pre, "gemm_efficiency", c->eff_intensity, c->eff, &c->neff);
    if (!rc && json_get(dev, "gemm_shapes")) rc = read_shapes(r, dev, pre, c);
    if (!rc && json_get(dev, "attn_head_efficiency"))
        rc = read_curve(r, dev, pre, "attn_head_efficiency", c->att_hs, c->att_eff, &c->natt);
    if (!rc && json_get(dev, "attn_seq_efficiency"))
        rc = read_curve(r, dev, pre, "attn_seq_efficiency", c->att_seq, c->att_seq_eff, &c->nseq);
    return rc;
}

/* the compute rates of c (peak, GEMM curve and shapes, attention by head
 * size and sequence length): of a cluster into b, and back */
/* clang-format off */
#define RATES(X) X(peak_flops) X(attn_efficiency) X(neff) X(eff_intensity) X(eff) X(nshape) \
                 X(shape) X(natt) X(att_hs) X(att_eff) X(nseq) X(att_seq) X(att_seq_eff) \
                 X(reorder_bandwidth)
/* clang-format on */
static void rates_of(const cb_plan_cluster *c, cb_plan_bf16_rates *b) {
#define COPY(f) memcpy(&b->f, &c->f, sizeof b->f);
    RATES(COPY)
#undef COPY
}

static void rates_into(cb_plan_cluster *c, const cb_plan_bf16_rates *b) {
#define COPY(f) memcpy(&c->f, &b->f, sizeof c->f);
    RATES(COPY)
#undef COPY
}

/* optional: device.bf16, the same rates for bf16 products */
static int read_bf16(const reader *r, const json_val *dev, cb_plan_cluster *c) {
    const json_val *b = json_get(dev, "bf16");
    if (!b) return CB_OK;
    if (b->type != JSON_OBJ)
        return cb_fail(r->e, CB_EINPUT,
                       "cluster file %s: field 'device.bf16' is not an object; "
                       "see docs/plan.md, cluster files",
                       r->path);
    cb_plan_cluster t;
    memset(&t, 0, sizeof t);
    int rc = read_rates(r, b, "device.bf16", &t);
    if (!rc && json_get(b, "reorder_bandwidth"))
        rc = num(r, b, "reorder_bandwidth", "device.bf16.reorder_bandwidth", &t.reorder_bandwidth);
    if (!rc) rates_of(&t, &c->bf16);
    return rc;
}

void cb_plan_cluster_set_bf16(cb_plan_cluster *c, const cb_plan_cluster *rates) {
    rates_of(rates, &c->bf16);
}

int cb_plan_cluster_bf16(const cb_plan_cluster *c, cb_plan_cluster *out, cb_err *e) {
    if (!(c->bf16.peak_flops > 0))
        return cb_fail(e, CB_EINPUT,
                       "--precision bf16: cluster '%s' has no bf16 rates (device.bf16); "
                       "calibrate them with `cubist plan --calibrate --precision bf16`, or give "
                       "the section (docs/plan.md, cluster files)",
                       c->name);
    if (out) cb_plan_cluster_bf16_view(c, out);
    return CB_OK;
}

void cb_plan_cluster_bf16_view(const cb_plan_cluster *c, cb_plan_cluster *out) {
    *out = *c, rates_into(out, &c->bf16);
    memset(&out->bf16, 0, sizeof out->bf16);
}

static int read_colls(const reader *r, const json_val *root, cb_plan_cluster *c) {
    const json_val *a = json_get(root, "collectives");
    if (!a) return CB_OK;
    if (a->type != JSON_ARR || a->n > CB_PLAN_MAXCOLL)
        return bad(r, "collectives", "is not a list of at most 16 entries");
    int rc = CB_OK;
    for (int i = 0; i < a->n && !rc; i++) {
        const json_val *v = &a->v[i], *op = json_get(v, "op");
        cb_plan_coll *k = &c->coll[i];
        if (!op || op->type != JSON_STR || op->len >= sizeof k->op)
            return bad(r, "collectives[].op", "is missing or not a short name");
        snprintf(k->op, sizeof k->op, "%s", op->s);
        rc = inum(r, v, "ranks", "collectives[].ranks", &k->ranks);
        if (!rc) rc = num(r, v, "alpha", "collectives[].alpha", &k->alpha);
        if (!rc) rc = num(r, v, "beta", "collectives[].beta", &k->beta);
    }
    c->ncoll = a->n;
    return rc;
}

static int read_root(const reader *r, const json_val *v, cb_plan_cluster *c) {
    const json_val *name = json_get(v, "name");
    if (v->type != JSON_OBJ) return cb_fail(r->e, CB_EINPUT, "cluster file %s: not a JSON object; "
                                            "see docs/plan.md, cluster files", r->path);
    if (!name || name->type != JSON_STR) return bad(r, "name", "is missing (a string)");
    snprintf(c->name, sizeof c->name, "%s", name->s);
    int rc = inum(r, v, "nodes", "nodes", &c->nodes);
    if (!rc) rc = inum(r, v, "devices_per_node", "devices_per_node", &c->devices_per_node);
    if (!rc) rc = inum(r, v, "threads", "threads", &c->threads);
    const json_val *dev = obj(r, v, "device", &rc);
    if (!rc) rc = num(r, dev, "memory_bytes", "device.memory_bytes", &c->memory_bytes);
    if (!rc) rc = num(r, dev, "mem_bandwidth", "device.mem_bandwidth", &c->mem_bandwidth);
    if (!rc) rc = read_rates(r, dev, "device", c);
    if (!rc) rc = read_bf16(r, dev, c);
    /* optional (calibrated files): the compute-bound element-wise kernels,
     * the shared bandwidth, the last-level cache and its rate, the update's
     * rates, the GEMM's shared share */
    enum { NOPT = CB_PLAN_NEW + 6 };
    const char *const opt[NOPT] = {"gelu_erf_s",      "dropout_s",        "mem_bandwidth_shared",
                                   "cache_bytes",     "cache_bandwidth",  "update_bandwidth",
                                   "update_bandwidth_shared", "gemm_shared"};
    const char *const optf[NOPT] = {"device.gelu_erf_s",       "device.dropout_s",
                                    "device.mem_bandwidth_shared", "device.cache_bytes",
                                    "device.cache_bandwidth",  "device.update_bandwidth",
                                    "device.update_bandwidth_shared", "device.gemm_shared"};
    double *at[NOPT] = {&c->ew_s[0],          &c->ew_s[1],       &c->mem_bandwidth_shared,
                        &c->cache_bytes,      &c->cache_bandwidth, &c->update_bandwidth,
                        &c->update_bandwidth_shared, &c->gemm_shared};
    for (int k = 0; k < NOPT && !rc; k++)
        if (json_get(dev, opt[k])) rc = num(r, dev, opt[k], optf[k], at[k]);
    if (!rc && c->gemm_shared > 1)
        rc = cb_fail(r->e, CB_EINPUT, "cluster file %s: field 'device.gemm_shared' is %g; give it "
                     "the share of the rate alone, above 0 and at most 1 (see docs/plan.md, "
                     "cluster files)", r->path, c->gemm_shared);
    if (!rc && (c->cache_bytes > 0) != (c->cache_bandwidth > 0))
        rc = bad(r, c->cache_bytes > 0 ? "device.cache_bandwidth" : "device.cache_bytes",
                 "is missing (cache_bytes and cache_bandwidth go together)");
    const json_val *links = obj(r, v, "links", &rc);
    if (!rc) rc = read_tier(r, links, "intra", &c->intra);
    if (!rc) rc = read_tier(r, links, "inter", &c->inter);
    if (!rc) rc = read_colls(r, v, c);
    return rc;
}

int cb_plan_cluster_parse(const char *text, size_t len, const char *path, cb_plan_cluster *c,
                          cb_err *e) {
    json_val v;
    json_error je;
    memset(c, 0, sizeof *c);
    if (json_parse(text, len, &v, &je))
        return cb_fail(e, je.nomem ? CB_ENOMEM : CB_EINPUT, "cluster file %s: %s at byte %zu; "
                       "fix the JSON", path, je.msg, je.off);
    reader r = {path, e};
    int rc = read_root(&r, &v, c);
    json_free(&v);
    return rc;
}

int cb_plan_cluster_read(const char *path, cb_plan_cluster *c, cb_err *e) {
    void *map = NULL;
    size_t n = 0;
    int rc = fio_map(path, "give a cluster file (clusters/*.json or `cubist plan --calibrate`)",
                     &map, &n, e);
    if (rc) return rc;
    rc = cb_plan_cluster_parse(map ? map : "", n, path, c, e);
    fio_unmap(map, n);
    return rc;
}

static void put_tier(json_buf *b, const char *name, const cb_plan_tier *t, int last) {
    jb_printf(b, "    \"%s\": {\"bandwidth\": %.6g, \"latency\": %.6g}%s\n", name, t->bandwidth,
              t->latency, last ? "" : ",");
}

/* c's compute rates, each line indented by in; the last list left open */
static void put_rates(json_buf *b, const cb_plan_cluster *c, const char *in) {
    jb_printf(b, "%s\"peak_flops\": %.6g,\n%s\"attn_efficiency\": %.6g,\n%s\"gemm_efficiency\": [",
              in, c->peak_flops, in, c->attn_efficiency, in);
    for (int i = 0; i < c->neff; i++)
        jb_printf(b, "%s[%.6g, %.6g]", i ? ", " : "", c->eff_intensity[i], c->eff[i]);
    if (c->nshape) jb_printf(b, "],\n%s\"gemm_shapes\": [", in);
    for (int i = 0; i < c->nshape; i++)
        jb_printf(b, "%s[%.6g, %.6g, %.6g, %.6g]", i ? ", " : "", c->shape[i][0], c->shape[i][1],
                  c->shape[i][2], c->shape[i][3]);
    if (c->natt) jb_printf(b, "],\n%s\"attn_head_efficiency\": [", in);
    for (int i = 0; i < c->natt; i++)
        jb_printf(b, "%s[%.6g, %.6g]", i ? ", " : "", c->att_hs[i], c->att_eff[i]);
    if (c->nseq) jb_printf(b, "],\n%s\"attn_seq_efficiency\": [", in);
    for (int i = 0; i < c->nseq; i++)
        jb_printf(b, "%s[%.6g, %.6g]", i ? ", " : "", c->att_seq[i], c->att_seq_eff[i]);
}

static void put_cluster(json_buf *b, const cb_plan_cluster *c, const char *source) {
    jb_puts(b, "{\n  \"name\": ");
    jb_str(b, c->name);
    jb_printf(b, ",\n  \"nodes\": %d,\n  \"devices_per_node\": %d,\n  \"threads\": %d,\n", c->nodes,
              c->devices_per_node, c->threads);
    jb_printf(b, "  \"device\": {\n    \"memory_bytes\": %.6g,\n    \"mem_bandwidth\": %.6g,\n",
              c->memory_bytes, c->mem_bandwidth);
    put_rates(b, c, "    ");
    if (c->bf16.peak_flops > 0) {
        cb_plan_cluster t;
        rates_into(&t, &c->bf16);
        jb_puts(b, "],\n    \"bf16\": {\n");
        if (t.reorder_bandwidth > 0)
            jb_printf(b, "      \"reorder_bandwidth\": %.6g,\n", t.reorder_bandwidth);
        put_rates(b, &t, "      ");
        jb_puts(b, "]}");
    } else
        jb_puts(b, "]");
    if (c->ew_s[0] > 0 && c->ew_s[1] > 0)
        jb_printf(b, ",\n    \"gelu_erf_s\": %.6g,\n    \"dropout_s\": %.6g", c->ew_s[0],
                  c->ew_s[1]);
    if (c->mem_bandwidth_shared > 0)
        jb_printf(b, ",\n    \"mem_bandwidth_shared\": %.6g", c->mem_bandwidth_shared);
    if (c->update_bandwidth > 0)
        jb_printf(b, ",\n    \"update_bandwidth\": %.6g", c->update_bandwidth);
    if (c->update_bandwidth_shared > 0)
        jb_printf(b, ",\n    \"update_bandwidth_shared\": %.6g", c->update_bandwidth_shared);
    if (c->gemm_shared > 0) jb_printf(b, ",\n    \"gemm_shared\": %.6g", c->gemm_shared);
    if (c->cache_bytes > 0 && c->cache_bandwidth > 0)
        jb_printf(b, ",\n    \"cache_bytes\": %.6g,\n    \"cache_bandwidth\": %.6g",
                  c->cache_bytes, c->cache_bandwidth);
    jb_puts(b, "\n  },\n  \"links\": {\n");
    put_tier(b, "intra", &c->intra, 0);
    put_tier(b, "inter", &c->inter, 1);
    jb_puts(b, "  },\n  \"collectives\": [");
    for (int i = 0; i < c->ncoll; i++)
        jb_printf(b, "%s\n    {\"op\": \"%s\", \"ranks\": %d, \"alpha\": %.6g, \"beta\": %.6g}",
                  i ? "," : "", c->coll[i].op, c->coll[i].ranks, c->coll[i].alpha, c->coll[i].beta);
    jb_puts(b, "\n  ],\n  \"sources\": {\"*\": ");
    jb_str(b, source);
    jb_puts(b, "}\n}\n");
}

int cb_plan_cluster_write(const char *path, const cb_plan_cluster *c, const char *source,
                          cb_err *e) {
    json_buf b = {0};
    put_cluster(&b, c, source);
    if (b.oom) {
        jb_free(&b);
        return cb_fail(e, CB_ENOMEM, "out of memory writing cluster file %s", path);
    }
    fio_atomic a;
    int rc = fio_atomic_open(&a, path, e);
    if (!rc) rc = fio_atomic_write(&a, b.p, b.len, e);
    if (!rc) rc = fio_atomic_commit(&a, e);
    jb_free(&b);
    return rc;
}

/* y at x on the curve (x[i], y[i]), log-linear between points, flat past its ends. */
static double curve_at(const double *xs, const double *ys, int n, double x) {
    if (x <= xs[0]) return ys[0];
    for (int i = 1; i < n; i++)
        if (x <= xs[i]) {
            double t = log(x / xs[i - 1]) / log(xs[i] / xs[i - 1]);
            return ys[i - 1] + t * (ys[i] - ys[i - 1]);
        }
    return ys[n - 1];
}

double cb_plan_gemm_eff(const cb_plan_cluster *c, double x) {
    return curve_at(c->eff_intensity, c->eff, c->neff, x);
}

static double intensity(double m, double k, double n) {
    return 2 * m * k * n / (4 * (m * k + k * n + m * n));
}

double cb_plan_gemm_eff_at(const cb_plan_cluster *c, double m, double k, double n) {
    double e = cb_plan_gemm_eff(c, intensity(m, k, n)), near = 1e300, fix = 1;
    for (int i = 0; i < c->nshape; i++) {
        const double *s = c->shape[i];
        double a = fabs(log(m / s[0])), b = fabs(log(k / s[1])), d = fabs(log(n / s[2]));
        if (a > log(2.0) + 1e-9 || b > log(2.0) + 1e-9 || d > log(2.0) + 1e-9 || a + b + d >= near)
            continue;
        near = a + b + d, fix = s[3] / cb_plan_gemm_eff(c, intensity(s[0], s[1], s[2]));
    }
    return fmin(1, e * fix);
}

double cb_plan_attn_eff(const cb_plan_cluster *c, double head_size, double T) {
    double e = c->natt ? curve_at(c->att_hs, c->att_eff, c->natt, head_size) : c->attn_efficiency;
    if (!c->nseq || T <= 0) return e;
    double at64 = c->natt ? curve_at(c->att_hs, c->att_eff, c->natt, 64) : c->attn_efficiency;
    return fmin(1, curve_at(c->att_seq, c->att_seq_eff, c->nseq, T) * e / at64);
}
