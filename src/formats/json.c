/* Strict JSON: RFC 8259 grammar, UTF-8 checked, no extensions (no comments,
 * no trailing commas, no NaN). Recursive descent with a depth limit; every
 * read is checked against the input length. */
#include "formats/json.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const unsigned char *p;
    size_t len, pos;
    json_error *err;
} parser;

static int parse_value(parser *ps, json_val *v, int depth);

static int fail_at(parser *ps, size_t off, const char *msg) {
    ps->err->off = off;
    ps->err->nomem = 0;
    snprintf(ps->err->msg, sizeof ps->err->msg, "%s", msg);
    return -1;
}

static int fail_nomem(parser *ps) {
    fail_at(ps, ps->pos, "out of memory");
    ps->err->nomem = 1;
    return -1;
}

static int peek(const parser *ps) { return ps->pos < ps->len ? ps->p[ps->pos] : -1; }

static void skip_ws(parser *ps) {
    while (ps->pos < ps->len) {
        unsigned char c = ps->p[ps->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        ps->pos++;
    }
}

/* Matches the literal word at pos (true, false, null). */
static int expect_word(parser *ps, const char *w) {
    size_t n = strlen(w);
    if (ps->len - ps->pos < n || memcmp(ps->p + ps->pos, w, n) != 0)
        return fail_at(ps, ps->pos, "invalid literal (expected true, false or null)");
    ps->pos += n;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p[pos..pos+4) -> code unit, or -1. */
static long hex4(const parser *ps, size_t pos) {
    if (ps->len - pos < 4) return -1;
    long u = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[pos + i]);
        if (h < 0) return -1;
        u = u * 16 + h;
    }
    return u;
}

static size_t put_utf8(char *o, unsigned long cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes available), or 0:
 * rejects overlong forms, surrogates and code points past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return k;
}

/* Escape at pos (just after the backslash) -> bytes in o; advances pos. */
static int parse_escape(parser *ps, char *o, size_t *olen) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    int c = peek(ps);
    const char *hit = c > 0 ? strchr(from, c) : NULL;
    if (hit) { *o = to[hit - from]; *olen = 1; ps->pos++; return 0; }
    if (c != 'u') return fail_at(ps, ps->pos, "invalid escape in string");
    size_t at = ps->pos - 1;
    long u = hex4(ps, ps->pos + 1);
    if (u < 0) return fail_at(ps, at, "invalid \\u escape (needs four hex digits)");
    ps->pos += 5;
    if (u >= 0xDC00 && u <= 0xDFFF) return fail_at(ps, at, "unpaired low surrogate in \\u escape");
    if (u >= 0xD800 && u <= 0xDBFF) {
        long lo = (ps->len - ps->pos >= 6 && ps->p[ps->pos] == '\\' && ps->p[ps->pos + 1] == 'u')
                      ? hex4(ps, ps->pos + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) return fail_at(ps, at, "unpaired high surrogate in \\u escape");
        ps->pos += 6;
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    }
    *olen = put_utf8(o, (unsigned long)u);
    return 0;
}

/* Finds the closing quote of the string opening at pos, so the decoded
 * copy can be sized: decoding never makes a string longer. */
static int string_end(parser *ps, size_t *end) {
    size_t i = ps->pos + 1;
    while (i < ps->len && ps->p[i] != '"') i += ps->p[i] == '\\' ? 2 : 1;
    if (i >= ps->len) return fail_at(ps, ps->pos, "unterminated string");
    *end = i;
    return 0;
}

static int parse_string(parser *ps, char **out, size_t *outlen) {
    size_t end;
    if (string_end(ps, &end)) return -1;
    char *s = malloc(end - ps->pos);
    if (!s) return fail_nomem(ps);
    size_t n = 0;
    ps->pos++;
    while (ps->pos < end) {
        const unsigned char c = ps->p[ps->pos];
        size_t k = 1;
        int bad = 0;
        if (c == '\\') {
            ps->pos++;
            if (parse_escape(ps, s + n, &k)) { free(s); return -1; }
            n += k;
            continue;
        }
        if (c < 0x20) bad = fail_at(ps, ps->pos, "control character in string (must be escaped)");
        else if (c >= 0x80 && (k = utf8_len(ps->p + ps->pos, end - ps->pos)) == 0)
            bad = fail_at(ps, ps->pos, "invalid UTF-8 in string");
        if (bad) { free(s); return -1; }
        memcpy(s + n, ps->p + ps->pos, k);
        n += k;
        ps->pos += k;
    }
    s[n] = '\0';
    ps->pos = end + 1;
    *out = s;
    *outlen = n;
    return 0;
}

static size_t scan_digits(const parser *ps, size_t i) {
    while (i < ps->len && ps->p[i] >= '0' && ps->p[i] <= '9') i++;
    return i;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? ; integers that fit stay exact. */
static int parse_number(parser *ps, json_val *v) {
    size_t s = ps->pos, i = s, d;
    if (i < ps->len && ps->p[i] == '-') i++;
    if (i >= ps->len || ps->p[i] < '0' || ps->p[i] > '9') return fail_at(ps, s, "invalid number");
    d = scan_digits(ps, i);
    if (ps->p[i] == '0' && d > i + 1) return fail_at(ps, s, "number with a leading zero");
    i = d;
    int isint = 1;
    if (i < ps->len && ps->p[i] == '.') {
        isint = 0;
        d = scan_digits(ps, i + 1);
        if (d == i + 1) return fail_at(ps, s, "number needs digits after '.'");
        i = d;
    }
    if (i < ps->len && (ps->p[i] == 'e' || ps->p[i] == 'E')) {
        isint = 0;
        i++;
        if (i < ps->len && (ps->p[i] == '+' || ps->p[i] == '-')) i++;
        d = scan_digits(ps, i);
        if (d == i) return fail_at(ps, s, "number needs digits in the exponent");
        i = d;
    }
    char tmp[128];
    if (i - s >= sizeof tmp) return fail_at(ps, s, "number longer than 127 characters");
    memcpy(tmp, ps->p + s, i - s);
    tmp[i - s] = '\0';
    v->d = strtod(tmp, NULL);
    v->type = JSON_NUM;
    if (isint) {
        int neg = tmp[0] == '-';
        uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, u = 0;
        int fits = 1;
        for (const char *c = tmp + neg; *c && fits; c++) {
            fits = u <= (lim - (uint64_t)(*c - '0')) / 10;
            u = u * 10 + (uint64_t)(*c - '0');
        }
        if (fits) {
            v->type = JSON_INT;
            v->i = neg ? (int64_t)(0 - u) : (int64_t)u;
        }
    }
    ps->pos = i;
    return 0;
}

/* Makes room for one more member of an array or object. */
static int grow(parser *ps, json_val *v, int cap) {
    if (v->n < cap) return cap;
    if (cap > INT_MAX / 4) return fail_at(ps, ps->pos, "too many members"), -1;
    int nc = cap ? 2 * cap : 8;
    json_val *nv = realloc(v->v, (size_t)nc * sizeof *nv);
    if (!nv) return fail_nomem(ps), -1;
    v->v = nv;
    if (v->type == JSON_OBJ) {
        char **nk = realloc(v->k, (size_t)nc * sizeof *nk);
        if (!nk) return fail_nomem(ps), -1;
        v->k = nk;
    }
    return nc;
}

/* Array or object body after the opening bracket; v->type already set. */
static int parse_members(parser *ps, json_val *v, int depth) {
    const int obj = v->type == JSON_OBJ;
    const char close = obj ? '}' : ']';
    int cap = 0;
    skip_ws(ps);
    if (peek(ps) == close) { ps->pos++; return 0; }
    for (;;) {
        if ((cap = grow(ps, v, cap)) < 0) return -1;
        if (obj) {
            size_t klen;
            skip_ws(ps);
            if (peek(ps) != '"') return fail_at(ps, ps->pos, "expected a string key in object");
            if (parse_string(ps, &v->k[v->n], &klen)) return -1;
            skip_ws(ps);
            if (peek(ps) != ':') { free(v->k[v->n]); return fail_at(ps, ps->pos, "expected ':' after object key"); }
            ps->pos++;
        }
        if (parse_value(ps, &v->v[v->n], depth + 1)) {
            if (obj) free(v->k[v->n]);
            return -1;
        }
        v->n++;
        skip_ws(ps);
        int c = peek(ps);
        ps->pos++;
        if (c == close) return 0;
        if (c != ',') return fail_at(ps, ps->pos - 1, obj ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
    }
}

static int parse_value(parser *ps, json_val *v, int depth) {
    memset(v, 0, sizeof *v);
    skip_ws(ps);
    if (depth > JSON_MAX_DEPTH) return fail_at(ps, ps->pos, "nesting deeper than 64 levels");
    int c = peek(ps), rc;
    switch (c) {
    case -1: return fail_at(ps, ps->pos, "unexpected end of input");
    case '{': case '[':
        v->type = c == '{' ? JSON_OBJ : JSON_ARR;
        ps->pos++;
        rc = parse_members(ps, v, depth);
        if (rc) json_free(v);
        return rc;
    case '"': v->type = JSON_STR; return parse_string(ps, &v->s, &v->len);
    case 't': v->type = JSON_BOOL; v->b = 1; return expect_word(ps, "true");
    case 'f': v->type = JSON_BOOL; return expect_word(ps, "false");
    case 'n': v->type = JSON_NULL; return expect_word(ps, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps, v);
        return fail_at(ps, ps->pos, "unexpected character");
    }
}

int json_parse(const char *buf, size_t len, json_val *out, json_error *err) {
    parser ps = {(const unsigned char *)buf, len, 0, err};
    err->off = (size_t)-1;
    err->nomem = 0;
    err->msg[0] = '\0';
    if (parse_value(&ps, out, 0)) return -1;
    skip_ws(&ps);
    if (ps.pos != len) {
        json_free(out);
        return fail_at(&ps, ps.pos, "unexpected data after the JSON value");
    }
    return 0;
}

void json_free(json_val *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        json_free(&v->v[i]);
        if (v->k) free(v->k[i]);
    }
    free(v->v);
    free(v->k);
    free(v->s);
    memset(v, 0, sizeof *v);
}

const json_val *json_get(const json_val *v, const char *key) {
    if (!v || v->type != JSON_OBJ) return NULL;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->k[i], key) == 0) return &v->v[i];
    return NULL;
}

const char *json_type_name(int type) {
    static const char *names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    return type >= 0 && type <= JSON_OBJ ? names[type] : "?";
}

/* ---------------------------------------------------------------- writing */

static int jb_reserve(json_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) { b->oom = 1; return -1; }
    b->p = np;
    b->cap = nc;
    return 0;
}

void jb_putn(json_buf *b, const char *s, size_t n) {
    if (jb_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void jb_puts(json_buf *b, const char *s) { jb_putn(b, s, strlen(s)); }

void jb_printf(json_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) { b->oom = 1; return; } /* only short numbers go through here */
    jb_putn(b, tmp, (size_t)n);
}

void jb_str(json_buf *b, const char *s) {
    jb_putn(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') { char e[2] = {'\\', (char)*c}; jb_putn(b, e, 2); }
        else if (*c < 0x20) jb_printf(b, "\\u%04x", *c);
        else jb_putn(b, (const char *)c, 1);
    }
    jb_putn(b, "\"", 1);
}

void jb_free(json_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
