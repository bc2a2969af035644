/* Runs a harness over files without libFuzzer (make test): each argument
 * is a corpus file, passed once to LLVMFuzzerTestOneInput. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) return fprintf(stderr, "replay: cannot open %s\n", argv[i]), 1;
        uint8_t *buf = NULL;
        size_t n = 0, cap = 0, k;
        do {
            if (n == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 4096))) return 1;
            k = fread(buf + n, 1, cap - n, f);
            n += k;
        } while (k);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
