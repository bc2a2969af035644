/* Data parallelism: fusion buckets on the gradient block, overlapped with
 * backward through the grad hook; ZeRO-1 shards; the sparse embedding path.
 * See dp.h. */
#include "dp/dp.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>


static double now_ms(void) { return omp_get_wtime() * 1e3; }

/* x rounded up to 3 significant digits, so a suggested size is enough. */
static double round_up3(double x) {
    double u = pow(10, floor(log10(x)) - 2);
    return ceil(x / u) * u;
}

int cb_dp_check_plan(size_t n, size_t start, int zero, double bucket_mb, int *nbuckets, cb_err *e) {
    if (!(bucket_mb > 0))
        return cb_fail(e, CB_EINPUT, "--bucket-mb must be > 0 (megabytes per fusion bucket)");
    if (zero && n > (size_t)INT_MAX)
        return cb_fail(e, CB_EINPUT, "--zero 1 shards the gradient with MPI's int counts and offsets, at most "
                       "%d parameters per replica, and this one has %zu; use --zero 0, or --tp/--pp to split "
                       "the model", INT_MAX, n);
    size_t per = cb_dp_bucket_floats(bucket_mb), span = n - start, nb = (span + per - 1) / per;
    if (nb > CB_DP_MAX_BUCKETS)
        return cb_fail(e, CB_EINPUT, "--bucket-mb %g cuts the gradient of %zu floats into %zu buckets, more "
                       "than %d; use --bucket-mb %.3g or more", bucket_mb, span, nb, CB_DP_MAX_BUCKETS,
                       round_up3((double)((span + CB_DP_MAX_BUCKETS - 1) / CB_DP_MAX_BUCKETS) * sizeof(float) / 1e6));
    if (nbuckets) *nbuckets = (int)nb;
    return CB_OK;
}

size_t cb_dp_bucket_floats(double bucket_mb) {
    /* 1 + 1e-12: 6.4e-05 MB is 16 floats, not the 15.999... of its binary value */
    double per = bucket_mb * 1e6 / sizeof(float) * (1 + 1e-12);
    if (!(per >= 1)) return 1;
    return per > (double)((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)per; /* MPI int counts */
}

/* Shard boundaries S_r = r * n / p, as int counts for MPI (n <= INT_MAX:
 * cb_dp_check_plan); without ZeRO this rank's range is everything. */
static int plan_shards(cb_dp *d, cb_err *e) {
    int p = d->c->size;
    d->lo = 0, d->hi = d->n;
    if (!d->zero) return CB_OK;
    d->shard_n = calloc((size_t)p, sizeof(int));
    d->shard_off = calloc((size_t)p, sizeof(int));
    if (!d->shard_n || !d->shard_off) return cb_fail(e, CB_ENOMEM, "out of memory for shards");
    for (int r = 0; r < p; r++) {
        size_t a = d->n * (size_t)r / (size_t)p, b = d->n * (size_t)(r + 1) / (size_t)p;
        d->shard_off[r] = (int)a;
        d->shard_n[r] = (int)(b - a);
    }
    d->lo = (size_t)d->shard_off[d->c->rank];
    d->hi = d->lo + (size_t)d->shard_n[d->c->rank];
    return CB_OK;
}

/* Elements of each shard inside [lo, hi). */
static void bucket_counts(const cb_dp *d, cb_dp_bucket *b) {
    for (int r = 0; r < d->c->size; r++) {
        size_t a = (size_t)d->shard_off[r], z = a + (size_t)d->shard_n[r];
        if (a < b->lo) a = b->lo;
        if (z > b->hi) z = b->hi;
        b->counts[r] = z > a ? (int)(z - a) : 0;
    }
}

/* count buckets of `per` floats from hi down towards lo, into b. */
static int fill_buckets(cb_dp *d, cb_dp_bucket *b, int count, size_t lo, size_t hi, size_t per,
                        cb_err *e) {
    for (int i = 0; i < count; i++, b++) {
        b->hi = hi - (size_t)i * per;
        b->lo = b->hi >= lo + per ? b->hi - per : lo;
        if (!d->zero) continue;
        b->counts = calloc((size_t)d->c->size, sizeof(int));
        if (!b->counts) return cb_fail(e, CB_ENOMEM, "out of memory for buckets");
        bucket_counts(d, b);
    }
    return CB_OK;
}

static int nbuckets(size_t lo, size_t hi, size_t per) { return (int)((hi - lo + per - 1) / per); }

/* Buckets from the end of [start, n) towards start, then (split path)
 * more over [0, split_end) (cb_dp_check_plan bounds them). With split_end,
 * [start, cut) gets buckets of its own (wpe's, which finish last), so no
 * bucket waits for both wpe and the first block. */
static int plan_buckets(cb_dp *d, size_t start, size_t per, size_t split_end, size_t cut,
                        cb_err *e) {
    if (!split_end || cut <= start || cut >= d->n) cut = start;
    int n1 = nbuckets(cut, d->n, per), n2 = cut > start ? nbuckets(start, cut, per) : 0;
    d->nb = n1 + n2;
    d->nsplit = split_end ? nbuckets(0, split_end, per) : 0;
    d->b = calloc((size_t)d->nb + (size_t)d->nsplit + 1, sizeof *d->b);
    if (!d->b) return cb_fail(e, CB_ENOMEM, "out of memory for %d buckets", d->nb + d->nsplit);
    int rc = fill_buckets(d, d->b, n1, cut, d->n, per, e);
    if (!rc) rc = fill_buckets(d, d->b + n1, n2, start, cut, per, e);
    if (!rc) rc = fill_buckets(d, d->b + d->nb, d->nsplit, 0, split_end, per, e);
    return rc;
}

/* bf16 path: the bucket rounded into its staging copy, reduced there */
static void start_bucket_bf16(cb_dp *d, cb_dp_bucket *b) {
    const float *g = d->grads;
    uint16_t *h = d->h;
    /* threads: a 25 MB bucket is 6.5M elements, on backward's path */
#pragma omp parallel for schedule(static) if (b->hi - b->lo > 65536)
    for (size_t i = b->lo; i < b->hi; i++) h[i] = cb_bf16_round(g[i]);
    if (d->zero) cb_comm_ireduce_scatterv_bf16(d->c, "grad", h + b->lo, b->counts, &b->req);
    else cb_comm_iallreduce_bf16(d->c, "grad", h + b->lo, b->hi - b->lo, &b->req);
    b->started = 1;
}

static void start_bucket(cb_dp *d, cb_dp_bucket *b) {
    if (d->h) {
        start_bucket_bf16(d, b);
        return;
    }
    float *g = d->grads + b->lo;
    if (d->zero) cb_comm_ireduce_scatterv(d->c, "grad", NULL, g, b->counts, &b->req);
    else cb_comm_iallreduce(d->c, "grad", NULL, g, b->hi - b->lo, CB_COMM_SUM, &b->req);
    b->started = 1;
}

/* Tests the buckets in flight: MPI advances non-blocking collectives only
 * inside MPI calls, so each hook call is a step of progress. */
static void poke(cb_dp *d) {
    for (int i = 0; i < d->nb + d->nsplit; i++)
        if (d->b[i].started && !d->b[i].done) d->b[i].done = cb_comm_test(&d->b[i].req);
}

/* Split path: wte's buckets, once wte holds the head's final share. */
static void start_split(cb_dp *d) {
    for (int i = 0; i < d->nsplit; i++) {
        start_bucket(d, &d->b[d->nb + i]);
        d->early += d->ft > 0;
    }
    d->split_started = 1;
}

/* Grad hook, called once per block of tensors (ln_f + wte's head part,
 * each transformer block, then the embeddings): tensors [first, last] are
 * final for this micro-batch; first > last: nothing new, a chance to
 * progress between operators. A bucket started while tensors remain
 * (ft > 0) overlaps the rest of backward; the embeddings' buckets start in
 * the last call, when nothing is left to overlap, except wte's on the split
 * path, which start in the first (the head's) call. */
void cb_dp_ready(cb_dp *d, int first, int last) {
    for (int i = first; i <= last; i++) d->ready[i] = 1;
    while (d->ft > 0 && d->ready[d->ft - 1]) d->ft--;
    if (!d->armed) return;
    if (d->split && !d->split_started) start_split(d);
    size_t frontier = d->ft < d->nt ? d->t[d->ft].offset : d->n;
    while (d->next < d->nb && d->b[d->next].lo >= frontier) {
        start_bucket(d, &d->b[d->next++]);
        d->early += d->ft > 0;
    }
    poke(d);
}

/* The sparse path's buffers, their sizes summed as allocated (buf_bytes),
 * so the benchmark reports what this code holds, not a formula. */
static void *counted_alloc(cb_dp *d, size_t bytes) {
    d->buf_bytes += bytes;
    return malloc(bytes);
}

static int init_sparse(cb_dp *d, cb_dp_table *t, size_t max_tokens, cb_err *e) {
    t->max_tok = max_tokens;
    size_t n = max_tokens + (t->tied ? t->vocab : 0), p = (size_t)d->c->size;
    t->idx = counted_alloc(d, sizeof(int32_t) * n);
    t->gidx = counted_alloc(d, sizeof(int32_t) * n * p);
    t->rows = counted_alloc(d, sizeof(float) * n * t->chan);
    t->grows = counted_alloc(d, sizeof(float) * n * t->chan * p);
    if (!t->idx || !t->gidx || !t->rows || !t->grows)
        return cb_fail(e, CB_ENOMEM,
                       "out of memory for the sparse embedding exchange (%.0f MB); use "
                       "--embed-grad dense",
                       d->buf_bytes / 1e6);
    return CB_OK;
}

/* Split path: the compact lookup rows of one rank (at most min(tokens,
 * V)), every rank's id list and the union's rows. */
static int init_split(cb_dp *d, cb_dp_table *t, size_t max_tokens, cb_err *e) {
    size_t V = t->vocab, C = t->chan;
    t->ucap = max_tokens < V ? max_tokens : V;
    size_t p = (size_t)d->c->size, un = p * t->ucap < V ? p * t->ucap : V;
    t->slot = counted_alloc(d, sizeof(int32_t) * V);
    t->upos = counted_alloc(d, sizeof(int32_t) * V);
    t->uid = counted_alloc(d, sizeof(int32_t) * t->ucap);
    t->gid = counted_alloc(d, sizeof(int32_t) * t->ucap * p);
    t->urows = counted_alloc(d, sizeof(float) * t->ucap * C);
    t->ubuf = counted_alloc(d, sizeof(float) * un * C);
    if (!t->slot || !t->upos || !t->uid || !t->gid || !t->urows || !t->ubuf)
        return cb_fail(e, CB_ENOMEM, "out of memory for the split embedding rows (%.0f MB); use "
                       "--embed-grad dense", d->buf_bytes / 1e6);
    for (size_t v = 0; v < V; v++) t->slot[v] = t->upos[v] = -1;
    return CB_OK;
}

/* Everything but the model's hook and the sparse and split paths' buffers;
 * buckets cover [start, n) and, if split_end > 0, [0, split_end). */
static int init_block(cb_dp *d, cb_comm *c, float *params, float *grads, const cb_tensor_info *t,
                      int nt, size_t n, int zero, double bucket_mb, size_t start, size_t split_end,
                      cb_err *e) {
    *d = (cb_dp){.c = c, .params = params, .grads = grads, .t = t, .nt = nt, .n = n, .zero = zero};
    int rc = split_end ? cb_dp_check_plan(n, 0, zero, bucket_mb, NULL, e) : CB_OK;
    if (!rc) rc = cb_dp_check_plan(n, start, zero, bucket_mb, NULL, e);
    if (rc) return rc;
    d->ready = calloc((size_t)nt + 1, sizeof(int));
    if (!d->ready) return cb_fail(e, CB_ENOMEM, "out of memory");
    rc = plan_shards(d, e);
    size_t cut = split_end && nt > 2 ? t[2].offset : 0; /* the first block after wte, wpe */
    if (!rc) rc = plan_buckets(d, start, cb_dp_bucket_floats(bucket_mb), split_end, cut, e);
    return rc;
}

int cb_dp_init_block(cb_dp *d, cb_comm *c, float *params, float *grads, const cb_tensor_info *t,
                     int nt, size_t n, int zero, double bucket_mb, cb_err *e) {
    return init_block(d, c, params, grads, t, nt, n, zero, bucket_mb, 0, 0, e);
}

static const char *const embed_names[] = {"dense", "sparse", "split", "auto"}; /* cb_dp_embed */

int cb_dp_embed_parse(const char *s, int *mode, cb_err *e) {
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, embed_names[i])) return *mode = i, CB_OK;
    return cb_fail(e, CB_EINPUT, "--embed-grad '%s' is unknown; use auto, dense, split or sparse",
                   s ? s : "");
}

const char *cb_dp_embed_name(const cb_dp *d) {
    return embed_names[d->split ? CB_DP_EMBED_SPLIT : d->sparse ? CB_DP_EMBED_SPARSE : CB_DP_EMBED_DENSE];
}

/* Rows of a table: its local vocabulary, padding included. */
static size_t table_rows(const cb_tensor_info *w) {
    return w->numel / (size_t)(w->shape[1] > 0 ? w->shape[1] : 1);
}

/* auto: split when p x (local rows of a step) <= V/4 for every table, so
 * each union is at most a quarter of its table. */
static int split_pays(const cb_tensor_info *t, int ntab, int p, size_t max_tokens) {
    int ok = ntab > 0 && p > 1;
    for (int k = 0; k < ntab; k++) ok &= (size_t)p * max_tokens * 4 <= table_rows(&t[k]);
    return ok;
}

static int init_tables(cb_dp *d, const cb_dp_model *src, const cb_tensor_info *t,
                       size_t max_tokens, cb_err *e) {
    d->tab = calloc((size_t)src->ntables, sizeof *d->tab);
    if (!d->tab) return cb_fail(e, CB_ENOMEM, "out of memory for the embedding tables");
    d->ntab = src->ntables;
    int rc = CB_OK;
    for (int k = 0; k < d->ntab && !rc; k++) {
        cb_dp_table *x = &d->tab[k];
        x->vocab = table_rows(&t[k]);
        x->chan = (size_t)t[k].shape[1];
        x->off = t[k].offset;
        x->tied = k == 0 && src->tied;
        rc = d->sparse ? init_sparse(d, x, max_tokens, e) : init_split(d, x, max_tokens, e);
    }
    if (!rc && d->split) src->exclude_lookup(src->ctx);
    return rc;
}

int cb_dp_init_model(cb_dp *d, cb_comm *c, const cb_dp_model *src, float *params, float *grads,
                     const cb_tensor_info *t, int nt, size_t n, int zero, int embed,
                     double bucket_mb, size_t max_tokens, cb_err *e) {
    int ntab = src->ntables > 0 && src->ntables <= nt && t[0].offset == 0 ? src->ntables : 0;
    int split_ok = src->split_ok && ntab > 0;
    if (embed == CB_DP_EMBED_AUTO)
        embed = split_ok && split_pays(t, ntab, c->size, max_tokens) ? CB_DP_EMBED_SPLIT
                                                                     : CB_DP_EMBED_DENSE;
    if (embed == CB_DP_EMBED_SPLIT && !split_ok)
        return cb_fail(e, CB_EINPUT, "--embed-grad split needs the whole embedding and the head on "
                       "every rank; use it with --tp 1 --pp 1, or --embed-grad dense");
    if (embed == CB_DP_EMBED_SPARSE && !ntab)
        return cb_fail(e, CB_EINPUT, "--embed-grad sparse needs the model's embedding lookups; use "
                       "--embed-grad dense");
    int sparse = embed == CB_DP_EMBED_SPARSE, split = embed == CB_DP_EMBED_SPLIT;
    /* the tables leave the buckets; a tied table 0's head share gets split buckets */
    size_t end = ntab ? t[ntab - 1].offset + t[ntab - 1].numel : 0;
    size_t head = split && src->tied ? t[0].numel : 0;
    int rc = init_block(d, c, params, grads, t, nt, n, zero, bucket_mb, sparse || split ? end : 0,
                        head, e);
    d->src = *src;
    d->sparse = sparse;
    d->split = split;
    if (!rc && (sparse || split)) rc = init_tables(d, src, t, max_tokens, e);
    return rc;
}

static void free_table(cb_dp_table *t) {
    free(t->idx), free(t->gidx), free(t->rows), free(t->grows);
    free(t->slot), free(t->upos), free(t->uid), free(t->gid), free(t->urows), free(t->ubuf);
}

int cb_dp_comm_dtype_parse(const char *s, int *bf16, cb_err *e) {
    if (s && (!strcmp(s, "fp32") || !strcmp(s, "bf16"))) return *bf16 = s[0] == 'b', CB_OK;
    return cb_fail(e, CB_EINPUT, "--comm-dtype '%s' is unknown; use fp32 (default) or bf16", s ? s : "");
}

int cb_dp_comm_bf16(cb_dp *d, cb_err *e) {
    free(d->h);
    d->h = malloc(sizeof(uint16_t) * (d->n ? d->n : 1));
    if (!d->h) return cb_fail(e, CB_ENOMEM, "out of memory for the bf16 gradient copy (%.0f MB)", d->n * 2 / 1e6);
    return CB_OK;
}

void cb_dp_free(cb_dp *d) {
    free(d->h);
    if (d->src.detach) d->src.detach(d->src.ctx);
    for (int i = 0; d->b && i < d->nb + d->nsplit; i++) free(d->b[i].counts);
    for (int k = 0; d->tab && k < d->ntab; k++) free_table(&d->tab[k]);
    free(d->tab);
    free(d->b);
    free(d->ready);
    free(d->shard_n);
    free(d->shard_off);
    memset(d, 0, sizeof *d);
}

void cb_dp_begin_backward(cb_dp *d, int last) {
    int nt = d->nt;
    memset(d->ready, 0, sizeof(int) * (size_t)nt);
    d->ft = nt;
    d->armed = last;
    if (!last) return;
    d->next = d->early = d->split_started = 0;
    for (int i = 0; i < d->nb + d->nsplit; i++) d->b[i].started = d->b[i].done = 0;
}

/* Split path: one micro-batch's lookup rows summed per id into the
 * compact rows, in row order. */
static void split_record(cb_dp_table *t, const int *ids, const float *rows, size_t n) {
    size_t C = t->chan;
    for (size_t i = 0; i < n; i++) {
        int32_t v = ids[i], s = t->slot[v];
        if (s < 0) {
            if (t->nuniq == t->ucap) cb_comm_fatal("split embedding: more token rows than planned (internal error)");
            s = t->slot[v] = (int32_t)t->nuniq;
            t->uid[t->nuniq++] = v;
            memset(t->urows + (size_t)s * C, 0, sizeof(float) * C);
        }
        float *r = t->urows + (size_t)s * C;
        const float *x = rows + i * C;
        for (size_t j = 0; j < C; j++) r[j] += x[j];
    }
}

void cb_dp_lookup_rows(cb_dp *d, int k, const int *ids, const float *rows, size_t n) {
    if (k < 0 || k >= d->ntab) return;
    cb_dp_table *t = &d->tab[k];
    if (d->split) split_record(t, ids, rows, n);
    if (!d->sparse) return;
    if (t->ntok + n > t->max_tok) cb_comm_fatal("sparse embedding: more token rows than planned (internal error)");
    for (size_t i = 0; i < n; i++) t->idx[t->ntok + i] = ids[i];
    memcpy(t->rows + t->ntok * t->chan, rows, sizeof(float) * n * t->chan);
    t->ntok += n;
}

/* The head's share of a tied table's gradient: the accumulated dense
 * gradient g less the recorded lookup rows, as V (row, row index) slices
 * after them. */
static void head_slices(cb_dp_table *t, const float *g) {
    size_t C = t->chan, s0 = t->ntok;
    float *head = t->rows + s0 * C;
    memcpy(head, g, sizeof(float) * t->vocab * C);
    for (size_t i = 0; i < s0; i++) {
        float *h = head + (size_t)t->idx[i] * C;
        const float *r = t->rows + i * C;
        for (size_t j = 0; j < C; j++) h[j] -= r[j];
    }
    for (size_t v = 0; v < t->vocab; v++) t->idx[s0 + v] = (int32_t)v;
}

/* Every rank's slices of a table (fixed count: all ranks have the same
 * local rows) gathered, then summed into its dense gradient in rank order. */
static void sparse_exchange(cb_dp *d, cb_dp_table *t) {
    size_t C = t->chan, s = t->ntok + (t->tied ? t->vocab : 0), p = (size_t)d->c->size;
    float *g = d->grads + t->off;
    if (t->tied) head_slices(t, g);
    cb_comm_allgather_i32(d->c, "embed.sparse", t->idx, t->gidx, s);
    cb_comm_allgather(d->c, "embed.sparse", t->rows, t->grows, s * C);
    memset(g, 0, sizeof(float) * t->vocab * C);
    for (size_t i = 0; i < s * p; i++) {
        float *dst = g + (size_t)t->gidx[i] * C;
        const float *r = t->grows + i * C;
        for (size_t j = 0; j < C; j++) dst[j] += r[j];
    }
    t->ntok = 0;
}

/* Split path, after backward: the union of the group's ids (every rank's
 * list gathered, padded with -1, then marked and read in id order), this
 * rank's compact rows placed at their union rows and the union
 * all-reduced. */
static void split_exchange(cb_dp *d, cb_dp_table *t) {
    size_t C = t->chan, p = (size_t)d->c->size, U = 0;
    for (size_t j = t->nuniq; j < t->ucap; j++) t->uid[j] = -1;
    cb_comm_allgather_i32(d->c, "embed.split", t->uid, t->gid, t->ucap);
    for (size_t j = 0; j < p * t->ucap; j++)
        if (t->gid[j] >= 0) t->upos[t->gid[j]] = 0;
    for (size_t v = 0; v < t->vocab; v++)
        if (t->upos[v] >= 0) t->upos[v] = (int32_t)U++;
    memset(t->ubuf, 0, sizeof(float) * U * C);
    for (size_t j = 0; j < t->nuniq; j++)
        memcpy(t->ubuf + (size_t)t->upos[t->uid[j]] * C, t->urows + j * C, sizeof(float) * C);
    cb_comm_allreduce(d->c, "embed.split", NULL, t->ubuf, U * C, CB_COMM_SUM);
    t->nunion = U;
}

/* Split path, once the buckets are in: the union's rows added into this
 * rank's range of the reduced gradient; the per-step tables cleared. */
static void split_add(cb_dp *d, cb_dp_table *t) {
    size_t C = t->chan;
    for (size_t v = 0; v < t->vocab; v++) {
        if (t->upos[v] < 0) continue;
        size_t a = t->off + v * C, z = a + C, row = a;
        if (a < d->lo) a = d->lo;
        if (z > d->hi) z = d->hi;
        const float *r = t->ubuf + (size_t)t->upos[v] * C;
        for (size_t i = a; i < z; i++) d->grads[i] += r[i - row];
        t->upos[v] = -1;
    }
    for (size_t j = 0; j < t->nuniq; j++) t->slot[t->uid[j]] = -1;
    t->nuniq = 0;
}

/* g[n] = the floats of bf16 h[n] */
static void widen(float *g, const uint16_t *h, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) g[i] = cb_bf16_widen(h[i]);
}

void cb_dp_reduce(cb_dp *d) {
    while (d->next < d->nb) start_bucket(d, &d->b[d->next++]);
    if (d->split && !d->split_started) start_split(d);
    for (int k = 0; d->sparse && k < d->ntab; k++) sparse_exchange(d, &d->tab[k]);
    double t0 = now_ms();
    for (int k = 0; d->split && k < d->ntab; k++) split_exchange(d, &d->tab[k]);
    float *g = d->grads;
    int r = d->c->rank;
    for (int i = 0; i < d->nb + d->nsplit; i++) {
        cb_dp_bucket *b = &d->b[i];
        cb_comm_wait(&b->req);
        if (d->zero && !b->counts[r]) continue;
        /* in-place reduce-scatter leaves this rank's part at the slice start */
        size_t at = !d->zero ? b->lo : (size_t)d->shard_off[r] > b->lo ? (size_t)d->shard_off[r] : b->lo;
        size_t n = d->zero ? (size_t)b->counts[r] : b->hi - b->lo;
        if (d->h) widen(g + at, d->h + b->lo, n);
        else if (d->zero) memmove(g + at, g + b->lo, sizeof(float) * n);
    }
    for (int k = 0; d->split && k < d->ntab; k++) split_add(d, &d->tab[k]);
    d->wait_ms = now_ms() - t0;
    d->armed = 0;
}

/* Owned tensors only: a tensor-parallel shard replicated on several ranks
 * counts once in the norm. */
double cb_dp_grad_sumsq(cb_dp *d) {
    if (!d->zero && d->src.grad_sumsq) return d->src.grad_sumsq(d->src.ctx);
    double s = 0;
    const cb_kernels *k = cb_kernels_cpu();
    for (int i = 0; i < d->nt; i++) {
        const cb_tensor_info *t = &d->t[i];
        size_t a = t->offset > d->lo ? t->offset : d->lo;
        size_t b = t->offset + t->numel < d->hi ? t->offset + t->numel : d->hi;
        if (t->owner && a < b) s += k->sumsq(k, d->grads + a, b - a);
    }
    if (d->zero) cb_comm_allreduce_f64(d->c, "norm", NULL, &s, 1, CB_COMM_SUM);
    return s;
}

void cb_dp_sync_params(cb_dp *d) {
    if (!d->zero) return;
    cb_comm_allgatherv(d->c, "params", NULL, d->params, d->shard_n, d->shard_off);
}

double cb_dp_mean(cb_dp *d, double x) {
    cb_comm_allreduce_f64(d->c, "loss", NULL, &x, 1, CB_COMM_SUM);
    return x / d->c->size;
}

void cb_dp_gather(cb_dp *d, const float *shard, float *full) {
    if (!d->zero) {
        if (d->c->rank == 0 && full != shard) memcpy(full, shard, sizeof(float) * d->n);
        return;
    }
    cb_comm_gatherv(d->c, "checkpoint", shard, full, d->shard_n, d->shard_off, 0);
}

double cb_dp_embed_bytes_moved(int path, int p, size_t V, size_t C, size_t tokens, int tied,
                               size_t U) {
    double row = sizeof(int32_t) + C * sizeof(float), ring = 2.0 * (p - 1) / p;
    double dense = ring * (double)V * C * sizeof(float);
    if (path == CB_DP_EMBED_SPARSE) return (double)(p - 1) * (double)(tokens + (tied ? V : 0)) * row;
    if (path != CB_DP_EMBED_SPLIT) return dense;
    double ucap = (double)(tokens < V ? tokens : V);
    return (double)(p - 1) * ucap * sizeof(int32_t) + ring * (double)U * C * sizeof(float) +
           (tied ? dense : 0);
}

double cb_dp_embed_buffer_bytes(int path, int p, size_t V, size_t C, size_t tokens, int tied) {
    double grad = (double)V * C * sizeof(float), row = sizeof(int32_t) + C * sizeof(float);
    if (path == CB_DP_EMBED_SPARSE) return grad + (double)(p + 1) * (double)(tokens + (tied ? V : 0)) * row;
    if (path != CB_DP_EMBED_SPLIT) return grad;
    size_t ucap = tokens < V ? tokens : V, un = (size_t)p * ucap < V ? (size_t)p * ucap : V;
    return grad + sizeof(int32_t) * (2.0 * V + (double)ucap * (p + 1)) +
           sizeof(float) * (double)(ucap + un) * C;
}
