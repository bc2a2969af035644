/* A small strict JSON reader (RFC 8259) for safetensors headers, and a
 * growable text buffer for writing them. Private to cubist. */
#ifndef CUBIST_FORMATS_JSON_H
#define CUBIST_FORMATS_JSON_H

#include <stddef.h>
#include <stdint.h>

enum { JSON_NULL, JSON_BOOL, JSON_INT, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

/* Nesting deeper than this is refused: the parser recurses, and no
 * safetensors header needs more than three levels. */
#define JSON_MAX_DEPTH 64

typedef struct json_val {
    int type;
    int b;            /* JSON_BOOL */
    int64_t i;        /* JSON_INT: no fraction or exponent, fits in int64 */
    double d;         /* JSON_INT and JSON_NUM */
    char *s;          /* JSON_STR: decoded UTF-8, NUL-terminated */
    size_t len;       /* JSON_STR: bytes, may differ from strlen after \u0000 */
    int n;            /* JSON_ARR, JSON_OBJ: number of members */
    struct json_val *v; /* members, in document order */
    char **k;         /* JSON_OBJ: keys, decoded, parallel to v */
} json_val;

typedef struct json_error {
    size_t off;       /* byte offset of the problem in the input */
    int nomem;        /* 1 if allocation failed rather than the syntax */
    char msg[96];
} json_error;

/* Parses exactly buf[0, len): one value with optional surrounding
 * whitespace. Never reads past len. Returns 0 and fills *out, or -1 and
 * fills *err; *out then needs no freeing. */
int json_parse(const char *buf, size_t len, json_val *out, json_error *err);
void json_free(json_val *v);
/* Member of an object by key; NULL if v is not an object or has no key. */
const json_val *json_get(const json_val *v, const char *key);
const char *json_type_name(int type);

/* Text buffer for writing. On allocation failure it sets oom and drops
 * further appends, so a writer checks once at the end. */
typedef struct json_buf {
    char *p;
    size_t len, cap;
    int oom;
} json_buf;

void jb_puts(json_buf *b, const char *s);
void jb_putn(json_buf *b, const char *s, size_t n);
void jb_printf(json_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a quoted JSON string with the needed escapes. */
void jb_str(json_buf *b, const char *s);
void jb_free(json_buf *b);

#endif
