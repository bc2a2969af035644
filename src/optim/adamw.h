/* AdamW over a range of the flat parameter vector. The range is the whole
 * vector for one process and a ZeRO shard under data parallelism; m and v
 * cover only the range. */
#ifndef CB_ADAMW_H
#define CB_ADAMW_H

#include "cubist.h"
#include "kernels/kernels.h"

typedef struct cb_adamw {
    cb_adamw_config c;
    size_t lo, hi; /* parameter range [lo, hi) this optimizer updates */
    float *m, *v;  /* (hi - lo) each */
    int t;         /* updates done */
} cb_adamw;

int cb_adamw_init(cb_adamw *o, const cb_adamw_config *c, size_t lo, size_t hi, cb_err *e);
void cb_adamw_free(cb_adamw *o);
/* One update of params[lo,hi) from grads[lo,hi) times gs (the clip
 * factor) at learning rate lr; the tensor table decides which elements decay. */
void cb_adamw_step(cb_adamw *o, const cb_kernels *k, float *params, const float *grads, float gs,
                   const cb_tensor_info *tensors, int ntensor, float lr);
/* min(1, clip / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_, 1 when clip <= 0 */
float cb_clip_scale(float clip, double norm);
#endif
