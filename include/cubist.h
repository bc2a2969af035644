/* cubist: train transformer models across many processes.
 * The one public header. Every public name carries the cb_ prefix; everything
 * else lives under src/ and is private. */
#ifndef CUBIST_H
#define CUBIST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */
/* Functions that can fail return one of these and fill a cb_err; only the
 * command line decides to print and exit. CB_EINPUT is bad input from the
 * user (missing file, wrong shape, bad flag): the command exits with 2.
 * CB_ESTALL: a communication wait passed --stall-timeout (the job is
 * aborted with this status). CB_ESTOPPED is no failure: a signal stopped
 * training after a checkpoint was saved (75, sysexits' EX_TEMPFAIL, so a
 * scheduler may requeue the job); docs/operations.md. */
enum { CB_OK = 0, CB_EINPUT = 2, CB_ESYS = 3, CB_ENOMEM = 4, CB_EINTERNAL = 5, CB_ESTALL = 6,
       CB_ESTOPPED = 75 };

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

/* FLOPs per token of one training step (forward + backward):
 * 6 * N_params + 12 * L * C * T (attention scores and context, no causal
 * discount). */
double cb_gpt_flops_per_token(const cb_gpt_config *c, int T);

/* Weights files are safetensors with Hugging Face GPT-2 names and shapes
 * (cb_model_save of the GPT of cb_model_declare_gpt); the config travels
 * in __metadata__ (n_layer, d_model, n_head, seq_len, vocab). Reads the
 * config of such a file: from its metadata, or inferred from the shapes
 * (then n_head must be given: pass the caller's value in c). */
int cb_gpt_config_from_file(const char *path, cb_gpt_config *c, cb_err *e);

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
 * F32, F16 and BF16 tensors are read (cb_st_read_f32 converts); F32 is
 * written, and cb_st_convert turns a written file's tensors to F16/BF16. */
enum { CB_ST_F32 = 0, CB_ST_F16 = 1, CB_ST_BF16 = 2 };
typedef struct cb_st_tensor {
    char name[96];
    int ndim;
    int64_t shape[4];
    size_t offset; /* bytes from the start of the data section */
    size_t nbytes;
    int dtype;     /* CB_ST_F32, CB_ST_F16, CB_ST_BF16 */
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
 * dtype F32, F16 or BF16, shape consistent with data_offsets, offsets
 * inside the data section. Messages name the file and the tensor. */
int cb_st_open(const char *path, cb_st_file *f, cb_err *e);
void cb_st_close(cb_st_file *f);
const cb_st_tensor *cb_st_find(const cb_st_file *f, const char *name);
/* A tensor under its GPT-2 name as published files spell it: name, else
 * "transformer." name (Hugging Face's GPT2LMHeadModel state dict). */
const cb_st_tensor *cb_st_find_hf(const cb_st_file *f, const char *name);
/* Its elements as floats into out (nbytes / element size of them); F16
 * and BF16 convert exactly. The data need not be aligned. */
void cb_st_read_f32(const cb_st_file *f, const cb_st_tensor *t, float *out);
/* Parses "fp32", "bf16" or "f16" (--save-dtype) into *dtype. */
int cb_st_dtype_parse(const char *s, int *dtype, cb_err *e);
/* Rewrites path (atomically) with every tensor in dtype, rounded to
 * nearest even; metadata kept. CB_ST_F32 leaves the file as it is. */
int cb_st_convert(const char *path, int dtype, cb_err *e);
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
 * then uint16 tokens) or nanoGPT (headerless uint16), detected on open. A
 * stream of several files (shards) reads as their concatenation. */
enum { CB_TOK_LLMC = 1, CB_TOK_NANOGPT = 2 };
typedef struct cb_tokens {
    const uint16_t *tok; /* one file: its n tokens; several: NULL (cb_tokens_read) */
    size_t n;            /* tokens in the stream */
    int format;
    int tokenizer; /* llm.c header word 3 as `cubist prepare` writes it:
                      1 byte, 2 gpt2; 0 not recorded */
    void *map;
    size_t maplen;
    int nshard;               /* > 1: the files, in stream order */
    struct cb_tokens *shard;
    size_t *start;            /* (nshard + 1) stream position of each file's first token */
} cb_tokens;

/* Opens and validates every token against vocab. path is one file, or a
 * comma-separated list of files and glob patterns (each pattern's matches
 * in sorted order): one stream. A pattern matching nothing, or files of
 * different formats or tokenizers, is CB_EINPUT. */
int cb_tokens_open(const char *path, int vocab, cb_tokens *t, cb_err *e);
void cb_tokens_close(cb_tokens *t); /* safe on a zeroed, never opened cb_tokens */
/* Stream tokens [pos, pos + n) (pos + n <= t->n) into out (n), across files. */
void cb_tokens_read(const cb_tokens *t, size_t pos, size_t n, int *out);
/* Writes llm.c format atomically. */
int cb_tokens_write(const char *path, const uint16_t *tok, size_t n, cb_err *e);

/* Tokenises a text with tokenizer "byte" (vocab 256: token = byte) or
 * "gpt2" (GPT-2's BPE, vocab 50257, files encoder.json and vocab.bpe read
 * from bpe_dir; NULL: the directory `make deps` fills). Splits the tokens
 * into a training file and the last val_frac of them into a validation file
 * (val_path may be NULL for no split). */
int cb_prepare_text(const char *text_path, const char *train_path, const char *val_path,
                    double val_frac, const char *tokenizer, const char *bpe_dir, cb_err *e);
/* Translation pairs: each line of pairs_path (and val_pairs, may be NULL)
 * is `source<TAB>target`; both sides are tokenised and written as a pair
 * file (src/data/bitext.h) to out_path (and val_out), both or neither. A
 * line without one tab, an empty side, or a side of more than context - 1
 * tokens is CB_EINPUT naming the file and line. compact: the vocabulary
 * only of the tokenizer's ids the training pairs use (and every single
 * byte), its map written to out_path.vocab and val_out.vocab. npairs (2):
 * pairs written to each, or NULL. */
int cb_prepare_pairs(const char *pairs_path, const char *out_path, const char *val_pairs,
                     const char *val_out, int context, const char *tokenizer, const char *bpe_dir,
                     int compact, size_t *npairs, cb_err *e);
/* Name of a cb_tokens tokenizer tag: "byte", "gpt2", or NULL for 0. */
const char *cb_tokenizer_tag_name(int tag);

/* Interactions for recommendation (NCF): one "user<TAB>item" pair per line,
 * ids any strings, mapped to dense indices in first-seen order; writes the
 * pair file out (a header, then int32 user, item pairs) and the maps
 * out.users and out.items beside it (line k: the id of index k), all three
 * or none. A line that is not two non-empty ids around one tab: CB_EINPUT
 * naming the file and line. */
int cb_prepare_interactions(const char *tsv, const char *out, cb_err *e);

/* ---------------------------------------------------------------- your own models */
/* A model is a graph declared once from cubist's parallel-aware layers:
 * declare the layers (parameters), then the operations that connect them
 * (cb_op_*, from the embedding to the loss), then build. The engine owns
 * forward, backward, recompute and the order of micro-batches; your loop
 * keeps the step: each call of cb_model_train_step takes the step's batch
 * and returns its loss. The same code runs serially or under any layout,
 * chosen on the command line: data parallelism (--dp N, --zero 1), the
 * pipeline (--pp N, --schedule gpipe|1f1b|interleaved, --virtual-stages V,
 * --micro-batches M, --partition auto|equal|LIST, --recompute
 * none|block|selective) and tensor parallelism (--tp N --tp-mode
 * 1d|2d|3d). examples/tiny_gpt.c and examples/mlp_lm.c are complete
 * programs.
 *
 * Activations (cb_act) are the graph's values: N tokens x H features of a
 * micro-batch, with a parity that the tensor layouts use to place them (0
 * on the residual stream; a linear turns parity p into 1-p, so 1-D and 3-D
 * need no communication between the two linears of a pair). Parities are
 * inferred: a layer takes the parity of the first activation it is applied
 * to, and a layer applied twice (a shared weight) must see one parity. */
typedef struct cb_dist cb_dist;
typedef struct cb_model cb_model;
typedef struct cb_layer cb_layer;
typedef struct cb_act cb_act;

/* Starts MPI (one process needs no launcher) and builds the process grid
 * from --dp --tp --tp-mode --pp and the pipeline flags above (and
 * --partition-memory-weight --print-partition --zero 1 --max-memory
 * BYTES --precision fp32|bf16 --comm-dtype fp32|bf16: the data-parallel
 * gradient's wire type), which are removed from argv. --max-memory (suffixes K, M, G):
 * cb_model_build fails with CB_ENOMEM (status 4 through cb_dist_exit) when
 * a rank's planned bytes (parameters, gradients, AdamW state, activations,
 * pipeline buffers, workspace) exceed it. Collective; on error every rank
 * gets the same message. */
int cb_dist_init(int *argc, char ***argv, cb_dist **out, cb_err *e);
/* The --help lines of the flags cb_dist_init takes ("  --name  what"),
 * into f: for a program's own usage text. */
void cb_dist_usage(FILE *f);
int cb_dist_rank(const cb_dist *d); /* world rank: print from rank 0 */
/* The arithmetic of --precision fp32|bf16 (also taken by cb_dist_init),
 * for a startup line: "fp32", or bf16 and the instructions it runs on,
 * or that the CPU has none and oneDNN emulates them (slow). */
const char *cb_dist_precision(const cb_dist *d);
/* Ends the job on every rank: rank 0 prints e's message, status 2 for bad
 * input, 4 for out of memory, else 1. Collective. */
_Noreturn void cb_dist_exit(cb_dist *d, const cb_err *e);
void cb_dist_finalize(cb_dist *d);

/* batch: sequences of a step (over every data-parallel rank), seq_len:
 * tokens per sequence. */
cb_model *cb_model_new(cb_dist *d, int batch, int seq_len);
/* token embedding [vocab, C] (also the tied LM head) + position embedding
 * [seq_len, C]: tensors "<name>.weight" and "<name>.pos" */
cb_layer *cb_model_embedding(cb_model *m, const char *name, int vocab, int C);
/* the same, tensors "<tok>.weight" and "<pos>.weight" (GPT-2's "wte", "wpe") */
cb_layer *cb_model_embedding_named(cb_model *m, const char *tok, const char *pos, int vocab,
                                   int C);
/* Y = X W + b, W [in, out]: tensors "<name>.weight", "<name>.bias" */
cb_layer *cb_model_linear(cb_model *m, const char *name, int in, int out);
/* The QKV projection of self-attention, [C, 3C]: a linear whose output
 * sections q | k | v are split per head, so each rank's piece holds q, k
 * and v of its own heads (GPT-2's attn.c_attn). */
cb_layer *cb_model_linear_qkv(cb_model *m, const char *name, int C);
/* Causal multi-head self-attention of width C on whole sequences; heads
 * divide C (and must divide by tp in 1d, by q in 2d and 3d). No tensors.
 * cb_model_attention_flags(..., CB_ATTN_CAUSAL) is the same. */
cb_layer *cb_model_attention(cb_model *m, const char *name, int C, int heads);
/* Attention with a choice of masks: CB_ATTN_CAUSAL (query i sees keys
 * j <= i; without it, bidirectional), CB_ATTN_PADDED (the lengths of
 * cb_model_set_lengths mask keys at positions >= the sequence's length;
 * query rows there are padding: their output is zero and passes no
 * gradient). Serves self-attention (cb_op_attention) and cross-attention
 * (cb_op_cross_attention). */
enum { CB_ATTN_CAUSAL = 1, CB_ATTN_PADDED = 2 };
cb_layer *cb_model_attention_flags(cb_model *m, const char *name, int C, int heads,
                                   unsigned flags);
/* Dropout p in [0, 1) of the attention layer's probabilities in training
 * (BERT's attention_probs_dropout_prob), after the softmax: probability
 * (b, h, i, j) of the step's whole batch (b its global sequence, h its
 * head) is kept, scaled by 1/(1-p), when U(key, ((b NH + h) Tq + i) Tk +
 * j) >= p, key = draw `step` of the stream cb_rng_key(seed, layer name):
 * the same under every layout, micro-batch split and recompute. Keeps a
 * second copy of the probabilities per micro-batch. */
void cb_layer_attention_dropout(cb_layer *attention, float p);
/* The key-value projection of cross-attention, [C, 2C], sections k | v
 * split per head like cb_model_linear_qkv's. */
cb_layer *cb_model_linear_kv(cb_model *m, const char *name, int C);
cb_layer *cb_model_layernorm(cb_model *m, const char *name, int C);
/* The standard deviation of a linear's or an embedding's normal initial
 * weights (0.02 unless set; GPT-2 scales its residual projections by
 * 1/sqrt(2 x layers)). Values are drawn per element from (seed, tensor
 * name), so they are the same under every layout. */
void cb_layer_set_init_std(cb_layer *l, float sd);
/* An embedding's position table fixed to the sinusoids of Vaswani et al.
 * (sin(t / 10000^(2i/C)) in column 2i, cos in 2i + 1), never trained: it
 * gets no gradient and no weight decay. */
void cb_layer_set_sinusoidal(cb_layer *embedding);
/* The loss of cb_op_lm_loss on this embedding: label smoothing eps in
 * [0, 1) (the target gets 1 - eps of the probability mass, every id of the
 * vocabulary eps / V), and targets equal to ignore_target (-1: none; the
 * padding id) left out: the loss is the mean over the real targets of the
 * whole step, on every layout. As PyTorch's cross_entropy(label_smoothing,
 * ignore_index). */
void cb_layer_set_loss(cb_layer *embedding, float label_smoothing, int ignore_target);

/* The graph. Each operation returns its output (NULL after a declaration
 * error, which cb_model_build reports; operations on NULL are ignored). */
/* x (C features, parity 0) = wte[ids] + wpe[t] of the step's token ids */
cb_act *cb_op_embedding(cb_layer *embedding);
cb_act *cb_op_linear(cb_layer *linear, const cb_act *x);
cb_act *cb_op_layernorm(cb_layer *norm, const cb_act *x);
/* qkv: the output of a cb_model_linear_qkv layer; C features out */
cb_act *cb_op_attention(cb_layer *attention, const cb_act *qkv);
/* Cross-attention: queries q (the output of a cb_model_linear of width C)
 * attend to keys and values kv (a cb_model_linear_kv's output) of the
 * same sequences; both linears read the residual stream. C features out. */
cb_act *cb_op_cross_attention(cb_layer *attention, const cb_act *q, const cb_act *kv);
cb_act *cb_op_gelu(const cb_act *x); /* tanh approximation */
cb_act *cb_op_add(const cb_act *a, const cb_act *b);
/* The loss, ending the graph: the embedding's tied LM head on x (parity 0)
 * and the cross-entropy against the step's targets, mean over tokens. */
void cb_op_lm_loss(cb_layer *embedding, const cb_act *x);
/* Operations declared between these form a block that --recompute block
 * reruns before its backward, keeping only what crosses its boundary. */
void cb_model_begin_block(cb_model *m);
void cb_model_end_block(cb_model *m);
/* GPT-2 (pre-LN blocks, each a recompute block, the tied LM head) declared
 * from these layers with Hugging Face GPT-2's tensor names: the checkpoint
 * is cubist train's. */
void cb_model_declare_gpt(cb_model *m, const cb_gpt_config *c);

/* BERT's pieces. cb_op_gelu_erf: the exact GELU x Phi(x). A bias vector
 * [n] ("<name>.bias", zero at start) for the MLM decoder. The MLM loss,
 * ending the graph: logits = x wte^T + bias (the decoder tied to the
 * embedding's word table plus its own bias), cross-entropy over the rows
 * whose target is >= 0 (a negative target is ignored: no loss, no
 * gradient), mean over those rows of the whole step (every micro-batch
 * and data-parallel rank). Every layout: the layouts' tied head with the
 * bias whole on each tensor rank (its gradient summed over them), x moved
 * to the residual stream's parity where the layout splits it otherwise;
 * the decoder on every row, or, declared by cb_model_declare_bert, on
 * max_predictions rows of each sequence (its masked ones). Token types:
 * cb_model_set_id_fields(m, 2), the embedding reads field 0 and a
 * cb_model_lookup table of the types reads field 1. */
cb_act *cb_op_gelu_erf(const cb_act *x);
/* Dropout with probability p in training steps (kept elements scaled by
 * 1/(1-p)), nothing in evaluation: the mask of an element is a function
 * of (the build's seed, the dropout's declaration index, the step, the
 * element's index in the step's whole value (global row, feature)), so it
 * is the same under every layout, micro-batch split and recompute. */
cb_act *cb_op_dropout(const cb_act *x, float p);
cb_layer *cb_model_bias(cb_model *m, const char *name, int n);
void cb_op_mlm_loss(cb_layer *embedding, cb_layer *bias, const cb_act *x);

/* BERT (Hugging Face BertForMaskedLM's architecture: learned positions,
 * token types, post-LN blocks of bidirectional padded attention and an
 * erf-GELU MLP, the MLM head dense + GELU + LayerNorm + tied decoder with
 * its own bias) with HF's tensor names ("bert.embeddings.word_embeddings",
 * ..., "cls.predictions.bias"; roberta: "roberta.*", "lm_head.*"), except
 * that the attention's query, key and value are one fused [C, 3C] linear
 * "<layer>.attention.self.qkv" and linears are stored [in, out]. Rows: 2
 * id fields (token, type); lengths by cb_model_set_lengths; targets the
 * original token at masked positions, -1 elsewhere. LayerNorm eps 1e-5.
 * No dropout on the attention probabilities (HF's attention_probs_dropout). */
typedef struct cb_bert_config {
    int n_layer, d_model, n_head, seq_len, vocab, types;
    int roberta;   /* RoBERTa's tensor names */
    float dropout; /* hidden dropout (cb_op_dropout) after the embeddings' LayerNorm and
                      before each residual add, as HF's hidden_dropout_prob; 0: none */
    float attn_dropout; /* of the attention probabilities (cb_layer_attention_dropout), as
                           HF's attention_probs_dropout_prob; 0: none */
    int max_predictions; /* masked positions per sequence the decoder reads, as BERT's
                            max_predictions_per_seq (the first ones; a sequence's others are
                            not counted); 0: max(1, round(0.15 seq_len)) */
} cb_bert_config;
void cb_model_declare_bert(cb_model *m, const cb_bert_config *c);

/* The Transformer encoder-decoder for translation (Vaswani et al.): one
 * embedding "emb" (fixed sinusoidal positions "emb.pos") looks up the
 * source (id field 0) and the decoder's input (field 1) and is the output
 * projection; enc_layers blocks of bidirectional self-attention padded by
 * length set 0 (the source's) and a ReLU FFN, dec_layers blocks of causal
 * self-attention padded by set 1 (the target's), cross-attention of set-1
 * queries over set-0 keys and the FFN; post-LN (LN(x + f(x)), the paper's)
 * or pre-LN (x + f(LN(x)), with a final LN on each stack); label-smoothed
 * cross-entropy, targets equal to pad left out. Tensor names
 * "enc.L.{attn.qkv,attn.proj,ln1,fc1,fc2,ln2}", "dec.L.{attn.qkv,attn.proj,
 * ln1,xattn.q,xattn.kv,xattn.proj,ln2,fc1,fc2,ln3}", "enc.ln_f", "dec.ln_f".
 * The caller sets both length sets (cb_model_set_lengths_set). */
typedef struct cb_nmt_config {
    int enc_layers, dec_layers, d_model, n_head, d_ff, vocab;
    float smoothing; /* label smoothing (0.1) */
    int pad;         /* the padding id: targets equal to it count nothing */
    int pre_ln;
    float dropout;   /* on each sublayer's output before its residual add and on both
                        embeddings + positions (cb_op_dropout); 0: none */
    int emb_scale;   /* 1: sqrt(d_model) x the looked-up rows in front of the positions
                        (the paper's); the output projection stays unscaled */
} cb_nmt_config;
void cb_model_declare_nmt(cb_model *m, const cb_nmt_config *c);

/* Recommendation layers (NCF). A row of the batch may carry several ids
 * (a user and an item): with cb_model_set_id_fields(m, k), called before
 * the first operation, the ids of cb_model_train_step, cb_model_eval and
 * cb_model_scores are rows x k (row-major) and targets one per row. */
void cb_model_set_id_fields(cb_model *m, int fields);
/* A table [rows, C] looked up by one id field, no positions: tensor
 * "<name>.weight", row-sharded across the tensor ranks like the vocabulary */
cb_layer *cb_model_lookup(cb_model *m, const char *name, int rows, int C);
/* The logistic head: one logit per row, x . w with w [C] ("<name>.weight",
 * no bias, as NeuMF's h), and the binary cross-entropy against targets in
 * {0, 1} (sigmoid(logit) is the probability of 1), mean over rows */
cb_layer *cb_model_logistic(cb_model *m, const char *name, int C);
cb_act *cb_op_lookup(cb_layer *table, int field); /* C features, parity 0 */
/* cb_op_embedding of id field `field` of each position (the step's ids hold
 * cb_model_set_id_fields ids per position, interleaved): an encoder-decoder
 * looks up the source (field 0) and the decoder's input (field 1) in one
 * shared table, which cb_op_lm_loss also uses as the output projection. */
cb_act *cb_op_embedding_field(cb_layer *embedding, int field);
/* Every lookup of the embedding gives s x wte[id] + pos instead of wte[id]
 * + pos (the Transformer's sqrt(C)); the LM head's use of the table is not
 * scaled. Needs fixed positions (cb_layer_set_sinusoidal, called first). */
void cb_layer_set_embed_scale(cb_layer *embedding, float s);
cb_act *cb_op_mul(const cb_act *a, const cb_act *b);    /* element-wise, one shape */
cb_act *cb_op_relu(const cb_act *x);
/* [a | b]: Ha + Hb features, a's parity (b's parity may differ) */
cb_act *cb_op_concat(const cb_act *a, const cb_act *b);
/* The loss, ending the graph (instead of cb_op_lm_loss). */
void cb_op_logistic_loss(cb_layer *head, const cb_act *x);

/* NeuMF (He et al. 2017): GMF (user and item factors of width `factors`,
 * multiplied element-wise) and an MLP tower (user and item embeddings of
 * width mlp[0] / 2, concatenated, then ReLU linears to mlp[1], ...,
 * mlp[n_mlp - 1]), concatenated into the logistic head. Tensors
 * "gmf.user", "gmf.item", "mlp.user", "mlp.item" (.weight), "mlp.<l>"
 * (.weight, .bias), "predict.weight". Rows: id fields (user, item), the
 * target 1 for an observed pair, 0 for a sampled one. */
typedef struct cb_ncf_config {
    int users, items, factors;
    int n_mlp;
    int mlp[8];
} cb_ncf_config;
void cb_model_declare_ncf(cb_model *m, const cb_ncf_config *c);
/* FLOPs of one row's training step (forward + backward, the linears and
 * the head; lookups and element-wise work left out) */
double cb_ncf_flops_per_row(const cb_ncf_config *c);
/* Mixed precision as a build option: "bf16" runs the products (linears,
 * the LM head, attention's two) in bf16 with fp32 accumulation through
 * oneDNN; weights, AdamW state, activations, LayerNorm, softmax, GELU and
 * the loss stay fp32. "fp32" is the default; overrides --precision. Before
 * cb_model_build; the choice is per process (every model of it). */
int cb_model_set_precision(cb_model *m, const char *precision, cb_err *e);

/* Checks the graph and the layout's divisibility constraints, partitions
 * it into pipeline stages, allocates parameters (weights N(0, 0.02),
 * biases 0, LayerNorm 1/0: the same values under every layout), gradients,
 * AdamW state and every activation buffer: a step allocates nothing.
 * Collective. */
int cb_model_build(cb_model *m, uint64_t seed, const cb_adamw_config *opt, cb_err *e);
/* With --print-partition under --pp (cb_dist_init's flags): the pipeline
 * stages of the built model (modules, cost, compute, memory, tied
 * weights) into f, and 1; else 0. The library prints nothing itself:
 * call it on one rank (cb_dist_rank 0). */
int cb_model_print_partition(const cb_model *m, FILE *f);
/* This data-parallel rank's rows [first, first+count) of the batch. */
void cb_model_rows(const cb_model *m, int *first, int *count);
/* This rank's floats: its parameter shards (the gradients are as many) and
 * AdamW moments (2 per parameter it updates: its ZeRO-1 shard under --zero
 * 1, else all of its shards). */
void cb_model_sizes(const cb_model *m, size_t *params, size_t *adam);
/* Bytes of this rank's activation buffers, planned at build: the values
 * and kept state of every micro-batch in flight, the gradients of one, the
 * recompute buffers and the pipeline's outgoing messages. */
size_t cb_model_activation_bytes(const cb_model *m);

/* One optimizer step at 0-based index step on this rank's rows (count x
 * seq_len ids and targets, cb_model_rows): forward and backward of every
 * micro-batch in the schedule's order, gradients averaged over the
 * data-parallel ranks, clipped to the global norm (into *grad_norm, may be
 * NULL), one AdamW update. Returns the step's mean loss, the same on every
 * rank. Collective. */
float cb_model_train_step(cb_model *m, const int *ids, const int *targets, int step,
                          float *grad_norm);
/* Where this rank's time went in the last cb_model_train_step: forward
 * and backward compute (recompute included), blocked on pipeline
 * messages, the reduction, clipping and update; bubble = 1 - (forward +
 * backward) / step, the pipeline's idle share on this rank. */
typedef struct cb_model_step_info {
    double step_ms, forward_ms, backward_ms, wait_ms, update_ms, bubble;
} cb_model_step_info;
void cb_model_last_step(const cb_model *m, cb_model_step_info *info);
/* The valid length of each of this rank's rows (count of cb_model_rows,
 * in [0, seq_len]) for the CB_ATTN_PADDED attention layers of the
 * following steps, evaluations and probabilities; the array is read, not
 * copied, at each of them. NULL (the default): every row whole. */
void cb_model_set_lengths(cb_model *m, const int *lens);
/* Several length sets, for models whose sequences have two lengths (an
 * encoder-decoder's source and target): set 0 is cb_model_set_lengths's.
 * cb_layer_use_lengths(attention, q, k): that CB_ATTN_PADDED layer masks
 * query rows by set q and keys by set k (cross-attention: the target's
 * queries over the source's keys); by default both are set 0. */
enum { CB_LENGTH_SETS = 4 };
void cb_model_set_lengths_set(cb_model *m, int set, const int *lens);
void cb_layer_use_lengths(cb_layer *attention, int query_set, int key_set);
/* Forward only: the mean loss of the batch, the same on every rank. */
float cb_model_eval(cb_model *m, const int *ids, const int *targets);
/* Forward only, without targets: the next-token probabilities of every
 * position (batch x seq_len x vocab) for sampling. One process, serial
 * layout, one micro-batch; NULL otherwise. Valid until the next call. */
const float *cb_model_probs(cb_model *m, const int *ids);
/* Incremental decoding (an encoder-decoder's KV cache; docs/nmt.md).
 * cb_model_decode_start runs the nodes that do not depend on id field
 * `field` (the encoder) once, on rows [0, sources) of ids (batch x
 * seq_len x the model's id fields, kept by pointer), then gives each row r
 * of [0, sources x beams) (<= batch) the encoder's values of source row
 * r / beams: the beams of a source share one run of its encoder (greedy:
 * beams 1). cb_model_decode_step(t) runs the others on position t of rows
 * [0, rows) only (rows <= sources x beams), field `field` of position t
 * read from ids then (the caller writes it first); self-attention reads
 * the keys and values of positions 0..t that earlier steps left in the
 * engine's own value buffers (the cache, planned with the model), and
 * cross-attention row r the encoder's of source r / beams, masked by that
 * source row's key length. Next-token probabilities of each row go to
 * probs (rows x vocab). cb_model_decode_reorder: row r takes row
 * from[r]'s cache of positions [0, t] (beam search; r and from[r] must
 * read one source). One stage, a layout that samples (cb_model_probs), no
 * recompute: else CB_EINPUT from start. cb_model_decode_info: the work
 * done since the model was built, in sequences the encoder ran on and
 * (row, position) pairs the decoder ran on, and its time. */
int cb_model_decode_start(cb_model *m, const int *ids, int field, int sources, int beams,
                          cb_err *e);
void cb_model_decode_step(cb_model *m, int t, int rows, float *probs);
void cb_model_decode_reorder(cb_model *m, const int *from, int rows, int t);
typedef struct cb_decode_info {
    long long encoder_rows, decoder_positions;
    double encoder_s, decoder_s;         /* wall seconds in start (the encoder, the copies) and step */
    double encoder_cpu_s, decoder_cpu_s; /* the process's CPU seconds there (every thread) */
} cb_decode_info;
void cb_model_decode_info(const cb_model *m, cb_decode_info *info);
/* Forward only, for a model ending in cb_op_logistic_loss: the logit of
 * every row of the step (batch x seq_len, over every data-parallel rank,
 * the same on every rank) into scores; ids as cb_model_train_step's, this
 * rank's rows. Under any layout. Collective. */
int cb_model_scores(cb_model *m, const int *ids, float *scores, cb_err *e);
/* Full tensors, safetensors, "<layer name>.weight" / ".bias"; collective. */
int cb_model_save(cb_model *m, const char *path, cb_err *e);
int cb_model_load(cb_model *m, const char *path, cb_err *e);
/* A checkpoint to resume from: one file with the weights (as
 * cb_model_save), the AdamW moments ("m.<name>", "v.<name>", whole
 * tensors whatever the layout or ZeRO) and the update count, plus step in
 * its metadata; written under a temporary name, synced and renamed.
 * Collective. */
int cb_model_save_checkpoint(cb_model *m, const char *path, int step, cb_err *e);
/* Loads one under any layout; *step is what was saved. Collective. */
int cb_model_load_checkpoint(cb_model *m, const char *path, int *step, cb_err *e);
void cb_model_free(cb_model *m);

#ifdef __cplusplus
}
#endif
#endif
