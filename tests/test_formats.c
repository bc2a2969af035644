/* File formats: safetensors, token files, text preparation, JSON reader.
 *   test_formats                      run the checks, one PASS/FAIL line each
 *   test_formats --write-sample PATH  write the sample safetensors file that
 *                                     tests/test_safetensors_torch.py reads
 *   test_formats --read-sample PATH   print a safetensors file's tensors
 *                                     (name, shape, sum, weighted sum) and
 *                                     metadata, for the same script */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cubist.h"
#include "data/tokenizer.h"
#include "formats/json.h"

static int nfail;
static char dir[] = "/tmp/cubist_test_formats_XXXXXX";

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    nfail += !ok;
}

/* Path of a fixture in the scratch directory; four live at a time. */
static const char *fx(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "test_formats: cannot write fixture %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* ---------------------------------------------------------------- safetensors */

/* A safetensors file from a header text and datalen zero bytes of data;
 * the length field says hlen_claim, or the true length when 0. */
static void write_st_raw(const char *path, const char *header, size_t hlen_claim, size_t datalen) {
    size_t hl = strlen(header), n = 8 + hl + datalen;
    if (!hlen_claim) hlen_claim = hl;
    uint8_t *b = calloc(n, 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hlen_claim >> (8 * i));
    memcpy(b + 8, header, hl);
    write_bytes(path, b, n);
    free(b);
}

/* Opens a bad file; expects CB_EINPUT, the path and `want` in the message. */
static void expect_bad_st(const char *name, const char *path, const char *want) {
    cb_st_file f;
    cb_err e = {0};
    int rc = cb_st_open(path, &f, &e);
    int ok = rc == CB_EINPUT && strstr(e.msg, path) && strstr(e.msg, want) && f.map == NULL && f.t == NULL;
    check(ok, name, "rc=%d msg=\"%s\" (want '%s')", rc, e.msg, want);
}

static float sample_a(int i) { return (float)(i - 2.5) / 4; }
static float sample_b(int i) { return (float)i * 0.001f; }

static int write_sample(const char *path, cb_err *e) {
    float a[6], b[12], s = 3.25f;
    for (int i = 0; i < 6; i++) a[i] = sample_a(i);
    for (int i = 0; i < 12; i++) b[i] = sample_b(i);
    cb_st_entry t[] = {
        {"a", 2, {2, 3}, a},
        {"b.weight", 3, {3, 2, 2}, b},
        {"scalar", 0, {0}, &s},
        {"empty", 2, {0, 3}, NULL},
    };
    const char *meta[] = {"format", "pt", "note", "quote \" backslash \\ tab \t end"};
    return cb_st_write(path, t, 4, meta, 2, e);
}

static int same_floats(const uint8_t *p, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (v != want[i]) return 0;
    }
    return 1;
}

static void test_st_roundtrip(void) {
    const char *path = fx("sample.safetensors");
    cb_err e = {0};
    int rc = write_sample(path, &e);
    check(rc == CB_OK && !exists(fx("sample.safetensors.tmp")), "st_write", "rc=%d %s", rc, e.msg);
    cb_st_file f;
    rc = cb_st_open(path, &f, &e);
    check(rc == CB_OK && f.n == 4, "st_open", "rc=%d n=%d %s", rc, rc ? 0 : f.n, e.msg);
    if (rc) return;
    int order = !strcmp(f.t[0].name, "a") && !strcmp(f.t[1].name, "b.weight") && !strcmp(f.t[2].name, "scalar")
                && !strcmp(f.t[3].name, "empty");
    check(order, "st_names_in_order", "%s %s %s %s", f.t[0].name, f.t[1].name, f.t[2].name, f.t[3].name);
    const cb_st_tensor *b = cb_st_find(&f, "b.weight"), *s = cb_st_find(&f, "scalar"), *a = cb_st_find(&f, "a");
    int shapes = a && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && b && b->ndim == 3 && b->shape[0] == 3
                 && b->shape[2] == 2 && s && s->ndim == 0 && s->nbytes == 4 && f.t[3].nbytes == 0;
    check(shapes, "st_shapes", "a ndim %d, b ndim %d, scalar ndim %d", a ? a->ndim : -1, b ? b->ndim : -1, s ? s->ndim : -1);
    float wa[6], wb[12], ws = 3.25f;
    for (int i = 0; i < 6; i++) wa[i] = sample_a(i);
    for (int i = 0; i < 12; i++) wb[i] = sample_b(i);
    int vals = a && b && s && same_floats(f.data + a->offset, wa, 6) && same_floats(f.data + b->offset, wb, 12)
               && same_floats(f.data + s->offset, &ws, 1);
    check(vals, "st_values", "bitwise equal after round trip");
    const char *m1 = cb_st_meta(&f, "format"), *m2 = cb_st_meta(&f, "note");
    int meta = f.nmeta == 2 && m1 && !strcmp(m1, "pt") && m2 && !strcmp(m2, "quote \" backslash \\ tab \t end")
               && !cb_st_meta(&f, "missing") && !cb_st_find(&f, "missing");
    check(meta, "st_metadata", "nmeta=%d format=%s", f.nmeta, m1 ? m1 : "(none)");
    check((f.data - f.map) % 8 == 0, "st_data_aligned", "data section at byte %td", f.data - f.map);
    cb_st_close(&f);
}

static void test_st_bad(void) {
    const char *p = fx("bad.safetensors");
    write_bytes(p, "\x10\0\0\0\0", 5);
    expect_bad_st("st_bad_short", p, "shorter than");
    write_st_raw(p, "{}", 1000, 10);
    expect_bad_st("st_bad_header_past_end", p, "runs past the end");
    write_st_raw(p, "{\"a\": {\"dtype\": \"F32\",}}", 0, 0);
    expect_bad_st("st_bad_json", p, "at byte 22");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 0, 16);
    expect_bad_st("st_bad_shape_vs_offsets", p, "span 12");
    write_st_raw(p, "{\"w\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 0, 4);
    expect_bad_st("st_bad_dtype_i8", p, "tensor 'w' has dtype I8; cubist reads F32, F16 and BF16: convert the file to float32");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 8);
    expect_bad_st("st_bad_offsets_past_end", p, "truncated");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8);
    expect_bad_st("st_bad_duplicate_names", p, "tensor 'a' appears twice");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 0, 4);
    expect_bad_st("st_bad_ndim5", p, "5 dimensions");
    write_st_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 0, 8);
    expect_bad_st("st_bad_begin_after_end", p, "after end");
    write_st_raw(p, "{\"__metadata__\":{\"k\":1}}", 0, 0);
    expect_bad_st("st_bad_metadata_value", p, "metadata 'k'");
    write_st_raw(p, "[1, 2]", 0, 0);
    expect_bad_st("st_bad_not_object", p, "not an object");
    expect_bad_st("st_bad_missing_file", fx("nope.safetensors"), "No such file");
}

/* A file laid out by another writer: spaces, no padding, unaligned data. */
static void test_st_foreign(void) {
    const char *p = fx("foreign.safetensors");
    const char *h = "{ \"__metadata__\" : {\"x\": \"\\u00e9\\ud83d\\ude00\"}, \"b\": {\"data_offsets\": [4, 12], "
                    "\"shape\": [2], \"dtype\": \"F32\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}";
    float v[3] = {1.5f, -2.0f, 7.0f};
    size_t hl = strlen(h);
    uint8_t *buf = calloc(8 + hl + 12, 1);
    buf[0] = (uint8_t)hl;
    memcpy(buf + 8, h, hl);
    memcpy(buf + 8 + hl, v, 12);
    write_bytes(p, buf, 8 + hl + 12);
    free(buf);
    cb_st_file f;
    cb_err e = {0};
    int rc = cb_st_open(p, &f, &e);
    int ok = rc == CB_OK && f.n == 2 && !strcmp(f.t[0].name, "b") && same_floats(f.data + f.t[0].offset, v + 1, 2)
             && same_floats(f.data + f.t[1].offset, v, 1) && !strcmp(cb_st_meta(&f, "x"), "\xc3\xa9\xf0\x9f\x98\x80");
    check(ok, "st_read_foreign_layout", "rc=%d %s (header %zu bytes, data unaligned)", rc, e.msg, hl);
    if (!rc) cb_st_close(&f);
}

/* Failures must leave neither the file nor path.tmp, and keep an old file. */
static void test_st_write_fail(void) {
    cb_err e = {0};
    float x[1] = {1};
    cb_st_entry t[] = {{"x", 1, {1}, x}};
    const char *p = fx("no/such/dir/m.safetensors");
    int rc = cb_st_write(p, t, 1, NULL, 0, &e);
    check(rc == CB_ESYS && strstr(e.msg, p) && !exists(p), "st_write_missing_dir", "rc=%d msg=\"%s\"", rc, e.msg);
    write_bytes(fx("afile"), "x", 1);
    p = fx("afile/m.safetensors");
    rc = cb_st_write(p, t, 1, NULL, 0, &e);
    check(rc == CB_ESYS && !exists(p), "st_write_under_file", "rc=%d msg=\"%s\"", rc, e.msg);
    if (getuid() != 0) { /* root writes through permissions */
        mkdir(fx("ro"), 0500);
        p = fx("ro/m.safetensors");
        rc = cb_st_write(p, t, 1, NULL, 0, &e);
        check(rc == CB_ESYS && !exists(p), "st_write_readonly_dir", "rc=%d msg=\"%s\"", rc, e.msg);
    }
}

/* A write cut short by the file-size limit, over an existing good file. */
static void test_st_write_partial(void) {
    const char *p = fx("keep.safetensors");
    cb_err e = {0};
    write_sample(p, &e);
    long before = file_size(p);
    float *big = calloc(4096, sizeof *big);
    cb_st_entry t[] = {{"big", 1, {4096}, big}};
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000; /* per process: a log file on stdout must not be written meanwhile */
    fflush(stdout);
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = cb_st_write(p, t, 1, NULL, 0, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    free(big);
    int ok = rc == CB_ESYS && strstr(e.msg, p) && file_size(p) == before && !exists(fx("keep.safetensors.tmp"));
    check(ok, "st_write_partial_leaves_old_file", "rc=%d size %ld -> %ld msg=\"%s\"", rc, before, file_size(p), e.msg);
}

/* ---------------------------------------------------------------- JSON */

static void expect_json_err(const char *name, const char *text, size_t off) {
    json_val v;
    json_error je;
    int rc = json_parse(text, strlen(text), &v, &je);
    check(rc == -1 && je.off == off, name, "rc=%d offset %zu (want %zu) %s", rc, rc ? je.off : 0, off, rc ? je.msg : "");
    if (!rc) json_free(&v);
}

static void test_json(void) {
    const char *doc = " {\"s\":\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\",\"i\":-9223372036854775808,\"big\":18446744073709551616,"
                      "\"f\":-1.5e3,\"l\":[true,false,null,[]],\"o\":{}} ";
    json_val v;
    json_error je;
    int rc = json_parse(doc, strlen(doc), &v, &je);
    const json_val *s = json_get(&v, "s"), *i = json_get(&v, "i"), *big = json_get(&v, "big"), *f = json_get(&v, "f");
    const json_val *l = json_get(&v, "l");
    int ok = rc == 0 && s && !strcmp(s->s, "a\"\\/\b\f\n\r\tA") && i && i->type == JSON_INT && i->i == INT64_MIN
             && big && big->type == JSON_NUM && f && f->type == JSON_NUM && f->d == -1500 && l && l->n == 4
             && l->v[0].b == 1 && l->v[2].type == JSON_NULL && l->v[3].type == JSON_ARR && json_get(&v, "o")->n == 0;
    check(ok, "json_values", "rc=%d %s", rc, rc ? je.msg : "");
    if (!rc) json_free(&v);
    expect_json_err("json_trailing_comma", "[1,]", 3);
    expect_json_err("json_leading_zero", "[01]", 1);
    expect_json_err("json_unterminated", "{\"a\": \"xy", 6);
    expect_json_err("json_bad_utf8", "[\"a\xff\"]", 3);
    expect_json_err("json_lone_surrogate", "[\"\\ud800x\"]", 2);
    expect_json_err("json_control_char", "[\"a\nb\"]", 3);
    expect_json_err("json_trailing_data", "{} x", 3);
    expect_json_err("json_empty", "", 0);
    expect_json_err("json_nan", "[NaN]", 1);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    json_val dv;
    rc = json_parse(deep, 200, &dv, &je);
    check(rc == -1 && strstr(je.msg, "deeper"), "json_depth_limit", "100 nested arrays: %s", rc ? je.msg : "accepted");
    if (!rc) json_free(&dv);
    json_buf b = {0};
    jb_str(&b, "q\"\\\n\x01");
    check(!b.oom && !strcmp(b.p, "\"q\\\"\\\\\\u000a\\u0001\""), "json_write_escapes", "%s", b.p);
    jb_free(&b);
}

/* ---------------------------------------------------------------- tokens */

static void expect_bad_tokens(const char *name, const char *path, int vocab, const char *want) {
    cb_tokens t;
    cb_err e = {0};
    int rc = cb_tokens_open(path, vocab, &t, &e);
    int ok = rc == CB_EINPUT && strstr(e.msg, path) && strstr(e.msg, want) && t.map == NULL;
    check(ok, name, "rc=%d msg=\"%s\" (want '%s')", rc, e.msg, want);
    if (!rc) cb_tokens_close(&t);
}

static void test_tokens_llmc(void) {
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i * 7 % 256);
    const char *p = fx("llmc.bin");
    cb_err e = {0};
    int rc = cb_tokens_write(p, tok, 1000, &e);
    check(rc == CB_OK && file_size(p) == 1024 + 2000 && !exists(fx("llmc.bin.tmp")), "tok_write_llmc",
          "rc=%d size=%ld %s", rc, file_size(p), e.msg);
    cb_tokens t;
    rc = cb_tokens_open(p, 256, &t, &e);
    int ok = rc == CB_OK && t.format == CB_TOK_LLMC && t.n == 1000 && !memcmp(t.tok, tok, sizeof tok);
    check(ok, "tok_open_llmc", "rc=%d format=%d n=%zu %s", rc, t.format, t.n, e.msg);
    if (!rc) cb_tokens_close(&t);
    if (truncate(p, 1024 + 2000 - 10) != 0) perror("truncate");
    expect_bad_tokens("tok_truncated_llmc", p, 256, "3024 bytes, but the file has 3014");
    int32_t h[256] = {20240520, 2, 4};
    write_bytes(p, h, sizeof h);
    expect_bad_tokens("tok_llmc_version", p, 256, "version 2");
}

static void test_tokens_nanogpt(void) {
    uint16_t tok[600];
    for (int i = 0; i < 600; i++) tok[i] = (uint16_t)(i * 13 % 50257);
    const char *p = fx("nano.bin");
    write_bytes(p, tok, sizeof tok);
    cb_tokens t;
    cb_err e = {0};
    int rc = cb_tokens_open(p, 50257, &t, &e);
    int ok = rc == CB_OK && t.format == CB_TOK_NANOGPT && t.n == 600 && !memcmp(t.tok, tok, sizeof tok);
    check(ok, "tok_open_nanogpt", "rc=%d format=%d n=%zu %s", rc, t.format, t.n, e.msg);
    if (!rc) cb_tokens_close(&t);
    tok[5] = 300;
    write_bytes(p, tok, 20);
    expect_bad_tokens("tok_token_ge_vocab", p, 256, "token 5 is 300, not below the vocab size 256; pass `--vocab");
    write_bytes(p, tok, 2);
    expect_bad_tokens("tok_one_token", p, 256, "at least 2");
}

static void test_tokens_bad_files(void) {
    expect_bad_tokens("tok_missing", fx("missing.bin"), 256, "cubist prepare");
    write_bytes(fx("empty.bin"), "", 0);
    expect_bad_tokens("tok_empty", fx("empty.bin"), 256, "empty");
    write_bytes(fx("odd.bin"), "\x01\x02\x03", 3);
    expect_bad_tokens("tok_odd_size", fx("odd.bin"), 256, "odd");
}

/* Files that are not tokens are called so, whatever --vocab is; plausible
 * tokens above the vocab get the --vocab advice. */
static void test_tokens_not_tokens(void) {
    int32_t h[64] = {20240520, 1, 10}; /* the magic, but 256 bytes: no full header */
    write_bytes(fx("short_hdr.bin"), h, sizeof h);
    expect_bad_tokens("tok_truncated_header", fx("short_hdr.bin"), 65536, "truncated llm.c header");
    char text[2000];
    for (int i = 0; i < 2000; i++) text[i] = i % 61 == 60 ? '\n' : (char)('a' + i % 26);
    write_bytes(fx("text.bin"), text, sizeof text);
    expect_bad_tokens("tok_text_file", fx("text.bin"), 65536, "looks like a text file");
    static uint16_t tok[50000];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 50000; i++) { /* xorshift: uniform 16-bit garbage */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x >> 24);
    }
    tok[0] = 1; /* no llm.c magic, no text */
    write_bytes(fx("garbage.bin"), tok, sizeof tok);
    expect_bad_tokens("tok_random_garbage", fx("garbage.bin"), 50304, "not a token file");
    for (int i = 0; i < 50000; i++) { /* log-uniform ranks (density 1/r, Zipf) -> GPT-2 ids */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0;
        int r = (int)exp(u * log(50257.0));
        tok[i] = (uint16_t)((r * 7919L) % 50257);
    }
    write_bytes(fx("gpt2.bin"), tok, sizeof tok);
    expect_bad_tokens("tok_gpt2_ids_vocab_256", fx("gpt2.bin"), 256, "pass `--vocab N` with N >");
}

/* ---------------------------------------------------------------- prepare */

static void test_prepare(void) {
    char text[1000];
    for (int i = 0; i < 1000; i++) text[i] = (char)(' ' + i % 90);
    write_bytes(fx("text.txt"), text, sizeof text);
    cb_err e = {0};
    int rc = cb_prepare_text(fx("text.txt"), fx("train.bin"), fx("val.bin"), 0.1, "byte", NULL, &e);
    cb_tokens tr = {0}, va = {0};
    int ok = rc == CB_OK && !cb_tokens_open(fx("train.bin"), 256, &tr, &e) && !cb_tokens_open(fx("val.bin"), 256, &va, &e);
    ok = ok && tr.n == 900 && va.n == 100 && tr.tok[0] == ' ' && tr.tok[899] == (uint16_t)text[899]
         && va.tok[0] == (uint16_t)text[900] && va.tok[99] == (uint16_t)text[999];
    check(ok, "prepare_split", "rc=%d train %zu val %zu tokens (want 900, 100) %s", rc, tr.n, va.n, e.msg);
    cb_tokens_close(&tr);
    cb_tokens_close(&va);
    rc = cb_prepare_text(fx("text.txt"), fx("all.bin"), NULL, 0.1, "byte", NULL, &e);
    ok = rc == CB_OK && file_size(fx("all.bin")) == 1024 + 2000;
    check(ok, "prepare_no_val", "rc=%d size=%ld", rc, file_size(fx("all.bin")));
    /* the validation file cannot be written: the training file must not stay behind */
    rc = cb_prepare_text(fx("text.txt"), fx("train2.bin"), fx("nodir/val.bin"), 0.1, "byte", NULL, &e);
    ok = rc != CB_OK && strstr(e.msg, "nodir/val.bin") && !exists(fx("train2.bin")) &&
         !exists(fx("train2.bin.tmp"));
    check(ok, "prepare_val_unwritable_leaves_nothing", "rc=%d train2.bin %s: %s", rc,
          exists(fx("train2.bin")) ? "left behind" : "absent", e.msg);
    rc = cb_prepare_text(fx("text.txt"), fx("train3.bin"), fx("val3.bin"), 0, "byte", NULL, &e);
    ok = rc == CB_EINPUT && strstr(e.msg, "fraction of 0") && !exists(fx("train3.bin"));
    check(ok, "prepare_val_fraction_0_refused", "rc=%d %s", rc, e.msg);
    rc = cb_prepare_text(fx("nothere.txt"), fx("x.bin"), NULL, 0, "byte", NULL, &e);
    check(rc == CB_EINPUT && strstr(e.msg, "nothere.txt"), "prepare_missing_text", "rc=%d %s", rc, e.msg);
    write_bytes(fx("empty.txt"), "", 0);
    rc = cb_prepare_text(fx("empty.txt"), fx("x.bin"), NULL, 0, "byte", NULL, &e);
    check(rc == CB_EINPUT && strstr(e.msg, "empty"), "prepare_empty_text", "rc=%d %s", rc, e.msg);
    cb_tokenizer tk = cb_tokenizer_byte();
    uint8_t out[4] = {0};
    size_t n1 = tk.decode(&tk, 'h', out, 4), n2 = tk.decode(&tk, 300, out + 1, 3);
    check(tk.vocab == 256 && n1 == 1 && out[0] == 'h' && n2 == 0 && out[1] == 0, "tokenizer_byte_decode",
          "decode('h') -> %zu byte(s), decode(300) -> %zu", n1, n2);
}

/* ---------------------------------------------------------------- driver */

static int rm_entry(const char *p, const struct stat *s, int flag, struct FTW *ftw) {
    (void)s; (void)flag; (void)ftw;
    return remove(p);
}

static int read_sample(const char *path) {
    cb_st_file f;
    cb_err e = {0};
    if (cb_st_open(path, &f, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
    for (int i = 0; i < f.n; i++) {
        const cb_st_tensor *t = &f.t[i];
        double sum = 0, wsum = 0;
        for (size_t j = 0; j < t->nbytes / 4; j++) {
            float v;
            memcpy(&v, f.data + t->offset + 4 * j, 4);
            sum += v;
            wsum += (double)(j + 1) * v;
        }
        printf("tensor %s %d", t->name, t->ndim);
        for (int d = 0; d < t->ndim; d++) printf(" %lld", (long long)t->shape[d]);
        printf(" %.17g %.17g\n", sum, wsum);
    }
    for (int i = 0; i < f.nmeta; i++) printf("meta %s=%s\n", f.meta_key[i], f.meta_val[i]);
    cb_st_close(&f);
    return 0;
}

int main(int argc, char **argv) {
    cb_err e = {0};
    if (argc == 3 && !strcmp(argv[1], "--write-sample")) {
        if (write_sample(argv[2], &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--read-sample")) return read_sample(argv[2]);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_st_roundtrip();
    test_st_bad();
    test_st_foreign();
    test_st_write_fail();
    test_st_write_partial();
    test_json();
    test_tokens_llmc();
    test_tokens_nanogpt();
    test_tokens_bad_files();
    test_tokens_not_tokens();
    test_prepare();
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return nfail ? 1 : 0;
}
