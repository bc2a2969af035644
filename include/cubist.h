/* cubist: train transformer models across many processes.
 * The one public header. Every public name carries the cb_ prefix; everything
 * else lives under src/ and is private. */
#ifndef CUBIST_H
#define CUBIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */
/* Functions that can fail return one of these and fill a cb_err; only the
 * command line decides to print and exit. CB_EINPUT is bad input from the
 * user (missing file, wrong shape, bad flag): the command exits with 2. */
enum { CB_OK = 0, CB_EINPUT = 2, CB_ESYS = 3, CB_ENOMEM = 4, CB_EINTERNAL = 5 };

typedef struct cb_err {
    int code;
    char msg[512];
} cb_err;

/* Sets e (may be NULL) and returns code. The message is one line: what is
 * wrong, then the fix. */
int cb_fail(cb_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- model */
typedef struct cb_gpt_config {
    int n_layer;   /* L */
    int d_model;   /* C */
    int n_head;    /* NH */
    int seq_len;   /* maximum context, rows of wpe */
    int vocab;     /* V, rows of wte */
} cb_gpt_config;

/* Checks what must hold for the model to be built (heads divide d_model...). */
int cb_gpt_config_check(const cb_gpt_config *c, cb_err *e);

/* One parameter tensor of the contiguous parameter block. Names and shapes
 * are Hugging Face GPT-2's (Conv1D weights stored [in, out]). Under tensor
 * parallelism the block holds this rank's shard of each tensor: shape is
 * the full tensor's, offset and numel the local shard's. */
typedef struct cb_tensor_info {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t offset; /* in floats, into the parameter block */
    size_t numel;
    int decay;     /* 1: AdamW weight decay applies */
    int layer;     /* transformer block index, -1 for embeddings, -2 for ln_f */
    int owner;     /* 1: this rank's copy counts in norms and checkpoints (a
                      replicated shard has one owner among its copies) */
} cb_tensor_info;

typedef struct cb_gpt cb_gpt;

/* Builds a model for micro-batches of at most B x T tokens (T <= seq_len).
 * Parameters are zero until cb_gpt_init_random or a load. */
int cb_gpt_create(const cb_gpt_config *c, int B, int T, cb_gpt **out, cb_err *e);
void cb_gpt_free(cb_gpt *m);
const cb_gpt_config *cb_gpt_get_config(const cb_gpt *m);

/* GPT-2 initialisation: N(0, 0.02), residual projections scaled by
 * 1/sqrt(2L), biases zero, LayerNorm weight one. Deterministic in seed. */
void cb_gpt_init_random(cb_gpt *m, uint64_t seed);

size_t cb_gpt_num_params(const cb_gpt *m);
int cb_gpt_num_tensors(const cb_gpt *m);
const cb_tensor_info *cb_gpt_tensor(const cb_gpt *m, int i);
float *cb_gpt_params(cb_gpt *m);
float *cb_gpt_grads(cb_gpt *m);

/* Forward on inp (B,T) token ids. With targets, returns the mean
 * cross-entropy over the B*T tokens; without (NULL), returns 0 and leaves the
 * probabilities of the next token readable through cb_gpt_probs. */
float cb_gpt_forward(cb_gpt *m, const int *inp, const int *targets, int B, int T);
/* Probabilities (B,T,V) of the last forward without targets. */
const float *cb_gpt_probs(const cb_gpt *m);
void cb_gpt_zero_grad(cb_gpt *m);
/* Backward of the last forward; the loss gradient is scaled by dloss_scale
 * (1/grad_accum for accumulation). Parameter gradients accumulate. */
void cb_gpt_backward(cb_gpt *m, float dloss_scale);

/* Called during backward as soon as the gradients of tensors [first, last]
 * (indices into the tensor table) are final for this micro-batch; data
 * parallelism starts its reductions from here. Also called with
 * first > last between operators (nothing new is final): a chance to
 * progress communication in flight. */
typedef void (*cb_grad_ready_fn)(void *ctx, int first, int last);
void cb_gpt_set_grad_hook(cb_gpt *m, cb_grad_ready_fn fn, void *ctx);

/* FLOPs per token of one training step (forward + backward):
 * 6 * N_params + 12 * L * C * T (attention scores and context, no causal
 * discount). */
double cb_gpt_flops_per_token(const cb_gpt_config *c, int T);

/* Checkpoints: safetensors with Hugging Face GPT-2 names and shapes; the
 * config travels in __metadata__ (n_layer, d_model, n_head, seq_len, vocab). */
int cb_gpt_save(cb_gpt *m, const char *path, cb_err *e);
/* Reads the config of a weights file: from its metadata, or inferred from
 * the shapes (then n_head must be given: pass the caller's value in c). */
int cb_gpt_config_from_file(const char *path, cb_gpt_config *c, cb_err *e);
/* Loads weights; every tensor must be present with the model's shape. */
int cb_gpt_load(cb_gpt *m, const char *path, cb_err *e);

/* ---------------------------------------------------------------- optimizer */
typedef struct cb_adamw_config {
    float lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    int warmup, steps;
    int decay_embeddings; /* also decay wte and wpe */
} cb_adamw_config;

/* Learning rate at 0-based step s: linear warmup lr*(s+1)/warmup, then cosine
 * from lr to min_lr at step `steps`. */
float cb_lr_at(const cb_adamw_config *c, int s);

/* ---------------------------------------------------------------- formats */
/* safetensors: 8-byte little-endian header length, JSON header, raw data.
 * Only F32 tensors are read and written. */
typedef struct cb_st_tensor {
    char name[96];
    int ndim;
    int64_t shape[4];
    size_t offset; /* bytes from the start of the data section */
    size_t nbytes;
} cb_st_tensor;

typedef struct cb_st_file {
    int n;
    cb_st_tensor *t;
    int nmeta;
    char **meta_key, **meta_val;
    uint8_t *map;        /* whole file, mmap'ed */
    size_t size;
    const uint8_t *data; /* start of the data section */
} cb_st_file;

/* Opens and validates: header length within the file, JSON well-formed,
 * dtype F32, shape consistent with data_offsets, offsets inside the data
 * section. Messages name the file and the tensor. */
int cb_st_open(const char *path, cb_st_file *f, cb_err *e);
void cb_st_close(cb_st_file *f);
const cb_st_tensor *cb_st_find(const cb_st_file *f, const char *name);
const char *cb_st_meta(const cb_st_file *f, const char *key);

typedef struct cb_st_entry {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} cb_st_entry;

/* Writes path atomically: path.tmp, fsync, rename; nothing left on failure.
 * meta is nmeta (key, value) string pairs for __metadata__. */
int cb_st_write(const char *path, const cb_st_entry *t, int n,
                const char *const *meta, int nmeta, cb_err *e);

/* Token files: llm.c (256 x int32 header, magic 20240520, version 1, count;
 * then uint16 tokens) or nanoGPT (headerless uint16), detected on open. */
enum { CB_TOK_LLMC = 1, CB_TOK_NANOGPT = 2 };
typedef struct cb_tokens {
    const uint16_t *tok;
    size_t n;
    int format;
    void *map;
    size_t maplen;
} cb_tokens;

/* Opens and validates every token against vocab. */
int cb_tokens_open(const char *path, int vocab, cb_tokens *t, cb_err *e);
void cb_tokens_close(cb_tokens *t);
/* Writes llm.c format atomically. */
int cb_tokens_write(const char *path, const uint16_t *tok, size_t n, cb_err *e);

/* Byte-level tokenizer (vocab 256): token = byte. Splits text into a training
 * file and the last val_frac of it into a validation file (val_path may be
 * NULL for no split). */
int cb_prepare_text(const char *text_path, const char *train_path,
                    const char *val_path, double val_frac, cb_err *e);

/* ---------------------------------------------------------------- your own models */
/* Models built from cubist's parallel-aware layers run under any layout and
 * any data parallelism without changing their code: the layout comes from
 * the command line (--dp N --tp N --tp-mode 1d|2d|3d), the layers hold this
 * rank's shards, and activations (cb_act) this rank's piece. Forward and
 * backward are the user's calls, in the user's order; examples/mlp_lm.c and
 * examples/tiny_gpt.c are complete programs. Activations have a parity: 0
 * on the model's residual stream, 1 after an odd number of linears (a
 * linear turns parity p into 1-p), which is what lets 1-D and 3-D layouts
 * avoid communication between the two linears of a pair. */
typedef struct cb_dist cb_dist;
typedef struct cb_model cb_model;
typedef struct cb_layer cb_layer;
typedef struct cb_act cb_act;

/* Starts MPI (one process needs no launcher) and builds the process grid
 * from --dp --tp --tp-mode --pp (and --micro-batches --partition
 * --partition-memory-weight --print-partition for --pp, --zero 1 for
 * ZeRO-1), which are removed from argv. Collective; on error every rank
 * gets the same message. */
int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e);
int cb_dist_rank(const cb_dist *d); /* world rank: print from rank 0 */
/* Ends the job on every rank: rank 0 prints e's message, status 2 for bad
 * input. Collective. */
_Noreturn void cb_dist_exit(cb_dist *d, const cb_err *e);
void cb_dist_finalize(cb_dist *d);

/* batch: sequences of the global micro-batch, seq_len: tokens per sequence.
 * Layers and activations are declared, then cb_model_build allocates. */
cb_model *cb_model_new(cb_dist *d, int batch, int seq_len);
/* token embedding [vocab, C] (also the tied LM head) + position embedding
 * [seq_len, C]: tensors "<name>.weight" and "<name>.pos" */
cb_layer *cb_model_embedding(cb_model *m, const char *name, int vocab, int C);
/* the same, tensors "<tok>.weight" and "<pos>.weight" (GPT-2's "wte", "wpe") */
cb_layer *cb_model_embedding_named(cb_model *m, const char *tok, const char *pos, int vocab,
                                   int C);
/* Y = X W + b, W [in, out]: tensors "<name>.weight", "<name>.bias" */
cb_layer *cb_model_linear(cb_model *m, const char *name, int in, int out, int parity);
/* The QKV projection of self-attention, [C, 3C], parity 0 -> 1: a linear
 * whose output sections q | k | v are split per head, so each rank's
 * piece holds q, k and v of its own heads (GPT-2's attn.c_attn). */
cb_layer *cb_model_linear_qkv(cb_model *m, const char *name, int C);
/* Causal multi-head self-attention on the parity-1 output of a
 * cb_model_linear_qkv of the same C, whole sequences; heads divide C (and
 * must divide by tp in 1d, by q in 2d and 3d). No parameters; keeps the
 * attention probabilities (heads x seq_len^2 per sequence) for backward. */
cb_layer *cb_model_attention(cb_model *m, const char *name, int C, int heads);
cb_layer *cb_model_layernorm(cb_model *m, const char *name, int C, int parity);
/* an activation of batch*seq_len tokens x H features */
cb_act *cb_model_act(cb_model *m, int H, int parity);
/* Allocates parameters (weights N(0, 0.02), biases 0, LayerNorm 1/0, the
 * same values under every layout), gradients and AdamW state; checks the
 * layout's divisibility constraints. Collective. */
int cb_model_build(cb_model *m, uint64_t seed, const cb_adamw_config *opt, cb_err *e);
/* This data-parallel rank's rows [first, first+count) of the global batch. */
void cb_model_rows(const cb_model *m, int *first, int *count);
/* This rank's floats: its parameter shards (the gradients are as many) and
 * AdamW moments (2 per parameter it updates: its ZeRO-1 shard under --zero
 * 1, else all of its shards). */
void cb_model_sizes(const cb_model *m, size_t *params, size_t *adam);

/* ids, targets: this rank's rows (count x seq_len) */
void cb_embedding_forward(cb_layer *l, const int *ids, cb_act *x);
void cb_embedding_backward(cb_layer *l, const cb_act *dx);
void cb_linear_forward(cb_layer *l, const cb_act *x, cb_act *y);
void cb_linear_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx);
void cb_layernorm_forward(cb_layer *l, const cb_act *x, cb_act *y);
/* dx accumulates: it is usually the residual stream's gradient */
void cb_layernorm_backward(cb_layer *l, const cb_act *x, const cb_act *dy, cb_act *dx);
/* qkv (parity 1, 3C wide) -> y (parity 1, C wide); backward overwrites dqkv */
void cb_attention_forward(cb_layer *attention, const cb_act *qkv, cb_act *y);
void cb_attention_backward(cb_layer *attention, const cb_act *qkv, const cb_act *dy,
                           cb_act *dqkv);
void cb_gelu_forward(const cb_act *x, cb_act *y);
void cb_gelu_backward(const cb_act *x, const cb_act *dy, cb_act *dx);
void cb_act_add(cb_act *y, const cb_act *a, const cb_act *b);
void cb_act_copy(cb_act *dst, const cb_act *src);
void cb_act_zero(cb_act *x);
/* Tied LM head on the embedding's wte and vocabulary-parallel cross-entropy:
 * the mean loss over this rank's tokens. */
float cb_head_forward(cb_layer *embedding, const cb_act *x, const int *targets);
/* dx overwritten; dloss scales the mean loss */
void cb_head_backward(cb_layer *embedding, const cb_act *x, float dloss, cb_act *dx);

void cb_model_zero_grad(cb_model *m);
/* Averages gradients over data-parallel ranks (fused buckets; with --zero
 * 1 reduce-scattered to the rank that owns each AdamW shard, the updated
 * parameters then all-gathered), clips to the global norm (every shard
 * counted once), one AdamW update at step's learning rate. Returns the
 * global gradient norm. Collective. */
float cb_model_step(cb_model *m, int step);
/* The mean of a per-rank value over the data-parallel ranks. Collective. */
float cb_model_mean(cb_model *m, float v);
/* Full tensors, safetensors, "<layer name>.weight" / ".bias"; collective. */
int cb_model_save(cb_model *m, const char *path, cb_err *e);
int cb_model_load(cb_model *m, const char *path, cb_err *e);
void cb_model_free(cb_model *m);

#ifdef __cplusplus
}
#endif
#endif
