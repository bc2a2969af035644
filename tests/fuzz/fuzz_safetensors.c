/* libFuzzer harness: cb_st_open on arbitrary bytes, then every tensor and
 * metadata entry it reports is read, so a wrong offset or shape shows up
 * under ASan as an out-of-bounds read. */
#include "cubist.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    cb_st_file f;
    cb_err e;
    if (!path || cb_st_open(path, &f, &e)) return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < f.n; i++) {
        const cb_st_tensor *t = &f.t[i];
        const uint8_t *p = f.data + t->offset;
        for (size_t b = 0; b < t->nbytes; b += 64) sink ^= p[b];
        if (t->nbytes) sink ^= p[t->nbytes - 1];
    }
    for (int i = 0; i < f.nmeta; i++) sink ^= (uint8_t)f.meta_key[i][0] ^ (uint8_t)f.meta_val[i][0];
    cb_st_close(&f);
    return 0;
}
