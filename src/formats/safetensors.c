/* safetensors: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {str: str}}, then the data section at byte 8 + N.
 * Reading maps the file and checks every entry against the data section,
 * so a caller may trust offset and nbytes. Tensors are F32, F16 or BF16
 * (published weights); cubist computes in F32, so the halves are converted
 * on reading, and written only by converting a whole file (export). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"
#include "formats/fileio.h"
#include "formats/json.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; add byte swapping");

/* The reference implementation refuses headers this large too. */
#define ST_MAX_HEADER 100000000ull
#define ST_META "__metadata__"

static const char *ST_CORRUPT = "the file is corrupt or not safetensors";
static const char *const DTYPE_NAME[3] = {"F32", "F16", "BF16"};
static const unsigned DTYPE_SIZE[3] = {4, 2, 2};

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_uint(const json_val *v) {
    return v && v->type == JSON_INT && v->i >= 0 ? v->i : -1;
}

/* shape -> t->ndim, t->shape, and the byte count at t->dtype in *nbytes. */
static int read_shape(const char *path, const char *name, const json_val *s, cb_st_tensor *t,
                      uint64_t *nbytes, cb_err *e) {
    if (!s || s->type != JSON_ARR)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' has no \"shape\" array; %s", path, name, ST_CORRUPT);
    if (s->n > 4)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' has %d dimensions; cubist reads at most 4: reshape it before saving",
                       path, name, s->n);
    uint64_t bytes = DTYPE_SIZE[t->dtype];
    t->ndim = s->n;
    for (int d = 0; d < s->n; d++) {
        int64_t x = json_uint(&s->v[d]);
        if (x < 0)
            return cb_fail(e, CB_EINPUT, "%s: tensor '%s' shape[%d] is not a non-negative integer; %s",
                           path, name, d, ST_CORRUPT);
        if (__builtin_mul_overflow(bytes, (uint64_t)x, &bytes))
            return cb_fail(e, CB_EINPUT, "%s: tensor '%s' shape overflows 64 bits; %s", path, name, ST_CORRUPT);
        t->shape[d] = x;
    }
    *nbytes = bytes;
    return CB_OK;
}

static int read_offsets(const char *path, const char *name, const json_val *o, uint64_t datasize,
                        cb_st_tensor *t, cb_err *e) {
    int64_t b = -1, end = -1;
    if (o && o->type == JSON_ARR && o->n == 2) {
        b = json_uint(&o->v[0]);
        end = json_uint(&o->v[1]);
    }
    if (b < 0 || end < 0)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' needs \"data_offsets\": [begin, end] of non-negative integers; %s",
                       path, name, ST_CORRUPT);
    if (b > end)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' data_offsets begin %lld is after end %lld; %s",
                       path, name, (long long)b, (long long)end, ST_CORRUPT);
    if ((uint64_t)end > datasize)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' data ends at byte %lld but the data section holds %llu bytes; "
                       "the file is truncated: copy or save it again", path, name, (long long)end,
                       (unsigned long long)datasize);
    t->offset = (size_t)b;
    t->nbytes = (size_t)(end - b);
    return CB_OK;
}

static int read_tensor(const char *path, const char *name, size_t namelen, const json_val *v,
                       uint64_t datasize, cb_st_tensor *t, cb_err *e) {
    if (namelen != strlen(name) || namelen >= sizeof t->name)
        return cb_fail(e, CB_EINPUT, "%s: tensor name '%.40s...' is longer than %zu bytes or holds a NUL; rename it",
                       path, name, sizeof t->name - 1);
    memcpy(t->name, name, namelen + 1);
    if (v->type != JSON_OBJ)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' entry is a JSON %s, not an object; %s",
                       path, name, json_type_name(v->type), ST_CORRUPT);
    const json_val *dt = json_get(v, "dtype");
    if (!dt || dt->type != JSON_STR)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' has no \"dtype\" string; %s", path, name, ST_CORRUPT);
    t->dtype = -1;
    for (int d = 0; d < 3; d++)
        if (!strcmp(dt->s, DTYPE_NAME[d])) t->dtype = d;
    if (t->dtype < 0)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' has dtype %.16s; cubist reads F32, F16 and BF16: convert the "
                       "file to float32 (in PyTorch: {k: v.float() for k, v in state_dict.items()})", path, name, dt->s);
    uint64_t nbytes = 0;
    int rc = read_shape(path, name, json_get(v, "shape"), t, &nbytes, e);
    if (rc) return rc;
    if ((rc = read_offsets(path, name, json_get(v, "data_offsets"), datasize, t, e))) return rc;
    if (nbytes != t->nbytes)
        return cb_fail(e, CB_EINPUT, "%s: tensor '%s' shape needs %llu bytes of %s but data_offsets span %zu; %s",
                       path, name, (unsigned long long)nbytes, DTYPE_NAME[t->dtype], t->nbytes, ST_CORRUPT);
    return CB_OK;
}

static int read_meta(const char *path, const json_val *m, cb_st_file *f, cb_err *e) {
    if (m->type != JSON_OBJ)
        return cb_fail(e, CB_EINPUT, "%s: \"__metadata__\" is a JSON %s, not an object of strings; %s",
                       path, json_type_name(m->type), ST_CORRUPT);
    f->meta_key = calloc((size_t)m->n + 1, sizeof *f->meta_key);
    f->meta_val = calloc((size_t)m->n + 1, sizeof *f->meta_val);
    if (!f->meta_key || !f->meta_val) return cb_fail(e, CB_ENOMEM, "%s: out of memory reading metadata", path);
    for (int i = 0; i < m->n; i++) {
        if (m->v[i].type != JSON_STR)
            return cb_fail(e, CB_EINPUT, "%s: metadata '%s' is a JSON %s; safetensors metadata values are strings",
                           path, m->k[i], json_type_name(m->v[i].type));
        f->meta_key[i] = strdup(m->k[i]);
        f->meta_val[i] = strdup(m->v[i].s);
        f->nmeta = i + 1;
        if (!f->meta_key[i] || !f->meta_val[i]) return cb_fail(e, CB_ENOMEM, "%s: out of memory reading metadata", path);
    }
    return CB_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copy of the names so duplicates sit side by side. */
static int check_duplicates(const char *path, const cb_st_file *f, cb_err *e) {
    if (f->n < 2) return CB_OK;
    const char **names = malloc((size_t)f->n * sizeof *names);
    if (!names) return cb_fail(e, CB_ENOMEM, "%s: out of memory checking tensor names", path);
    for (int i = 0; i < f->n; i++) names[i] = f->t[i].name;
    qsort(names, (size_t)f->n, sizeof *names, cmp_name);
    int rc = CB_OK;
    for (int i = 1; i < f->n && !rc; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = cb_fail(e, CB_EINPUT, "%s: tensor '%s' appears twice in the header; %s", path, names[i], ST_CORRUPT);
    free(names);
    return rc;
}

static int read_entries(const char *path, const json_val *root, uint64_t datasize, cb_st_file *f, cb_err *e) {
    int rc, seen_meta = 0;
    f->t = calloc((size_t)root->n + 1, sizeof *f->t);
    if (!f->t) return cb_fail(e, CB_ENOMEM, "%s: out of memory for %d tensor entries", path, root->n);
    for (int i = 0; i < root->n; i++) {
        const char *k = root->k[i];
        if (strcmp(k, ST_META) == 0) {
            if (seen_meta++)
                return cb_fail(e, CB_EINPUT, "%s: \"__metadata__\" appears twice in the header; %s", path, ST_CORRUPT);
            rc = read_meta(path, &root->v[i], f, e);
        } else {
            rc = read_tensor(path, k, strlen(k), &root->v[i], datasize, &f->t[f->n], e);
            f->n += rc == CB_OK;
        }
        if (rc) return rc;
    }
    return check_duplicates(path, f, e);
}

/* Header length and JSON; fills f from them. */
static int read_header(const char *path, cb_st_file *f, cb_err *e) {
    if (f->size < 8)
        return cb_fail(e, CB_EINPUT, "%s: file is %zu bytes, shorter than the 8-byte header length; "
                       "the file is truncated or not safetensors", path, f->size);
    uint64_t n = le64(f->map);
    if (n > f->size - 8)
        return cb_fail(e, CB_EINPUT, "%s: header length %llu runs past the end of the file (%zu bytes); "
                       "the file is truncated or not safetensors", path, (unsigned long long)n, f->size);
    if (n >= ST_MAX_HEADER)
        return cb_fail(e, CB_EINPUT, "%s: header length %llu is over the 100 MB limit; %s",
                       path, (unsigned long long)n, ST_CORRUPT);
    json_val root;
    json_error je;
    if (json_parse((const char *)f->map + 8, (size_t)n, &root, &je)) {
        if (je.nomem) return cb_fail(e, CB_ENOMEM, "%s: out of memory parsing the header", path);
        return cb_fail(e, CB_EINPUT, "%s: header is not valid JSON: %s at byte %zu of the header; %s",
                       path, je.msg, je.off, ST_CORRUPT);
    }
    int rc = root.type == JSON_OBJ ? CB_OK
           : cb_fail(e, CB_EINPUT, "%s: header is a JSON %s, not an object; %s", path, json_type_name(root.type), ST_CORRUPT);
    f->data = f->map + 8 + n;
    if (!rc) rc = read_entries(path, &root, f->size - 8 - n, f, e);
    json_free(&root);
    return rc;
}

int cb_st_open(const char *path, cb_st_file *f, cb_err *e) {
    memset(f, 0, sizeof *f);
    void *map;
    int rc = fio_map(path, "check the path to the safetensors file", &map, &f->size, e);
    if (rc) return rc;
    f->map = map;
    if ((rc = read_header(path, f, e))) cb_st_close(f);
    return rc;
}

void cb_st_close(cb_st_file *f) {
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
    free(f->t);
    fio_unmap(f->map, f->size);
    memset(f, 0, sizeof *f);
}

const cb_st_tensor *cb_st_find(const cb_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const cb_st_tensor *cb_st_find_hf(const cb_st_file *f, const char *name) {
    char hf[128];
    const cb_st_tensor *t = cb_st_find(f, name);
    snprintf(hf, sizeof hf, "transformer.%s", name);
    return t ? t : cb_st_find(f, hf);
}

/* The halves through the compiler's _Float16 (IEEE binary16: conversions
 * exact one way, round to nearest even the other) and bit operations for
 * bfloat16 (the top half of a float32). */
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40); /* NaN stays NaN */
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

void cb_st_read_f32(const cb_st_file *f, const cb_st_tensor *t, float *out) {
    const uint8_t *p = f->data + t->offset;
    size_t n = t->nbytes / DTYPE_SIZE[t->dtype];
    if (t->dtype == CB_ST_F32) {
        memcpy(out, p, t->nbytes);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, sizeof h);
        _Float16 x;
        memcpy(&x, &h, sizeof x);
        out[i] = t->dtype == CB_ST_BF16 ? bf16_to_f32(h) : (float)x;
    }
}

int cb_st_dtype_parse(const char *s, int *dtype, cb_err *e) {
    static const char *const flag[3] = {"fp32", "f16", "bf16"};
    for (int d = 0; d < 3; d++)
        if (!strcmp(s, flag[d])) return *dtype = d, CB_OK;
    return cb_fail(e, CB_EINPUT, "--save-dtype '%s' is unknown; use fp32, bf16 or f16", s);
}

const char *cb_st_meta(const cb_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing */

static size_t entry_numel(const cb_st_entry *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* Entries come from cubist's own tables, so a bad one is a bug, not input. */
static int check_entries(const char *path, const cb_st_entry *t, int n, const char *const *meta, int nmeta, cb_err *e) {
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name;
        int ok = nm && strlen(nm) < sizeof ((cb_st_tensor *)0)->name && strcmp(nm, ST_META) != 0
                 && t[i].ndim >= 0 && t[i].ndim <= 4;
        for (int d = 0; ok && d < t[i].ndim; d++) ok = t[i].shape[d] >= 0;
        if (ok && !t[i].data) ok = entry_numel(&t[i]) == 0;
        for (int j = 0; ok && j < i; j++) ok = strcmp(t[j].name, nm) != 0;
        if (!ok)
            return cb_fail(e, CB_EINTERNAL, "%s: tensor entry %d ('%.40s') has a bad or duplicate name, "
                           "shape or data; this is a bug in cubist", path, i, nm ? nm : "(null)");
    }
    for (int i = 0; i < 2 * nmeta; i++)
        if (!meta || !meta[i]) return cb_fail(e, CB_EINTERNAL, "%s: metadata pair %d is NULL; this is a bug in cubist", path, i / 2);
    return CB_OK;
}

/* JSON header, padded with spaces so the data section starts 8-aligned
 * (as the reference writer does, so readers may map floats in place). */
static void build_header(json_buf *b, const cb_st_entry *t, int n, const char *const *meta, int nmeta,
                         int dtype) {
    jb_puts(b, "{");
    if (nmeta > 0) {
        jb_puts(b, "\"" ST_META "\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) jb_puts(b, ",");
            jb_str(b, meta[2 * i]);
            jb_puts(b, ":");
            jb_str(b, meta[2 * i + 1]);
        }
        jb_puts(b, "}");
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (i || nmeta > 0) jb_puts(b, ",");
        jb_str(b, t[i].name);
        jb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", DTYPE_NAME[dtype]);
        for (int d = 0; d < t[i].ndim; d++) jb_printf(b, d ? ",%lld" : "%lld", (long long)t[i].shape[d]);
        size_t nb = entry_numel(&t[i]) * DTYPE_SIZE[dtype];
        jb_printf(b, "],\"data_offsets\":[%zu,%zu]}", off, off + nb);
        off += nb;
    }
    jb_puts(b, "}");
    while (!b->oom && b->len % 8) jb_puts(b, " ");
}

/* One tensor's floats at dtype, in chunks of halves. */
static int write_data(fio_atomic *a, const float *x, size_t n, int dtype, cb_err *e) {
    if (dtype == CB_ST_F32) return fio_atomic_write(a, x, n * sizeof *x, e);
    uint16_t buf[4096];
    int rc = CB_OK;
    for (size_t i = 0; i < n && !rc; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++) {
            _Float16 h = (_Float16)x[i + j];
            if (dtype == CB_ST_BF16) buf[j] = f32_to_bf16(x[i + j]);
            else memcpy(&buf[j], &h, sizeof h);
        }
        rc = fio_atomic_write(a, buf, k * sizeof *buf, e);
    }
    return rc;
}

static int write_file(const char *path, const json_buf *h, const cb_st_entry *t, int n, int dtype, cb_err *e) {
    fio_atomic a;
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h->len >> (8 * i));
    int rc = fio_atomic_open(&a, path, e);
    if (!rc) rc = fio_atomic_write(&a, len, 8, e);
    if (!rc) rc = fio_atomic_write(&a, h->p, h->len, e);
    for (int i = 0; i < n && !rc; i++)
        if (t[i].data) rc = write_data(&a, t[i].data, entry_numel(&t[i]), dtype, e);
    if (!rc) rc = fio_atomic_commit(&a, e);
    return rc;
}

static int st_write(const char *path, const cb_st_entry *t, int n, const char *const *meta, int nmeta,
                    int dtype, cb_err *e) {
    int rc = check_entries(path, t, n, meta, nmeta, e);
    if (rc) return rc;
    json_buf h = {0};
    build_header(&h, t, n, meta, nmeta, dtype);
    if (h.oom) rc = cb_fail(e, CB_ENOMEM, "%s: out of memory building the header", path);
    else rc = write_file(path, &h, t, n, dtype, e);
    jb_free(&h);
    return rc;
}

int cb_st_write(const char *path, const cb_st_entry *t, int n,
                const char *const *meta, int nmeta, cb_err *e) {
    return st_write(path, t, n, meta, nmeta, CB_ST_F32, e);
}

/* Every tensor of f as floats (one block) and entries naming them. */
static int read_all(const cb_st_file *f, const char *path, cb_st_entry *t, float **block, cb_err *e) {
    size_t total = 0;
    for (int i = 0; i < f->n; i++) total += f->t[i].nbytes / DTYPE_SIZE[f->t[i].dtype];
    *block = malloc((total + 1) * sizeof **block);
    if (!*block) return cb_fail(e, CB_ENOMEM, "out of memory converting %s", path);
    size_t off = 0;
    for (int i = 0; i < f->n; i++) {
        const cb_st_tensor *s = &f->t[i];
        t[i] = (cb_st_entry){.name = s->name, .ndim = s->ndim, .data = *block + off};
        memcpy(t[i].shape, s->shape, sizeof s->shape);
        cb_st_read_f32(f, s, *block + off);
        off += s->nbytes / DTYPE_SIZE[s->dtype];
    }
    return CB_OK;
}

int cb_st_convert(const char *path, int dtype, cb_err *e) {
    if (dtype == CB_ST_F32) return CB_OK;
    cb_st_file f;
    int rc = cb_st_open(path, &f, e);
    if (rc) return rc;
    cb_st_entry *t = calloc((size_t)f.n + 1, sizeof *t);
    const char **meta = calloc(2 * (size_t)f.nmeta + 1, sizeof *meta);
    float *block = NULL;
    rc = t && meta ? read_all(&f, path, t, &block, e) : cb_fail(e, CB_ENOMEM, "out of memory converting %s", path);
    for (int i = 0; i < f.nmeta; i++) meta[2 * i] = f.meta_key[i], meta[2 * i + 1] = f.meta_val[i];
    if (!rc) rc = st_write(path, t, f.n, meta, f.nmeta, dtype, e);
    free(block), free(t), free(meta);
    cb_st_close(&f);
    return rc;
}
