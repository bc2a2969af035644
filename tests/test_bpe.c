/* GPT-2 BPE: decode(encode(x)) == x on random byte strings (invalid UTF-8
 * included) and random mixes of ASCII, multi-byte code points and
 * whitespace; every id below the vocabulary. Run by tests/test_bpe.sh with
 * the directory of encoder.json and vocab.bpe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "util/rng.h"

static const char *PIECES[] = {" ", "  ", "\n", "\t", "a", "Z", "'s", "'ll", "7", "é", "e\xcc\x81", "\xe4\xb8\xad",
                               "\xf0\x9f\x98\x80", "\xe2\x80\x8d", "<|endoftext|>", "<|endo", "!", "\xc2\xa0"};

/* Random text of n bytes: raw bytes (kind 0) or pieces (kind 1). */
static size_t random_text(cb_rng *r, int kind, size_t n, uint8_t *out) {
    size_t k = 0;
    while (k < n) {
        if (kind == 0) {
            out[k++] = (uint8_t)cb_rng_below(r, 256);
            continue;
        }
        const char *p = PIECES[cb_rng_below(r, sizeof PIECES / sizeof *PIECES)];
        size_t m = strlen(p);
        if (k + m > n) break;
        memcpy(out + k, p, m);
        k += m;
    }
    return k;
}

static int roundtrip(const cb_tokenizer *tk, const uint8_t *x, size_t n, uint16_t *ids, uint8_t *back) {
    size_t k = tk->encode(tk, x, n, ids), m = 0;
    if (k == SIZE_MAX || k > n) return 0;
    for (size_t i = 0; i < k; i++) {
        if (ids[i] >= tk->vocab) return 0;
        size_t len = tk->decode(tk, ids[i], back + m, n - m);
        if (len == 0 || m + len > n) return 0;
        m += len;
    }
    return m == n && !memcmp(x, back, n);
}

int main(int argc, char **argv) {
    cb_tokenizer tk;
    cb_err e = {0};
    if (argc != 2 || cb_tokenizer_open("gpt2", argv[1], &tk, &e)) {
        printf("FAIL bpe: load: %s\n", argc == 2 ? e.msg : "usage: test_bpe BPE_DIR");
        return 1;
    }
    enum { MAXN = 4096, CASES = 400 };
    uint8_t *x = malloc(MAXN), *back = malloc(MAXN);
    uint16_t *ids = malloc(MAXN * sizeof *ids);
    cb_rng r;
    cb_rng_seed(&r, 15);
    int fails = 0;
    for (int kind = 0; kind < 2; kind++) {
        int bad = 0;
        for (int c = 0; c < CASES; c++) {
            size_t n = random_text(&r, kind, 1 + cb_rng_below(&r, c < CASES / 2 ? 64 : MAXN), x);
            bad += !roundtrip(&tk, x, n, ids, back);
        }
        printf("%s bpe: decode(encode(x)) == x, ids < %d, on %d random %s (%d wrong)\n", bad ? "FAIL" : "PASS",
               tk.vocab, CASES, kind ? "mixes of ASCII, UTF-8 and whitespace" : "byte strings", bad);
        fails += bad > 0;
    }
    cb_tokenizer_free(&tk);
    free(x), free(back), free(ids);
    return fails > 0;
}
