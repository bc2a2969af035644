/* Private layout of cb_gpt, shared by the model's files. */
#ifndef CB_GPT_INTERNAL_H
#define CB_GPT_INTERNAL_H

#include "cubist.h"
#include "kernels/kernels.h"

#define NLAYER_TENSORS 12

typedef struct gpt_layer_params {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} gpt_layer_params;

typedef struct gpt_params {
    float *wte, *wpe, *lnfw, *lnfb;
    gpt_layer_params *layer;
} gpt_params;

/* Saved for backward, per block; shapes for N = B*T tokens. */
typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N,3C) */
    float *att;                       /* (B,NH,T,T) */
    float *atty;                      /* (N,C) */
    float *res2;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;            /* (N,4C) */
    float *res3;                      /* (N,C) block output */
} gpt_layer_acts;

struct cb_gpt {
    cb_gpt_config c;
    int B, T;       /* planned maximum micro-batch */
    int curB, curT; /* last forward */
    const cb_kernels *k;
    int ntensor;
    cb_tensor_info *tensors;
    size_t nparams;
    float *params, *grads;
    gpt_params p, g;
    float *actblock;
    gpt_layer_acts *acts;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *d_res, *d_small, *d_qkv, *d_big, *d_att, *proj; /* backward scratch */
    int *inp, *targets, has_targets;
    cb_grad_ready_fn hook;
    void *hook_ctx;
};

/* Writes nb parameter-shaped blocks (parameters, gradients, AdamW moments)
 * into one file, block i under the tensor names with prefixes[i]; extra is
 * nextra metadata pairs added to the config. */
int gpt_save_blocks(const cb_gpt *m, int nb, const float *const *blocks,
                    const char *const *prefixes, const char *path, const char *const *extra,
                    int nextra, cb_err *e);
/* Reads such a block back from an open file, checking every shape. */
int gpt_load_block(const cb_gpt *m, float *block, const char *prefix, const cb_st_file *f,
                   const char *path, cb_err *e);

#endif
