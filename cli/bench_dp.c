/* `cubist bench --allreduce | --dp-step | --embed-grad`: the data-parallel
 * benchmarks, run under the MPI launcher (mpirun -np N cubist bench ...).
 *   --allreduce   fused-bucket all-reduce of the GPT-2 124M gradient block
 *                 (the trainer's own bucket code, every bucket started at
 *                 once) against one raw MPI_Allreduce of the same bytes
 *   --dp-step     training steps of the data-parallel trainer on synthetic
 *                 tokens: tokens/s, backward, the wait for buckets after
 *                 backward and the share of the reduction hidden behind it
 *                 (scripts/bench_dp.sh compares 1x1, 1x2 and 2x1)
 *   --embed-grad  bytes moved and peak buffer memory of the dense and the
 *                 sparse (TF + Horovod) embedding-gradient exchange for 2..64
 *                 ranks, from formulas; at this job's rank count they are
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
    const char *embed_mode;
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
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < b->reps + 1; r++)
        for (int fused = 0; fused < 2; fused++) { /* interleaved: same machine state */
            double s = time_reduce(w, d, x.m->grads, n, fused);
            if (r > 0 && s < best[fused]) best[fused] = s; /* first round warms up */
        }
    int p = w->size;
    double bytes = 4.0 * n, bus = 2.0 * (p - 1) / p * bytes;
    if (w->rank == 0)
        printf("all-reduce of %.1f MB (GPT-2 %dL d%d gradient) over %d ranks, best of %d:\n"
               "  fused buckets (%d x %g MB, non-blocking) %8.1f ms  bus %6.2f GB/s\n"
               "  raw MPI_Allreduce                       %8.1f ms  bus %6.2f GB/s\n"
               "  ratio fused / raw                       %8.3f\n",
               bytes / 1e6, b->layers, b->d_model, p, b->reps, d->nb, b->bucket_mb, best[1] * 1e3,
               bus / best[1] / 1e9, best[0] * 1e3, bus / best[0] / 1e9, best[0] / best[1]);
    dp_model_free(&x);
    return CB_OK;
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
               "\"embed\":\"%s\",\"zero\":%d,\"no_comm\":%d}\n",
               w->size, omp_get_max_threads(), b->batch, b->seq_len,
               b->batch * b->seq_len / (step / 1e3), step, sum.forward_ms / b->steps,
               sum.backward_ms / b->steps, sum.update_ms / b->steps - wait, wait, alone, hidden,
               dp ? m->dp.nb + m->dp.nsplit : 0, early, late, path, b->zero, b->no_comm);
    dp_model_free(&x);
    return CB_OK;
}

/* One data-parallel step of a small model with the sparse path, and one
 * dense all-reduce of its embedding gradient: the counters and buffers
 * against the formulas at this job's rank count. */
static int embed_measured(cb_comm *w, cb_err *e) {
    const int V = 512, C = 64, B = 2, T = 32;
    cb_gpt_config c = {1, C, 4, T, V};
    dp_model x;
    int rc = dp_model_init(&x, &c, B * w->size, T, 0, 0, CB_DP_EMBED_SPARSE, 25, 1, e);
    if (rc) {
        dp_model_free(&x);
        return rc;
    }
    cb_model *m = x.m;
    cb_comm *dpg = &m->d->g.dpg;
    cb_comm_stats_reset(dpg);
    cb_model_train_step(m, x.ids, x.targets, 0, NULL);
    const cb_comm_stat *sp = cb_comm_stats_find(dpg, "embed.sparse");
    double ms = sp ? (double)sp->bytes_sent : -1;
    cb_comm_allreduce(dpg, "embed.dense", NULL, m->grads, (size_t)V * C, CB_COMM_SUM);
    const cb_comm_stat *dn = cb_comm_stats_find(dpg, "embed.dense");
    int p = w->size;
    double fs = cb_dp_embed_bytes_moved(0, p, V, C, B * T), fd = cb_dp_embed_bytes_moved(1, p, V, C, B * T);
    double md = dn ? (double)dn->bytes_sent : -1;
    /* the sparse buffers as allocated, plus the dense gradient they sum into */
    double bs = (double)m->dp.buf_bytes + sizeof(float) * (double)m->pt.t[0].numel;
    double fbs = cb_dp_embed_buffer_bytes(0, p, V, C, B * T);
    int ok = fabs(ms - fs) < 1 && fabs(md - fd) < 1 && fabs(bs - fbs) < 1;
    if (w->rank == 0)
        printf("measured at %d ranks (V=%d C=%d, %d tokens per rank): sparse sent %.0f B "
               "(formula %.0f), buffers %.0f B (formula %.0f); dense sent %.0f B (formula "
               "%.0f): %s\n",
               p, V, C, B * T, ms, fs, bs, fbs, md, fd, ok ? "formulas match" : "MISMATCH");
    dp_model_free(&x);
    return ok ? CB_OK : cb_fail(e, CB_EINTERNAL, "embedding exchange counters differ from the formulas");
}

static void embed_table(const dp_bench *b, int rank) {
    if (rank) return;
    size_t V = (size_t)b->vocab, C = (size_t)b->d_model, tok = (size_t)b->batch * b->seq_len;
    printf("tied embedding gradient, V=%zu C=%zu, %zu tokens per rank per step (weak scaling):\n"
           "%6s %16s %16s %8s %18s %18s\n",
           V, C, tok, "ranks", "dense MB/rank", "sparse MB/rank", "ratio", "dense buffer MB",
           "sparse buffer MB");
    for (int p = 2; p <= 64; p *= 2) {
        double d = cb_dp_embed_bytes_moved(1, p, V, C, tok), s = cb_dp_embed_bytes_moved(0, p, V, C, tok);
        printf("%6d %16.1f %16.1f %8.2f %18.1f %18.1f\n", p, d / 1e6, s / 1e6, s / d,
               cb_dp_embed_buffer_bytes(1, p, V, C, tok) / 1e6,
               cb_dp_embed_buffer_bytes(0, p, V, C, tok) / 1e6);
    }
    printf("dense: all-reduce, 2(p-1)/p x 4VC bytes sent per rank, the gradient reduced in place;\n"
           "sparse: all-gather of (p-1) x (tokens + V) (index, row) slices of 4(C+1) bytes, buffers\n"
           "the dense result + local slices + p gathered slices.\n");
}

static const char DP_EPILOG[] =
    "Run under the launcher, e.g.\n"
    "  mpirun -np 2 cubist bench --allreduce\n"
    "  mpirun -np 2 cubist bench --dp-step --threads 1    (scripts/bench_dp.sh: 1x1, 1x2, 2x1)\n"
    "  mpirun -np 2 cubist bench --embed-grad\n"
    "--batch is the global micro-batch of --dp-step and the per-rank sequences of\n"
    "--embed-grad's table.\n";

int cmd_bench_dp(int argc, char **argv) {
    dp_bench b = {0, 0, 0, 0, 12, 768, 12, 50304, 4, 256, 2, 5, 1, 0, 25, "auto"};
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
        {"threads", ARG_INT, &b.threads, "threads per rank (1)"},
        {"steps", ARG_INT, &b.steps, "--dp-step timed steps after one warm-up (2)"},
        {"reps", ARG_INT, &b.reps, "timed repetitions of --allreduce and of --dp-step's lone reduction (5)"},
        {"layers", ARG_INT, &b.layers, "model (GPT-2 124M: 12)"},
        {"d-model", ARG_INT, &b.d_model, "(768)"},
        {"heads", ARG_INT, &b.heads, "(12)"},
        {"vocab", ARG_INT, &b.vocab, "(50304)"},
        {"batch", ARG_INT, &b.batch, "sequences (4)"},
        {"seq-len", ARG_INT, &b.seq_len, "T (256; --embed-grad: tokens per rank = batch x T)"},
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
    cb_gpt_config c = {b.layers, b.d_model, b.heads, b.seq_len, b.vocab};
    if (!rc && (b.threads < 1 || b.steps < 1 || b.batch < 1 || b.reps < 1))
        rc = cb_fail(&e, CB_EINPUT, "--threads, --steps, --reps and --batch must be >= 1");
    int mode;
    if (!rc && cb_dp_embed_parse(b.embed_mode, &mode, &e))
        rc = cb_fail(&e, CB_EINPUT, "--embed-mode '%s' is unknown; use auto, dense, split or sparse",
                     b.embed_mode);
    if (!rc) rc = cb_gpt_config_check(&c, &e);
    if (!rc && b.allreduce && w->size < 2)
        rc = cb_fail(&e, CB_EINPUT, "--allreduce needs at least 2 ranks; run `mpirun -np 2 cubist bench --allreduce`");
    if (!rc && b.allreduce) rc = bench_allreduce(&b, w, &e);
    if (!rc && b.dp_step) rc = bench_dp_step(&b, w, &e);
    if (!rc && b.embed) embed_table(&b, w->rank);
    if (!rc && b.embed && w->size > 1) rc = embed_measured(w, &e);
    rc = cb_comm_agree_err(w, &e);
    if (rc) {
        char msg[sizeof e.msg + 8];
        snprintf(msg, sizeof msg, "error: %s", e.msg);
        cb_comm_exit(rc == CB_EINPUT ? 2 : 1, msg);
    }
    cb_comm_finalize();
    return 0;
}
