/* The planner: a performance model of one training step under any layout
 * (dp x pp x tp with mode 1d/2d/3d), from per-layer costs of the model and a
 * cluster description (calibrated on this machine or from datasheets).
 * Private to cubist; the command line (cli/cmd_plan.c) prints, the library
 * computes. Units: bytes, seconds, FLOPs. See docs/plan.md. */
#ifndef CB_PLAN_H
#define CB_PLAN_H

#include "comm/grid.h"
#include "cubist.h"
#include "dp/dp.h"

/* ------------------------------------------------------------ exact counts */

/* The tensor-parallel traffic of one forward + backward, by the tag prefix
 * of the collectives (cb_comm counters): linear (+ bias), norm, embed,
 * head, attn, other. */
enum { CB_PK_LINEAR, CB_PK_NORM, CB_PK_EMBED, CB_PK_HEAD, CB_PK_ATTN, CB_PK_OTHER, CB_PK_N };

/* A GPT step in doubles: N = B T tokens, C d_model, NH heads, V vocabulary
 * (unpadded), L layers. */
typedef struct cb_plan_shape {
    double N, B, T, C, NH, V, L;
    int act_bf16; /* --comm-dtype bf16: activation collectives send 2 bytes an element */
    int bf16;     /* --precision bf16: attention keeps what the bf16 table's attention_saved says */
} cb_plan_shape;

/* Per rank, one step (forward + backward, no optimizer): bytes sent as
 * cb_comm counts them (ring volume), collective calls, parameter +
 * gradient bytes (fp32); the graph engine's activation plan of the GPT
 * (src/graph/build.c) in one chunk: one micro-batch's slot (values and
 * kept state), the gradient buffers, and their sum for one micro-batch
 * in flight (act_model_bytes, what `bench --tp-step` measures); and the
 * layout's workspace planned at build (act_scratch_bytes). These equal
 * the counters of a real run. */
typedef struct cb_plan_tp_cost {
    double sent[CB_PK_N], calls[CB_PK_N];
    double param_bytes, act_model_bytes, act_scratch_bytes;
    double act_slot_bytes, act_grad_bytes;
} cb_plan_tp_cost;

/* tp ranks of mode; diag: 2-D rank (r, r); gathered: 3-D keeps X^, W^. */
void cb_plan_tp_cost_of(const cb_plan_shape *s, cb_tp_mode mode, int tp, int diag, int gathered,
                        cb_plan_tp_cost *c);
double cb_plan_tp_sent(const cb_plan_tp_cost *c);
double cb_plan_tp_calls(const cb_plan_tp_cost *c);
/* The same counts per operator (counts.c says each form), accumulated
 * in sent (bytes) and calls: the GPT's closed forms are their sums, a
 * declared graph is counted node by node. P tensor ranks of mode, q the
 * grid's side, w bytes an activation element on the wire; diag: 2-D rank
 * (r, r); gathered: 3-D keeps X^, W^. */
typedef struct cb_plan_tpop {
    cb_tp_mode mode;
    double P, q, w;
    int gathered, diag;
    double sent, calls;
} cb_plan_tpop;
cb_plan_tpop cb_plan_tpop_of(cb_tp_mode mode, int P, int act_bf16, int gathered, int diag);
void cb_plan_tp_linear(cb_plan_tpop *o, double N, double in, double out, int parity);
void cb_plan_tp_norm(cb_plan_tpop *o, double N, double C, int parity);
void cb_plan_tp_embed(cb_plan_tpop *o, double N, double C, double V, double T, int learned);
void cb_plan_tp_head(cb_plan_tpop *o, double N, double C, double V, int weighted, int bias,
                     int rewritten);
void cb_plan_tp_whole(cb_plan_tpop *o, double bytes);
/* bytes sent per rank by a ring all-reduce of `bytes` on p ranks */
double cb_plan_ring_allreduce(double p, double bytes);
/* V rounded up to a multiple of m: the padded vocabulary of a layout */
double cb_plan_pad(double V, double m);

#endif

/* ------------------------------------------------------------ model */

/* One forward GEMM of a layer: (tokens, in) @ (in, out). */
typedef struct cb_plan_gemm {
    double in, out;
} cb_plan_gemm;

/* A kind of layer, repeated `count` times, described per token so that any
 * model is data: GPT today; an encoder or a decoder with cross-attention
 * is more rows. Backward costs twice the forward's GEMMs and attention. */
typedef struct cb_plan_layer {
    const char *name;
    int count;
    int ngemm;
    cb_plan_gemm gemm[4];
    double attn_flops;  /* forward attention FLOPs per token (scores and context) */
    double head_size;   /* C / NH: attention's rate depends on it */
    double mem_bytes;   /* forward bytes read + written by memory-bound kernels per
                           token, split by every tensor layout */
    double mem_norm;    /* the same for LayerNorm and residuals: replicated under 1-D */
    double params;      /* parameters (floats) of one layer */
    double ew[2];       /* elements per token of the compute-bound element-wise kernels
                           (CB_PLAN_EW_*), at the cluster's per-element rate */
    double seq;         /* the keys a query of its attention sees (T): its rate depends on it */
} cb_plan_layer;

#define CB_PLAN_MAXLAYER 4
/* GPT is planned from its rows and the closed forms of counts.c; the
 * other built-in models from their declared graph (src/plan/graph.c):
 * the engine's own plan of each pipeline rank gives parameters,
 * activations, workspace and pipeline messages, and each node a cost. */
enum { CB_PLAN_FAM_GPT, CB_PLAN_FAM_BERT, CB_PLAN_FAM_NMT, CB_PLAN_FAM_NCF };
typedef struct cb_plan_model {
    char name[16];
    cb_gpt_config gpt; /* the sizes the exact count formulas take */
    int family;        /* CB_PLAN_FAM_*; GPT: 0 */
    cb_bert_config bert;
    cb_nmt_config nmt;
    cb_ncf_config ncf;
    int T;             /* graph models: tokens per row (sequence length; NCF 1) */
    double params;     /* graph models: parameters of the whole model (floats) */
    int nlayer;
    cb_plan_layer layer[CB_PLAN_MAXLAYER]; /* in execution order */
} cb_plan_model;

/* GPT-2 (tied embedding and head, GELU MLP of 4C). */
void cb_plan_model_gpt(const cb_gpt_config *c, cb_plan_model *m);
double cb_plan_model_params(const cb_plan_model *m);
/* BERT or RoBERTa (c->roberta), the translation model, NCF: the model
 * described by its declared graph (its whole-model parameter count from
 * the engine's plan); CB_EINPUT when the graph does not declare. */
int cb_plan_model_bert(const cb_bert_config *c, cb_plan_model *m, cb_err *e);
int cb_plan_model_nmt(const cb_nmt_config *c, int T, cb_plan_model *m, cb_err *e);
int cb_plan_model_ncf(const cb_ncf_config *c, cb_plan_model *m, cb_err *e);
/* Forward FLOPs of one token through the model (GEMMs and attention). */
double cb_plan_model_flops(const cb_plan_model *m);

/* ------------------------------------------------------------ cluster */

/* A link tier: per-device bandwidth (bytes/s) and latency (s) of one message. */
typedef struct cb_plan_tier {
    double bandwidth, latency;
} cb_plan_tier;

/* A measured collective: time = alpha + sent / beta for `ranks` ranks,
 * sent = the ring volume per rank that cb_comm counts. */
typedef struct cb_plan_coll {
    char op[16];
    int ranks;
    double alpha, beta;
} cb_plan_coll;

/* Element-wise kernels that compute more than they move (the exact GELU's
 * erf, dropout's counter-based mask): timed per element, not by bytes. */
enum { CB_PLAN_EW_GELU_ERF, CB_PLAN_EW_DROPOUT, CB_PLAN_NEW };
#define CB_PLAN_MAXEFF 16
#define CB_PLAN_MAXCOLL 16
#define CB_PLAN_MAXSHAPE 64 /* cluster.c's read_shapes names it */
/* A device's compute rates for bf16 products (--precision bf16): the
 * fields of the same names below, for GEMMs on bf16 operands with fp32
 * accumulation and attention's products through them (a calibrated CPU's
 * rates include the kernels' rounding passes). peak_flops 0: the device
 * has no bf16 rates (a V100, a CPU without bf16 instructions, a file
 * calibrated without --precision bf16). */
typedef struct cb_plan_bf16_rates {
    double peak_flops, attn_efficiency;
    int neff;
    double eff_intensity[CB_PLAN_MAXEFF], eff[CB_PLAN_MAXEFF];
    int nshape;
    double shape[CB_PLAN_MAXSHAPE][4];
    int natt;
    double att_hs[CB_PLAN_MAXEFF], att_eff[CB_PLAN_MAXEFF];
    int nseq;
    double att_seq[CB_PLAN_MAXEFF], att_seq_eff[CB_PLAN_MAXEFF];
    double reorder_bandwidth;
} cb_plan_bf16_rates;
typedef struct cb_plan_cluster {
    char name[160];
    int nodes, devices_per_node, threads; /* threads: OpenMP threads per device (CPU) */
    double peak_flops;     /* per device, fp32 */
    double memory_bytes;   /* per device */
    double mem_bandwidth;  /* per device, bytes/s of memory-bound kernels */
    /* optional (0: not known): per device with every device of a node
     * streaming at once; the last-level cache of a node and the rate of the
     * memory-bound kernels on a working set that fits it (docs/plan.md,
     * Memory traffic) */
    double mem_bandwidth_shared, cache_bytes, cache_bandwidth;
    /* optional: the update's rate (its bytes: optimizer_s's count), alone
     * and with every device of a node updating at once (0: mem_bandwidth's) */
    double update_bandwidth, update_bandwidth_shared;
    /* optional (0: not known, taken as 1): the share of its GEMM rate alone
     * that a device keeps with every device of a node running GEMMs at once
     * (one thread each); it scales the compute of layouts with more than
     * one rank on a node (docs/plan.md, Compute shared) */
    double gemm_shared;
    double attn_efficiency; /* attention kernels, fraction of peak */
    int neff;              /* GEMM efficiency vs arithmetic intensity (FLOP/byte) */
    double eff_intensity[CB_PLAN_MAXEFF], eff[CB_PLAN_MAXEFF];
    /* optional: GEMM efficiency measured at shard shapes (m, k, n, eff):
     * corrects the curve near them (cb_plan_gemm_eff_at) */
    int nshape;
    double shape[CB_PLAN_MAXSHAPE][4];
    int natt; /* optional: attention efficiency vs head size (0: attn_efficiency) */
    double att_hs[CB_PLAN_MAXEFF], att_eff[CB_PLAN_MAXEFF];
    /* optional: attention efficiency vs sequence length at head size 64
     * (0: none; the head-size curve's alone) */
    int nseq;
    double att_seq[CB_PLAN_MAXEFF], att_seq_eff[CB_PLAN_MAXEFF];
    /* optional (bf16 rates only; 0: the update's rate): bytes/s of
     * rewriting the weights' copies in oneDNN's layout after an update,
     * 2 x the layout's bytes (the plain bf16 copy read, the layout written) */
    double reorder_bandwidth;
    double ew_s[CB_PLAN_NEW]; /* optional: seconds per element, forward + backward, of the
                                 CB_PLAN_EW_* kernels (0: timed as 8 bytes at mem_bandwidth) */
    cb_plan_tier intra, inter; /* inter: bandwidth of a node's network port */
    int ncoll;
    cb_plan_coll coll[CB_PLAN_MAXCOLL];
    cb_plan_bf16_rates bf16; /* optional ("device.bf16"): peak_flops 0 when absent */
} cb_plan_cluster;

/* c as the planner sees it under --precision bf16: out = c with its
 * compute rates (peak, GEMM curve and shapes, attention) the bf16 ones
 * (out NULL: only the check); CB_EINPUT naming the file's missing
 * section when c has none. */
int cb_plan_cluster_bf16(const cb_plan_cluster *c, cb_plan_cluster *out, cb_err *e);
/* the same without the check: the bf16 rates as they are (0: not
 * measured), out's own bf16 section cleared */
void cb_plan_cluster_bf16_view(const cb_plan_cluster *c, cb_plan_cluster *out);
/* c->bf16 = the compute rates of `rates` (a cluster calibrated on bf16 products) */
void cb_plan_cluster_set_bf16(cb_plan_cluster *c, const cb_plan_cluster *rates);

/* Reads and checks a cluster file: a missing, negative or zero field is
 * CB_EINPUT naming the field. */
int cb_plan_cluster_read(const char *path, cb_plan_cluster *c, cb_err *e);
int cb_plan_cluster_parse(const char *text, size_t len, const char *path, cb_plan_cluster *c,
                          cb_err *e);
/* Writes c atomically; `source` names where the figures come from. */
int cb_plan_cluster_write(const char *path, const cb_plan_cluster *c, const char *source,
                          cb_err *e);
/* GEMM efficiency at an arithmetic intensity (log-linear between points). */
double cb_plan_gemm_eff(const cb_plan_cluster *c, double intensity);
/* A GEMM (m, k) @ (k, n)'s efficiency: the curve at its intensity, times
 * measured / curve at the nearest shape measured within a factor 2 in
 * every dimension (none: the curve alone). */
double cb_plan_gemm_eff_at(const cb_plan_cluster *c, double m, double k, double n);
/* Attention's efficiency at a head size and sequence length T: the
 * head-size curve (else attn_efficiency, the presets' one stated figure),
 * and with a sequence-length curve that curve at T times the head-size
 * curve's ratio at this head size to 64 (T <= 0: the head-size curve). */
double cb_plan_attn_eff(const cb_plan_cluster *c, double head_size, double T);

/* ------------------------------------------------------------ prediction */

enum { CB_PLAN_GPIPE, CB_PLAN_1F1B, CB_PLAN_INTERLEAVED };
const char *cb_plan_schedule_name(int schedule);

typedef struct cb_plan_layout {
    int dp, pp, tp;
    cb_tp_mode mode;
    int schedule, M, v; /* pipeline: schedule, micro-batches per step, virtual stages */
    int recompute;      /* 1: blocks recomputed in backward (activation checkpointing) */
    int zero;           /* 1: AdamW state sharded over dp (ZeRO-1) */
    int gathered;       /* 3-D: X^ and W^ kept for backward */
    int embed;          /* dp's tied-embedding gradient (--embed-grad): a cb_dp_embed,
                           dense, sparse or split (src/dp/dp.h), not auto */
} cb_plan_layout;

/* A step: `batch` sequences of T tokens in M micro-batches of batch / M. */
typedef struct cb_plan_job {
    const cb_plan_model *model;
    const cb_plan_cluster *cluster;
    int batch, T;
    double bucket_bytes; /* data-parallel fusion bucket (25 MB) */
    int comm_bf16;       /* --comm-dtype bf16: the gradient buckets travel in bf16 */
    int bf16;            /* --precision bf16: the cluster's bf16 rates, the bf16 table's memory */
} cb_plan_job;

#define CB_PLAN_MAXSTAGE 64

/* Seconds by kernel class: GEMMs, attention, memory-bound kernels. */
typedef struct cb_plan_kparts {
    double gemm_s, attn_s, mem_s;
} cb_plan_kparts;

/* Per device (the bottleneck pipeline stage), one optimizer step. Time in
 * seconds: step = (M + (pp-1)/v) x the micro-batch time of the stage
 * (compute + recompute + tp + pp) + exposed dp + optimizer. Memory in
 * bytes. Traffic per rank: bytes sent (ring volume) and calls. */
typedef struct cb_plan_pred {
    double step_s, compute_s, recompute_s, tp_s, pp_s, bubble_s, dp_s, dp_exposed_s, opt_s;
    double mem_params, mem_grads, mem_opt, mem_act, mem_scratch, mem_comm, mem_total;
    double mem_bf16; /* --precision bf16: the bf16 table's weight copies and operand
                        staging (in mem_total; docs/plan.md) */
    double bf16_packed; /* of mem_bf16, the weights' copies in oneDNN's layout (CPUs
                           without AMX), which the table rewrites after every update */
    double pack_s;      /* their rewrite a step: read the plain copy, write the layout's
                           (in step_s; the bench profiles it in its GEMM class) */
    double tp_bytes, tp_calls, pp_bytes, pp_calls, dp_bytes, dp_calls;
    cb_plan_kparts kern; /* compute_s by kernel class */
    /* pipeline of one chunk per stage: stage s holds modules [bound[s],
     * bound[s+1]) (0 the embedding, 1..L the blocks, L+1 the head, as
     * `cubist train --partition` counts them) and plans stage_act[s]
     * activation bytes (the log's pp_act_bytes); mem_act is the largest.
     * nstage 0: not predicted per stage (interleaved, or over 128 blocks) */
    int nstage, stage_bound[CB_PLAN_MAXSTAGE + 1];
    double stage_act[CB_PLAN_MAXSTAGE];
    /* the graph models under a pipeline with tensor parallelism: each
     * stage's tensor bytes and calls of a step (tp_bytes is the slowest
     * stage's); 0 otherwise */
    double stage_tp_bytes[CB_PLAN_MAXSTAGE], stage_tp_calls[CB_PLAN_MAXSTAGE];
    cb_plan_tp_cost tp; /* one micro-batch of the stage: the exact per-kind counts */
} cb_plan_pred;

/* Forward seconds of a layer row on this rank for `tok` tokens of its
 * tensor group, by kernel class (the layout's shards of its GEMMs). */
cb_plan_kparts cb_plan_layer_parts(const cb_plan_cluster *c, const cb_plan_layer *y,
                                   const cb_plan_layout *l, double tok);

/* One pipeline rank s of a layout, from the model's graph as the engine
 * plans it (src/plan/graph.c): parameters (floats), activation and
 * workspace bytes, the floats and messages one micro-batch sends over the
 * pipeline, its forward seconds per micro-batch by kernel class, its
 * tensor traffic (bytes, calls) under any mode, and the loss's counts. */
typedef struct cb_plan_gstage {
    double params, act, ws, send_floats, msgs;
    double zeroed; /* gradient floats the step clears (the engine's first-write plan) */
    cb_plan_kparts k;
    double tp_sent, tp_calls;
    double stat_bytes[2]; /* the loss's per-step counts all-reduced over dp (MLM
                             targets, one double; targets not padding, two) */
    double lookups;       /* embedding nodes (the translation model's encoder and decoder
                             inputs: 2): rows of the tied table per token */
    double bf16_weights;  /* floats of the weights the stage's products read (linears, the
                             head's table), whole: the bf16 table's copies (predict.c) */
    double bf16_staging;  /* --precision bf16: the bf16 table's operand staging for the
                             stage's calls and (CPUs without AMX) its copies of the weights
                             in oneDNN's layout, bytes */
    double bf16_packed;   /* of bf16_staging, those copies in oneDNN's layout */
} cb_plan_gstage;
/* --precision bf16: the bf16 table's operand staging (need[], its
 * CB_BF16_SLOTS slots' maxima) and copies in oneDNN's layout (*packed,
 * bytes, added) for one linear (whole widths in -> out, on an input of
 * parity p), the tied head (V x C), attention a (whole) or the logistic
 * head (C features; its weight's plain copy in *packed too), on N rows of
 * a rank of layout l, nthr threads (predict.c) */
void cb_plan_bf16_linear(const cb_plan_layout *l, int nthr, double *need, double *packed, int N,
                         int in, int out, int parity);
void cb_plan_bf16_head(const cb_plan_layout *l, int nthr, double *need, double *packed, int N,
                       int C, int V);
void cb_plan_bf16_attention(const cb_plan_layout *l, int nthr, double *need, cb_attn a);
/* the floats of the tied head's weight (V x C) that a stage holding the
 * head keeps a bf16 copy of, before the rank's 1/tp share is taken: under
 * 1-D V padded to a multiple of tp, else V (predict.c) */
double cb_plan_bf16_head_weights(const cb_plan_layout *l, int V, int C);
void cb_plan_bf16_logit(const cb_plan_layout *l, double *need, double *packed, int N, int C,
                        int parity);
/* part (cap bytes, or NULL): "" on the first stage, which writes there
 * the engine's partition by operation (GPT's modules are blocks: not
 * written); the next stages reuse it instead of partitioning again. */
int cb_plan_graph_stage(const cb_plan_job *j, const cb_plan_layout *l, int s, char *part,
                        size_t cap, cb_plan_gstage *g, cb_err *e);

/* Can the layout run this model and batch (cubist's divisibility rules)?
 * CB_EINPUT with the reason otherwise. */
int cb_plan_check(const cb_plan_job *j, const cb_plan_layout *l, cb_err *e);
void cb_plan_predict(const cb_plan_job *j, const cb_plan_layout *l, cb_plan_pred *p);
/* Time of `calls` collectives `op` sending `sent` bytes per rank in all, on
 * a group of `size` ranks `stride` apart in the world (ranks fill nodes in
 * order): a measured alpha-beta when the cluster has one for (op, size),
 * else the link tier's, ring or recursive doubling as the MPI would pick. */
double cb_plan_coll_time(const cb_plan_cluster *c, const char *op, int size, int stride,
                         double sent, double calls);

/* Every layout of `devices` ranks that passes cb_plan_check and fits
 * max_mem bytes per device (0: the cluster's), sorted by predicted step
 * time; out[cap], returns how many (all of them counted even past cap). */
typedef struct cb_plan_choice {
    cb_plan_layout l;
    cb_plan_pred p;
} cb_plan_choice;
int cb_plan_enumerate(const cb_plan_job *j, int devices, double max_mem, int fixed_M,
                      cb_plan_choice *out, int cap);
/* "dense", "sparse", "split" */
const char *cb_plan_embed_name(int embed);
/* "dp2 pp1 tp1 1d gpipe M1" */
void cb_plan_layout_name(const cb_plan_layout *l, char *buf, size_t cap);

/* ------------------------------------------------------------ calibration */

/* What calibration measures, as functions so that a test can feed rates
 * (a fake timer) instead of timing kernels. Each returns seconds of one
 * forward + backward: a GEMM (m,k) @ (k,n); the memory-bound kernels of a
 * block on (N, C) activations; attention on (B, T, C) with NH heads. coll:
 * one collective `op` of a vector of n floats on the probe's ranks. */
typedef struct cb_plan_probe {
    double (*gemm)(void *ctx, int m, int k, int n);
    double (*memory)(void *ctx, int N, int C);
    double (*attention)(void *ctx, int B, int T, int C, int NH);
    double (*coll)(void *ctx, const char *op, int n);
    void *ctx;
    int ranks; /* ranks that coll runs on; < 2: no collectives measured */
    /* one forward + backward of element-wise kernel `kind` (CB_PLAN_EW_*)
     * over n elements; NULL: not measured */
    double (*elementwise)(void *ctx, int kind, int n);
    /* seconds of one memory() iteration per stream, `streams` single-thread
     * streams running at once on their own buffers; NULL: not measured */
    double (*memory_shared)(void *ctx, int N, int C, int streams);
    double cache_bytes; /* the last-level cache (0: unknown: no in-cache rate) */
    /* seconds of the step's update (the gradient's squared norm, the 1/dp
     * scale, AdamW: 40 bytes a parameter, no clearing) of n parameters per
     * stream, `streams` at once (1: alone); NULL: not measured */
    double (*update)(void *ctx, int n, int streams);
    /* the share of its rate alone that gemm()'s GEMM keeps on each of
     * `streams` single-thread streams running it at once on their own
     * operands (0: never ran together); NULL: not measured */
    double (*gemm_shared)(void *ctx, int m, int k, int n, int streams);
    /* seconds of rewriting the copy in oneDNN's layout that the probe's
     * table keeps of a (k, n) weight read by products of m rows, and in
     * *bytes that copy's size (0: the table keeps none); NULL: not measured */
    double (*reorder)(void *ctx, int m, int k, int n, double *bytes);
} cb_plan_probe;

/* Where a team's cores must sit for cb_plan_probe_cpu's windows to count,
 * on a VM whose hypervisor moves them (docs/plan.md, Validation): want 1
 * near, 2 apart, by the cores' round trip measured right after each
 * window (near: up to CB_RT_NEAR_NS, kernels/peak.h); 0 every
 * window (the default). A figure with no window in the wanted state is
 * not measured: the probe returns INFINITY and the calibration writes 0
 * (cb_plan_cluster_best fills it from other runs). One thread is not judged;
 * single-thread streams together (the shared figures) are. The counts of
 * windows judged and kept since the last call go to *judged and *kept
 * (either may be NULL). */
void cb_plan_probe_placement(int want, int *judged, int *kept);

/* The collectives calibration measures (cb_plan_coll.op). */
#define CB_PLAN_NOPS 6
extern const char *const CB_PLAN_OPS[CB_PLAN_NOPS];
/* Bytes sent per rank (cb_comm's ring volume) by `op` of n floats on p ranks. */
double cb_plan_op_sent(const char *op, int p, double n);

/* Fills c's device rates (peak = the best GEMM rate measured, efficiency
 * curve, memory bandwidth, attention efficiency) and, with ranks >= 2,
 * its collectives and intra-node tier. quick: fewer, smaller shapes. */
void cb_plan_calibrate(const cb_plan_probe *pr, int quick, cb_plan_cluster *c);
/* The figures of one thread a device with every device of a node running
 * at once (c->threads 1, c->devices_per_node 2 or more; not with quick):
 * gemm_shared, mem_bandwidth_shared and update_bandwidth_shared, each 0
 * where no window ran together (in the placement wanted,
 * cb_plan_probe_placement); c's other figures as they were. Part of
 * cb_plan_calibrate. */
void cb_plan_calibrate_shared(const cb_plan_probe *pr, int quick, cb_plan_cluster *c);
/* c->bf16 from a probe of bf16 products (cb_plan_probe_cpu_bf16): the
 * GEMM curve and shapes, attention (at T 512: the fused kernel). */
void cb_plan_calibrate_bf16(const cb_plan_probe *pr, int quick, cb_plan_cluster *c);
/* Only the collectives (and the intra-node tier) of pr->ranks ranks. */
void cb_plan_calibrate_comm(const cb_plan_probe *pr, int quick, cb_plan_cluster *c);
/* The best of n calibrations of one machine, figure by figure, into out
 * (the first's name, shape and curve points): the highest rate, the
 * lowest time and latency; efficiencies the highest rate (efficiency x
 * its run's peak) over the highest peak. The machine slows a run, never
 * speeds one up, as the validation's fastest run of each case assumes
 * (docs/plan.md, Calibration). spread[k]: (max - min) /
 * median of the peak, the memory bandwidth, the shared bandwidth, the
 * in-cache rate, attention at head size 64, the update's rates and the
 * GEMM's shared share (CB_PLAN_SPREAD_*). A figure is measured where
 * non-zero; one that no run measured is fb's (0 when fb is NULL; a
 * curve's point only when fb's curves have the runs' points), scaled to
 * the runs' speed (the median ratio of theirs to fb's where both
 * measured, a curve's by its own points where it has any): the
 * validation's calibrations of one placement of the cores take what
 * they could not time in it from every calibration's best. */
#define CB_PLAN_MAXRUNS 16
enum { CB_PLAN_SPREAD_PEAK, CB_PLAN_SPREAD_MEM, CB_PLAN_SPREAD_SHARED, CB_PLAN_SPREAD_CACHE,
       CB_PLAN_SPREAD_ATTN, CB_PLAN_SPREAD_UPDATE, CB_PLAN_SPREAD_UPDATE_SHARED,
       CB_PLAN_SPREAD_GEMM_SHARED, CB_PLAN_NSPREAD };
void cb_plan_cluster_best(const cb_plan_cluster *runs, int n, const cb_plan_cluster *fb,
                          cb_plan_cluster *out, double spread[CB_PLAN_NSPREAD]);
/* The bandwidth a rank's memory-bound kernels and update get under layout
 * l with a working set of ws bytes per rank (docs/plan.md, Memory
 * traffic): in cache, streaming alone, or sharing the node's memory. */
double cb_plan_mem_rate(const cb_plan_cluster *c, const cb_plan_layout *l, double ws);
/* The same for the update: its own rates when calibrated, the in-cache
 * gain of the memory-bound kernels applied to it. */
double cb_plan_update_rate(const cb_plan_cluster *c, const cb_plan_layout *l, double ws);
/* The probe that times cubist's own CPU kernels (OpenMP threads as set)
 * and, when MPI is running with more than one rank, MPI_COMM_WORLD. */
void cb_plan_probe_cpu(cb_plan_probe *pr);
/* The same on the bf16 kernel table (ctx: the table; NULL when oneDNN
 * cannot start) */
void cb_plan_probe_cpu_bf16(cb_plan_probe *pr);

/* ------------------------------------------------------------ --layout auto */

/* The fastest layout of `world` ranks for j (j->batch = the step's
 * sequences, M micro-batches fixed by the caller), without recompute or
 * ZeRO (the caller's own choices); why: one line saying what it costs and
 * what came next. CB_EINPUT when no layout fits or divides. */
int cb_plan_auto(const cb_plan_job *j, int world, int M, cb_plan_layout *best, char *why,
                 size_t cap, cb_err *e);
