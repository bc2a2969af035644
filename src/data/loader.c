#include "data/loader.h"

int cb_loader_init(cb_loader *l, const cb_tokens *tok, int B, int T, int shuffle, uint64_t seed,
                   const char *path, cb_err *e) {
    size_t need = (size_t)B * T + 1;
    if (tok->n < need)
        return cb_fail(e, CB_EINPUT,
                       "%s: %zu tokens, but one batch needs B*T+1 = %zu; use more data or lower "
                       "--batch/--seq-len",
                       path, tok->n, need);
    l->tok = tok;
    l->B = B;
    l->T = T;
    l->shuffle = shuffle;
    l->k = 0;
    cb_rng_seed(&l->rng, seed ^ 0xDA7A);
    return CB_OK;
}

void cb_loader_next(cb_loader *l, int *inp, int *targets, int r0, int nrows) {
    size_t T = l->T, run = (size_t)l->B * T + 1, nruns = l->tok->n / run;
    size_t base = (l->k % nruns) * run;
    for (int b = 0; b < l->B; b++) {
        size_t row = base + b * T;
        if (l->shuffle) row = cb_rng_below(&l->rng, l->tok->n - T);
        if (b < r0 || b >= r0 + nrows) continue;
        cb_tokens_read(l->tok, row, T, inp + (b - r0) * T);
        cb_tokens_read(l->tok, row + 1, T, targets + (b - r0) * T);
    }
    l->k++;
}
