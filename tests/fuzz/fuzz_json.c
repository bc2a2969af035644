/* libFuzzer harness: json_parse on arbitrary bytes (never past len), and
 * every value of an accepted document walked. */
#include <string.h>

#include "formats/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(const json_val *v) {
    size_t n = 1;
    if (v->type == JSON_STR) n += v->len + strlen(v->s);
    for (int i = 0; v->type >= JSON_ARR && i < v->n; i++) {
        if (v->type == JSON_OBJ) n += strlen(v->k[i]);
        n += walk(&v->v[i]);
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_val v;
    json_error err;
    if (json_parse((const char *)data, size, &v, &err)) return 0;
    volatile size_t n = walk(&v);
    (void)n;
    json_free(&v);
    return 0;
}
