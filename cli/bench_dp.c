/* `cubist bench --allreduce | --dp-step | --embed-grad`: the data-parallel
 * benchmarks, run under the MPI launcher (mpirun -np N cubist bench ...).
 *   --allreduce   fused-bucket all-reduce of the GPT-2 124M gradient block
 *                 (the trainer's own bucket code, every bucket started at
 *                 once), in fp32 and with --comm-dtype bf16's buckets (half
 *                 the bytes, summed in fp32), against one raw MPI_Allreduce
 *                 of the fp32 bytes
 *   --dp-step     training steps of the data-parallel trainer on synthetic
 *                 tokens: tokens/s, backward, the wait for buckets after
 *                 backward and the share of the reduction hidden behind it
 *                 (scripts/bench_dp.sh compares 1x1, 1x2 and 2x1)
 *   --embed-grad  bytes moved and peak buffer memory of the dense and the
 *                 sparse (TF + Horovod) embedding-gradient exchange for 2..64
 *                 ranks (GPT's tied wte, NCF's four tables, or the
 *                 translation model's one table read by two lookups and the
 *                 head), from formulas; at this job's rank count they are
 *                 checked against one real exchange: the sparse buffers as
 *                 the code allocates them (cb_dp.buf_bytes), and the byte
 *                 counters, which record the messages the code hands to MPI
 *                 (their sizes, times the ring share of comm.h: what a
 *                 bandwidth-optimal algorithm moves, not what the MPI
 *                 library measured on the wire) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "comm/comm.h"
#include "graph/graph.h"

typedef struct dp_bench {
    int allreduce, dp_step, embed, no_comm;
    int layers, d_model, heads, vocab, batch, seq_len, steps, reps, threads, zero;
    double bucket_mb;
    const char *embed_mode, *model, *mlp;
    int users, items, factors;
    const char *comm_dtype; /* --dp-step: fp32 or bf16 buckets */
    int comm_bf16;
} dp_bench;

static double max_over_ranks(cb_comm *w, double x) {
    cb_comm_allreduce_f64(w, CB_COMM_CONTROL, NULL, &x, 1, CB_COMM_MAX);
    return x;
}

static void fill(float *g, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] = 1e-3f;
}

/* Seconds of one reduction of the whole gradient block; slowest rank. */
static double time_reduce(cb_comm *w, cb_dp *d, float *g, size_t n, int fused) {
    fill(g, n);
    cb_comm_barrier(w, CB_COMM_CONTROL);
    double t0 = MPI_Wtime();
    if (fused) {
        cb_dp_begin_backward(d, 1);
        cb_dp_reduce(d);
    } else {
        MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, w->comm);
    }
    return max_over_ranks(w, MPI_Wtime() - t0);
}

/* The GPT of c as a graph of B x T tokens (B over every data-parallel rank)
 * on a grid of data parallelism over the world (alone: each rank by
 * itself), with ids and targets of this rank's rows (a hash of the
 * position, offset by the rank). */
typedef struct dp_model {
    cb_dist *d;
    cb_model *m;
    int *ids, *targets;
} dp_model;

static void dp_model_free(dp_model *x) {
    cb_model_free(x->m);
    if (x->d) cb_dist_free(x->d);
    free(x->ids);
}

static int dp_model_init(dp_model *x, const cb_gpt_config *c, int B, int T, int alone, int zero,
                         int embed, double bucket_mb, int steps, cb_err *e) {
    memset(x, 0, sizeof *x);
    cb_adamw_config opt = {.lr = 6e-4f, .min_lr = 6e-5f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f, .steps = steps};
    int rc = cb_dist_data_parallel(&x->d, alone, zero, embed, bucket_mb, e);
    if (!rc) {
        x->m = cb_model_new(x->d, B, T);
        if (x->m) cb_model_declare_gpt(x->m, c);
        rc = cb_model_build(x->m, 1, &opt, e);
    }
    if (rc) return rc;
    int first, rows, r = cb_comm_world()->rank;
    cb_model_rows(x->m, &first, &rows);
    size_t n = (size_t)rows * T;
    x->ids = malloc(sizeof(int) * 2 * n + 1);
    if (!x->ids) return cb_fail(e, CB_ENOMEM, "out of memory for benchmark tokens");
    x->targets = x->ids + n;
    for (size_t i = 0; i < n; i++) {
        x->ids[i] = (int)((i * 7 + (size_t)r * 13) % c->vocab);
        x->targets[i] = (int)((i * 5) % c->vocab);
    }
    return CB_OK;
}

static int bench_allreduce(const dp_bench *b, cb_comm *w, cb_err *e) {
    cb_gpt_config c = {b->layers, b->d_model, b->heads, 64, b->vocab};
    dp_model x;
    int rc = dp_model_init(&x, &c, w->size, 64, 0, 0, CB_DP_EMBED_DENSE, b->bucket_mb, 1, e);
    if (rc) {
        dp_model_free(&x);
        return rc;
    }
    cb_dp *d = &x.m->dp;
    size_t n = x.m->pt.nparams;
    rc = cb_dp_comm_bf16(d, e);
    uint16_t *h = d->h; /* the same buckets, staged in bf16 or not per round */
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; !rc && r < b->reps + 1; r++)
        for (int k = 0; k < 3; k++) { /* raw, fused, fused bf16: interleaved, same machine state */
            d->h = k == 2 ? h : NULL;
            double s = time_reduce(w, d, x.m->grads, n, k > 0);
            if (r > 0 && s < best[k]) best[k] = s; /* first round warms up */
        }
    d->h = h;
    int p = w->size;
    double bytes = 4.0 * n, bus = 2.0 * (p - 1) / p * bytes;
    if (!rc && w->rank == 0)
        printf("all-reduce of %.1f MB (GPT-2 %dL d%d gradient) over %d ranks, best of %d:\n"
               "  fused buckets (%d x %g MB, non-blocking) %8.1f ms  bus %6.2f GB/s\n"
               "  fused buckets, --comm-dtype bf16        %8.1f ms  bus %6.2f GB/s (half the bytes)\n"
               "  raw MPI_Allreduce                       %8.1f ms  bus %6.2f GB/s\n"
               "  ratio fused / raw                       %8.3f\n"
               "  time bf16 / fp32 (fused)                %8.3f\n",
               bytes / 1e6, b->layers, b->d_model, p, b->reps, d->nb, b->bucket_mb, best[1] * 1e3,
               bus / best[1] / 1e9, best[2] * 1e3, bus / 2 / best[2] / 1e9, best[0] * 1e3,
               bus / best[0] / 1e9, best[0] / best[1], best[2] / best[1]);
    dp_model_free(&x);
    return rc;
}

/* Time of the bucketed reduction with nothing to overlap, for the share
 * of it that a training step hid behind backward: measured as --allreduce
 * does (a discarded warm-up round, then the best of reps, slowest rank). The
 * gradient is refilled each round, so no round sums ever-growing values. */
static double standalone_reduce_ms(cb_comm *w, cb_model *m, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double s = time_reduce(w, &m->dp, m->grads, m->pt.nparams, 1);
        if (r > 0 && s < best) best = s;
    }
    return best * 1e3;
}

/* Buckets that cannot start inside backward: those of the block's plan
 * overlapping the embeddings (wte, wpe at the front), final only at its
 * end. The split path plans wte's buckets apart (after the nb others),
 * final after the head: they do not count. */
static int late_buckets(const cb_model *m) {
    size_t end = m->pt.t[1].offset + m->pt.t[1].numel;
    int k = 0;
    for (int i = 0; i < m->dp.nb; i++) k += m->dp.b[i].lo < end;
    return k;
}

/* --no-comm: every rank trains alone on its B/p sequences, no reduction:
 * the data-parallel step's ceiling on this machine (the ranks still share
 * its cores, caches and memory bandwidth). Step time of the slowest rank. */
static int bench_dp_step(const dp_bench *b, cb_comm *w, cb_err *e) {
    cb_gpt_config c = {b->layers, b->d_model, b->heads, b->seq_len, b->vocab};
    if (b->no_comm && b->batch % w->size)
        return cb_fail(e, CB_EINPUT, "--batch %d does not split over %d ranks; use a multiple of %d",
                       b->batch, w->size, w->size);
    int embed, B = b->no_comm ? b->batch / w->size : b->batch;
    cb_dp_embed_parse(b->embed_mode, &embed, e);
    dp_model x;
    int rc = dp_model_init(&x, &c, B, b->seq_len, b->no_comm, b->zero, embed, b->bucket_mb,
                           b->steps + 1, e);
    if (!rc && b->comm_bf16 && x.m->d->g.dp > 1) rc = cb_dp_comm_bf16(&x.m->dp, e);
    if (rc) {
        dp_model_free(&x);
        return rc;
    }
    cb_model *m = x.m;
    int dp = m->d->g.dp > 1;
    cb_model_step_info in, sum = {0};
    double wait = 0;
    for (int s = 0; s <= b->steps; s++) { /* step 0 warms up */
        cb_model_train_step(m, x.ids, x.targets, s, NULL);
        cb_model_last_step(m, &in);
        if (!s) continue;
        sum.step_ms += in.step_ms, sum.forward_ms += in.forward_ms;
        sum.backward_ms += in.backward_ms, sum.update_ms += in.update_ms;
        wait += dp ? m->dp.wait_ms / b->steps : 0;
    }
    double step = max_over_ranks(w, sum.step_ms / b->steps);
    int early = dp ? m->dp.early : 0, late = dp ? late_buckets(m) : 0;
    const char *path = dp ? cb_dp_embed_name(&m->dp) : "none";
    double alone = dp ? standalone_reduce_ms(w, m, b->reps) : 0;
    double hidden = alone > 0 ? 1.0 - wait / alone : 0;
    if (hidden < 0) hidden = 0;
    if (w->rank == 0)
        printf("{\"ranks\":%d,\"threads\":%d,\"B\":%d,\"T\":%d,\"tokens_per_s\":%.2f,"
               "\"step_ms\":%.1f,\"fwd_ms\":%.1f,\"bwd_ms\":%.1f,\"opt_ms\":%.1f,\"comm_wait_ms\":%.3f,\"reduce_alone_ms\":%.3f,"
               "\"hidden\":%.3f,\"buckets\":%d,\"started_in_backward\":%d,\"late_buckets\":%d,"
               "\"embed\":\"%s\",\"zero\":%d,\"no_comm\":%d,\"comm_dtype\":\"%s\"}\n",
               w->size, omp_get_max_threads(), b->batch, b->seq_len,
               b->batch * b->seq_len / (step / 1e3), step, sum.forward_ms / b->steps,
               sum.backward_ms / b->steps, sum.update_ms / b->steps - wait, wait, alone, hidden,
               dp ? m->dp.nb + m->dp.nsplit : 0, early, late, path, b->zero, b->no_comm,
               b->comm_bf16 ? "bf16" : "fp32");
    dp_model_free(&x);
    return CB_OK;
}

/* --embed-grad: the lookup tables of the model (GPT: the tied wte; NCF:
 * NeuMF's four untied tables) and the lookup rows per rank and step. */
typedef struct emb_tab {
    size_t V, C;
    int tied;
} emb_tab;

static int ncf_tables(const cb_ncf_config *c, emb_tab *t) {
    size_t F = (size_t)c->factors, E = (size_t)c->mlp[0] / 2;
    t[0] = (emb_tab){(size_t)c->users, F, 0}, t[1] = (emb_tab){(size_t)c->items, F, 0};
    t[2] = (emb_tab){(size_t)c->users, E, 0}, t[3] = (emb_tab){(size_t)c->items, E, 0};
    return 4;
}

static const int PATHS[3] = {CB_DP_EMBED_DENSE, CB_DP_EMBED_SPARSE, CB_DP_EMBED_SPLIT};

/* Bytes sent per rank and step (buf = 0) or peak buffer bytes (buf = 1)
 * of a path over the tables at p ranks; split's unions at their largest,
 * min(p x tok, V) (every rank's rows distinct), unless U gives them. */
static double tables_bytes(const emb_tab *t, int nt, int path, int p, size_t tok, int buf,
                           const size_t *U) {
    double s = 0;
    for (int k = 0; k < nt; k++) {
        size_t u = U ? U[k] : (size_t)p * tok < t[k].V ? (size_t)p * tok : t[k].V;
        s += buf ? cb_dp_embed_buffer_bytes(path, p, t[k].V, t[k].C, tok, t[k].tied)
                 : cb_dp_embed_bytes_moved(path, p, t[k].V, t[k].C, tok, t[k].tied, u);
    }
    return s;
}

/* A small NCF on data parallelism over the world, under an embedding
 * path, B rows per rank of (user, item) pairs (a hash of the position and
 * the rank, repeats included) and 0/1 labels. */
static int ncf_model_init(dp_model *x, const cb_ncf_config *c, int B, int embed, cb_err *e) {
    memset(x, 0, sizeof *x);
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                           .eps = 1e-8f, .steps = 1};
    int p = cb_comm_world()->size, r = cb_comm_world()->rank;
    int rc = cb_dist_data_parallel(&x->d, 0, 0, embed, 25, e);
    if (!rc) {
        x->m = cb_model_new(x->d, B * p, 1);
        if (x->m) cb_model_declare_ncf(x->m, c);
        rc = cb_model_build(x->m, 1, &opt, e);
    }
    if (rc) return rc;
    x->ids = malloc(sizeof(int) * 3 * (size_t)B + 1);
    if (!x->ids) return cb_fail(e, CB_ENOMEM, "out of memory for benchmark rows");
    x->targets = x->ids + 2 * B;
    for (int i = 0; i < B; i++) {
        x->ids[2 * i] = (i * 7 + r * 13) % c->users;
        x->ids[2 * i + 1] = (i * 5 + r * 3) % c->items;
        x->targets[i] = i % 2;
    }
    return CB_OK;
}

/* A small translation model (cb_model_declare_nmt) on data parallelism
 * over the world, under an embedding path, B pairs per rank of T source and
 * T decoder-input ids (a hash of the position and the rank) at full length:
 * its one table gets 2 x B x T lookup rows per rank and step. The lengths
 * live after the targets in x->ids. */
static int nmt_model_init(dp_model *x, const cb_nmt_config *c, int B, int T, int embed,
                          cb_err *e) {
    memset(x, 0, sizeof *x);
    cb_adamw_config opt = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.98f,
                           .eps = 1e-8f, .steps = 1};
    int p = cb_comm_world()->size, r = cb_comm_world()->rank;
    size_t n = (size_t)B * T;
    int rc = cb_dist_data_parallel(&x->d, 0, 0, embed, 25, e);
    x->ids = rc ? NULL : malloc(sizeof(int) * (3 * n + 2 * (size_t)B));
    if (!rc && !x->ids) rc = cb_fail(e, CB_ENOMEM, "out of memory for benchmark rows");
    if (rc) return rc;
    x->targets = x->ids + 2 * n;
    int *lens = x->targets + n;
    for (size_t i = 0; i < n; i++) {
        x->ids[2 * i] = (int)((i * 7 + (size_t)r * 13) % (size_t)c->pad);
        x->ids[2 * i + 1] = (int)((i * 11 + (size_t)r * 5) % (size_t)c->pad);
        x->targets[i] = (int)((i * 5) % (size_t)c->pad);
    }
    for (int i = 0; i < 2 * B; i++) lens[i] = T;
    x->m = cb_model_new(x->d, B * p, T);
    if (!x->m) return cb_fail(e, CB_ENOMEM, "out of memory for the model");
    cb_model_declare_nmt(x->m, c);
    cb_model_set_lengths_set(x->m, 0, lens);
    cb_model_set_lengths_set(x->m, 1, lens + B);
    return cb_model_build(x->m, 1, &opt, e);
}

/* One data-parallel step of a small model of the kind under each path:
 * the bytes the code handed to MPI under the path's tags and the buffers
 * it allocated, against the formulas at this job's rank count. Dense: one
 * all-reduce of the tables' gradient. Split: its unions as they came out
 * (their size depends on the ids); a tied table's head share travels in
 * the gradient buckets, not counted here. */
static int embed_measured(cb_comm *w, const char *model, cb_err *e) {
    const int V = 512, C = 64, B = 2, T = 32;
    int ncf = !strcmp(model, "ncf"), nmt = !strcmp(model, "nmt");
    cb_gpt_config g = {1, C, 4, T, V};
    cb_ncf_config n = {.users = 300, .items = 200, .factors = 16, .n_mlp = 2, .mlp = {32, 16}};
    cb_nmt_config mt = {.enc_layers = 1, .dec_layers = 1, .d_model = C, .n_head = 4,
                        .d_ff = 2 * C, .vocab = V, .smoothing = 0.1f, .pad = V - 3};
    emb_tab t[4] = {{V, C, 1}};
    int nt = ncf ? ncf_tables(&n, t) : 1, p = w->size, ok = 1, rc = CB_OK;
    size_t tok = ncf ? 64 : (size_t)(nmt ? 2 : 1) * B * T, U[4];
    char line[1024];
    int len = snprintf(line, sizeof line, "measured at %d ranks (%s, %zu lookup rows per rank):", p,
                       model, tok);
    for (int i = 0; i < 3 && !rc; i++) {
        dp_model x;
        rc = ncf   ? ncf_model_init(&x, &n, (int)tok, PATHS[i], e)
             : nmt ? nmt_model_init(&x, &mt, B, T, PATHS[i], e)
                   : dp_model_init(&x, &g, B * p, T, 0, 0, PATHS[i], 25, 1, e);
        cb_model *m = x.m;
        cb_comm *dpg = rc ? NULL : &m->d->g.dpg;
        if (!rc) {
            cb_comm_stats_reset(dpg);
            cb_model_train_step(m, x.ids, x.targets, 0, NULL);
            for (int k = 0; k < m->dp.ntab; k++) U[k] = m->dp.tab[k].nunion;
            size_t dn = 0;
            for (int k = 0; k < nt; k++) dn += t[k].V * t[k].C;
            if (i == 0) /* the dense exchange of the tables (first in the block), alone */
                cb_comm_allreduce(dpg, "embed.dense", NULL, m->grads, dn, CB_COMM_SUM);
            const char *tag[3] = {"embed.dense", "embed.sparse", "embed.split"};
            const cb_comm_stat *st = cb_comm_stats_find(dpg, tag[i]);
            double sent = st ? (double)st->bytes_sent : -1, fsent = 0, grads = 0;
            for (int k = 0; k < nt; k++) {
                size_t u = i == 2 ? U[k] : 0;
                emb_tab q = t[k];
                q.tied = i == 2 ? 0 : q.tied; /* the head share's buckets are not counted */
                fsent += tables_bytes(&q, 1, PATHS[i], p, tok, 0, &u);
                grads += sizeof(float) * (double)t[k].V * t[k].C;
            }
            double held = (double)m->dp.buf_bytes + grads, fheld = tables_bytes(t, nt, PATHS[i], p, tok, 1, NULL);
            int good = fabs(sent - fsent) < 1 && fabs(held - fheld) < 1;
            ok &= good;
            len += snprintf(line + len, sizeof line - (size_t)len, " %s sent %.0f B (formula %.0f), "
                            "buffers %.0f B (formula %.0f);", cb_dp_embed_name(&m->dp), sent, fsent,
                            held, fheld);
        }
        dp_model_free(&x);
    }
    if (rc) return rc;
    if (w->rank == 0) printf("%s %s\n", line, ok ? "formulas match" : "MISMATCH");
    return ok ? CB_OK : cb_fail(e, CB_EINTERNAL, "embedding exchange counters differ from the formulas");
}

static void embed_table(const emb_tab *t, int nt, size_t tok, const char *what, int rank) {
    if (rank) return;
    printf("%s, %zu lookup rows per rank per step (weak scaling):\n"
           "%6s %12s %12s %12s %12s %12s %12s\n", what, tok, "ranks", "dense MB", "sparse MB",
           "split MB", "dense buf MB", "sparse buf MB", "split buf MB");
    for (int p = 2; p <= 64; p *= 2) {
        printf("%6d", p);
        for (int buf = 0; buf < 2; buf++)
            for (int i = 0; i < 3; i++) printf(" %12.1f", tables_bytes(t, nt, PATHS[i], p, tok, buf, NULL) / 1e6);
        printf("\n");
    }
    printf("MB sent per rank per step, and the peak MB its exchange holds (the tables' dense gradient\n"
           "included), summed over the tables; per table of V rows x C (4-byte floats and ids),\n"
           "S = rows (+ V if tied to the head), u = min(rows, V), U = min(p x rows, V), the union at\n"
           "its largest (every rank's rows distinct):\n"
           "  dense:  all-reduce 2(p-1)/p x 4VC; buffers 4VC (reduced in place)\n"
           "  sparse: all-gather (p-1) x S x 4(C+1); buffers 4VC + (p+1) x S x 4(C+1)\n"
           "  split:  all-gather (p-1) x 4u ids + all-reduce 2(p-1)/p x 4UC (+ 2(p-1)/p x 4VC tied);\n"
           "          buffers 4VC + 4(2V + (p+1)u) + 4(u + min(pu, V))C\n");
}

/* The fewest ranks at which the sparse path sends more than the dense
 * one for a table (the formulas above; from p = 2 when tied, since the
 * head's share alone is V slices), up to 1 << 20. */
static int gather_overtakes(const emb_tab *t, size_t tok) {
    int p = 2;
    while (p < 1 << 20 && cb_dp_embed_bytes_moved(CB_DP_EMBED_SPARSE, p, t->V, t->C, tok, t->tied, 0) <=
                              cb_dp_embed_bytes_moved(CB_DP_EMBED_DENSE, p, t->V, t->C, tok, t->tied, 0))
        p++;
    return p;
}

/* Where gathering overtakes reducing (sparse sends more than dense:
 * p > 2VC / (S(C+1))), for the table as it is and for its lookup rows
 * alone (the head untied), with TF's "assumed sparse" reading in mind. */
static void embed_crossover(const emb_tab *t, size_t tok) {
    emb_tab u = *t;
    u.tied = 0;
    double S = (double)tok + (t->tied ? (double)t->V : 0), V = (double)t->V, C = (double)t->C;
    printf("gathering overtakes reducing (sparse sends more than dense once p > 2VC/(S(C+1))):\n"
           "  %s (S = %.0f): from p = %d (2VC/(S(C+1)) = %.2f)\n"
           "  the lookup rows alone, the head untied (S = %zu): from p = %d (%.2f)\n"
           "  peak buffers: sparse holds (p+1) x S x 4(C+1) bytes more than dense at every p\n",
           t->tied ? "the table tied to the head, its share as V slices" : "the table", S,
           gather_overtakes(t, tok), 2 * V * C / (S * (C + 1)), tok, gather_overtakes(&u, tok),
           2 * V * C / ((double)tok * (C + 1)));
}

/* --embed-grad: the formulas' table for the model's tables at 2..64
 * ranks, then (under mpirun) one measured exchange per path. */
static int bench_embed(const dp_bench *b, cb_comm *w, cb_err *e) {
    int ncf = !strcmp(b->model, "ncf"), nmt = !strcmp(b->model, "nmt"), rc = CB_OK;
    emb_tab t[4] = {{(size_t)b->vocab, (size_t)b->d_model, 1}};
    cb_ncf_config nc = {.users = b->users, .items = b->items, .factors = b->factors};
    if (ncf && (b->users < 1 || b->items < 1 || b->factors < 1))
        return cb_fail(e, CB_EINPUT, "--users, --items and --factors must be >= 1");
    if (ncf && (rc = cli_ncf_mlp(b->mlp, &nc, e))) return rc;
    char what[200];
    if (ncf) snprintf(what, sizeof what, "NCF's 4 embedding tables (GMF and MLP: users %d, items %d, "
                      "widths %d and %d)", b->users, b->items, nc.factors, nc.mlp[0] / 2);
    else snprintf(what, sizeof what, "%s, V=%d C=%d", nmt ? "the translation model's table (read "
                  "by the source's and the decoder's lookups and the tied head)" : "tied embedding "
                  "gradient", b->vocab, b->d_model);
    size_t tok = (size_t)b->batch * (ncf ? 1 : (size_t)b->seq_len * (nmt ? 2 : 1));
    int nt = ncf ? ncf_tables(&nc, t) : 1;
    embed_table(t, nt, tok, what, w->rank);
    if (!ncf && w->rank == 0) embed_crossover(&t[0], tok);
    return w->size > 1 ? embed_measured(w, b->model, e) : CB_OK;
}

static const char DP_EPILOG[] =
    "Run under the launcher, e.g.\n"
    "  mpirun -np 2 cubist bench --allreduce\n"
    "  mpirun -np 2 cubist bench --dp-step --threads 1    (scripts/bench_dp.sh: 1x1, 1x2, 2x1)\n"
    "  mpirun -np 2 cubist bench --embed-grad\n"
    "  mpirun -np 2 cubist bench --embed-grad --model ncf\n"
    "  mpirun -np 2 cubist bench --embed-grad --model nmt\n"
    "--batch is the global micro-batch of --dp-step and the per-rank sequences of\n"
    "--embed-grad's table (--model ncf: its rows per rank; --model nmt: pairs per\n"
    "rank, each T source and T decoder-input lookups, so 2 x batch x T rows).\n"
    "--model nmt's defaults: V 50260 (the model's vocabulary with --tokenizer gpt2),\n"
    "d 512, 64 pairs of T 64 (4096 tokens a side, Transformer-base's batch).\n";

int cmd_bench_dp(int argc, char **argv) {
    dp_bench b = {0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 2, 5, 1, 0, 25, "auto", "gpt",
                  "256,128,64", 1000000, 100000, 64, "fp32", 0};
    const cli_flag flags[] = {
        {"allreduce", ARG_BOOL, &b.allreduce, "fused buckets vs raw MPI_Allreduce"},
        {"dp-step", ARG_BOOL, &b.dp_step, "data-parallel training steps"},
        {"embed-grad", ARG_BOOL, &b.embed, "dense vs sparse embedding gradient, 2..64 ranks"},
        {"bucket-mb", ARG_DOUBLE, &b.bucket_mb, "fusion bucket MB (25)"},
        {"zero", ARG_INT, &b.zero, "--dp-step with ZeRO-1 (0)"},
        {"no-comm", ARG_BOOL, &b.no_comm,
         "--dp-step with every rank training alone on batch/ranks sequences (the ceiling)"},
        {"embed-mode", ARG_STR, &b.embed_mode,
         "--dp-step's embedding gradient: auto, dense, split or sparse (train's --embed-grad; auto)"},
        {"comm-dtype", ARG_STR, &b.comm_dtype,
         "--dp-step's gradient buckets on the wire: fp32 or bf16 (train's --comm-dtype; fp32)"},
        {"threads", ARG_INT, &b.threads, "threads per rank (1)"},
        {"steps", ARG_INT, &b.steps, "--dp-step timed steps after one warm-up (2)"},
        {"reps", ARG_INT, &b.reps, "timed repetitions of --allreduce and of --dp-step's lone reduction (5)"},
        {"layers", ARG_INT, &b.layers, "model (GPT-2 124M: 12)"},
        {"d-model", ARG_INT, &b.d_model, "(768; --model nmt 512)"},
        {"heads", ARG_INT, &b.heads, "(12; --model nmt 8)"},
        {"vocab", ARG_INT, &b.vocab, "(50304; --model nmt 50260)"},
        {"batch", ARG_INT, &b.batch, "sequences (4); --model ncf: rows per rank (2048); nmt: pairs per rank (64)"},
        {"seq-len", ARG_INT, &b.seq_len, "T (256; nmt 64; --embed-grad: tokens per rank = batch x T, nmt 2 x batch x T)"},
        {"model", ARG_STR, &b.model, "--embed-grad's model: gpt (its tied wte), ncf (NeuMF's 4 tables) or nmt "
                                     "(the translation model's shared table) (gpt)"},
        {"users", ARG_INT, &b.users, "--model ncf: user rows (1000000)"},
        {"items", ARG_INT, &b.items, "--model ncf: item rows (100000)"},
        {"factors", ARG_INT, &b.factors, "--model ncf: GMF width (64)"},
        {"mlp", ARG_STR, &b.mlp, "--model ncf: MLP widths, the tables mlp[0]/2 wide (256,128,64)"},
    };
    int n = (int)(sizeof flags / sizeof *flags), help = 0;
    cb_err e = {0};
    int rc = cli_parse("bench", argc, argv, flags, n, &help, &e);
    if (help && !rc) {
        cli_usage(stdout, "bench", "--allreduce | --dp-step | --embed-grad [flags]", flags, n, DP_EPILOG);
        return 0;
    }
    cb_err me = {0};
    if (cb_comm_init(&argc, &argv, &me)) return cli_fail(&me);
    cb_comm *w = cb_comm_world();
    omp_set_num_threads(b.threads);
    int nmt = !strcmp(b.model, "nmt");
    if (!b.batch) b.batch = nmt ? 64 : strcmp(b.model, "ncf") ? 4 : 2048;
    if (!b.seq_len) b.seq_len = nmt ? 64 : 256;
    if (!b.d_model) b.d_model = nmt ? 512 : 768;
    if (!b.vocab) b.vocab = nmt ? 50260 : 50304;
    if (!b.heads) b.heads = nmt ? 8 : 12;
    cb_gpt_config c = {b.layers, b.d_model, b.heads, b.seq_len, b.vocab};
    if (!rc && (b.threads < 1 || b.steps < 1 || b.batch < 1 || b.reps < 1))
        rc = cb_fail(&e, CB_EINPUT, "--threads, --steps, --reps and --batch must be >= 1");
    int mode;
    if (!rc && cb_dp_embed_parse(b.embed_mode, &mode, &e))
        rc = cb_fail(&e, CB_EINPUT, "--embed-mode '%s' is unknown; use auto, dense, split or sparse",
                     b.embed_mode);
    if (!rc) rc = cb_dp_comm_dtype_parse(b.comm_dtype, &b.comm_bf16, &e);
    if (!rc && strcmp(b.model, "gpt") &&
        ((strcmp(b.model, "ncf") && !nmt) || b.allreduce || b.dp_step))
        rc = cb_fail(&e, CB_EINPUT, "--model %s: the data-parallel benchmarks run gpt, and "
                                    "--embed-grad alone also ncf and nmt", b.model);
    if (!rc) rc = cb_gpt_config_check(&c, &e);
    if (!rc && b.allreduce && w->size < 2)
        rc = cb_fail(&e, CB_EINPUT, "--allreduce needs at least 2 ranks; run `mpirun -np 2 cubist bench --allreduce`");
    if (!rc && b.allreduce) rc = bench_allreduce(&b, w, &e);
    if (!rc && b.dp_step) rc = bench_dp_step(&b, w, &e);
    if (!rc && b.embed) rc = bench_embed(&b, w, &e);
    rc = cb_comm_agree_err(w, &e);
    if (rc) {
        char msg[sizeof e.msg + 8];
        snprintf(msg, sizeof msg, "error: %s", e.msg);
        cb_comm_exit(rc == CB_EINPUT ? 2 : 1, msg);
    }
    cb_comm_finalize();
    return 0;
}
