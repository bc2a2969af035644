/* `cubist prepare`: text -> train and validation token files. */
#include <stdlib.h>
#include <unistd.h>

#include "cubist.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "formats/fileio.h"

/* Token counts of the two files; both must be trainable (>= 2 tokens). */
static int split(const char *text_path, size_t n, int has_val, double val_frac,
                 size_t *ntrain, size_t *nval, cb_err *e) {
    *nval = has_val ? (size_t)((double)n * val_frac) : 0;
    *ntrain = n - *nval;
    if (*ntrain < 2 || (has_val && *nval < 2))
        return cb_fail(e, CB_EINPUT, "%s: %zu tokens split into %zu for training and %zu for validation; "
                       "each needs at least 2: use a longer text or change the validation fraction",
                       text_path, n, *ntrain, *nval);
    return CB_OK;
}

/* Both files or neither: each is staged to its .tmp first, and if the
 * second rename fails the first file is removed again. */
static int write_split(const char *text_path, const uint16_t *ids, size_t n, int tag,
                       const char *train_path, const char *val_path, double val_frac, cb_err *e) {
    const int has_val = val_path != NULL;
    size_t ntrain, nval;
    fio_atomic ta = {.fd = -1}, va = {.fd = -1};
    int rc = split(text_path, n, has_val, val_frac, &ntrain, &nval, e);
    if (!rc) rc = cb_tokens_stage(&ta, train_path, ids, ntrain, tag, e);
    if (!rc && has_val && (rc = cb_tokens_stage(&va, val_path, ids + ntrain, nval, tag, e)))
        fio_atomic_abort(&ta);
    if (!rc && (rc = fio_atomic_commit(&ta, e))) fio_atomic_abort(&va);
    if (!rc && has_val && (rc = fio_atomic_commit(&va, e))) unlink(train_path);
    return rc;
}

static int encode_split(const char *text_path, const void *text, size_t len, const cb_tokenizer *tk,
                        const char *train_path, const char *val_path, double val_frac, cb_err *e) {
    uint16_t *ids = malloc(len * sizeof *ids);
    size_t n = ids ? tk->encode(tk, text, len, ids) : SIZE_MAX;
    int rc = n == SIZE_MAX ? cb_fail(e, CB_ENOMEM, "%s: out of memory for %zu tokens", text_path, len)
           : write_split(text_path, ids, n, cb_tokenizer_tag(tk->name), train_path, val_path, val_frac, e);
    free(ids);
    return rc;
}

int cb_prepare_text(const char *text_path, const char *train_path, const char *val_path,
                    double val_frac, const char *tokenizer, const char *bpe_dir, cb_err *e) {
    if (!(val_frac >= 0 && val_frac < 1))
        return cb_fail(e, CB_EINPUT, "validation fraction %g is outside [0, 1); pass a value like 0.1", val_frac);
    if (val_path && val_frac == 0)
        return cb_fail(e, CB_EINPUT, "%s: a validation file with a validation fraction of 0 would be "
                       "empty; pass a fraction like 0.05 or drop the validation file", val_path);
    cb_tokenizer tk;
    int rc = cb_tokenizer_open(tokenizer ? tokenizer : "byte", bpe_dir, &tk, e);
    if (rc) return rc;
    void *text;
    size_t len;
    if (!(rc = fio_map(text_path, "check the path to the text file", &text, &len, e))) {
        if (len == 0) rc = cb_fail(e, CB_EINPUT, "%s: file is empty; give a text file to train on", text_path);
        else rc = encode_split(text_path, text, len, &tk, train_path, val_path, val_frac, e);
        fio_unmap(text, len);
    }
    cb_tokenizer_free(&tk);
    return rc;
}
