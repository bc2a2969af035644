/* Loads a published (Hugging Face shaped) GPT-2 file into the GPT graph
 * (cb_model_declare_gpt + cb_model_load: what cubist train --init and
 * cubist sample run) and writes the next-token probabilities of one
 * sequence, for tests/torch/hf_gpt2.py to compare with PyTorch:
 *   test_hf_load FILE HEADS OUT.safetensors ID,ID,...
 * OUT holds "graph", (T, V). The model's context is T, so T must be the
 * file's seq_len. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubist.h"

static int parse_ids(const char *s, int *ids, int cap) {
    int n = 0;
    for (char *end; *s && n < cap; s = *end ? end + 1 : end) ids[n++] = (int)strtol(s, &end, 10);
    return n;
}

static int graph_probs(cb_dist *d, const char *path, const cb_gpt_config *c, const int *ids, int T, float *out,
                       cb_err *e) {
    cb_model *m = cb_model_new(d, 1, T);
    cb_model_declare_gpt(m, c);
    cb_adamw_config opt = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .steps = 1};
    int rc = cb_model_build(m, 1, &opt, e);
    if (!rc) rc = cb_model_load(m, path, e);
    const float *p = rc ? NULL : cb_model_probs(m, ids);
    if (!rc && !p) rc = cb_fail(e, CB_EINTERNAL, "cb_model_probs gave nothing");
    if (!rc) memcpy(out, p, sizeof(float) * T * c->vocab);
    cb_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    cb_dist *d;
    cb_err e = {0};
    if (cb_dist_init(&argc, &argv, &d, &e)) cb_dist_exit(NULL, &e);
    if (argc != 5) {
        fprintf(stderr, "usage: test_hf_load FILE HEADS OUT.safetensors ID,ID,...\n");
        return 2;
    }
    int ids[1024], T = parse_ids(argv[4], ids, 1024);
    cb_gpt_config c = {.n_head = atoi(argv[2])};
    float *g = NULL;
    int rc = cb_gpt_config_from_file(argv[1], &c, &e);
    if (!rc) rc = graph_probs(d, argv[1], &c, ids, T, (g = malloc(sizeof(float) * T * c.vocab)), &e);
    cb_st_entry t[1] = {{"graph", 2, {T, c.vocab}, g}};
    if (!rc) rc = cb_st_write(argv[3], t, 1, NULL, 0, &e);
    free(g);
    if (rc) cb_dist_exit(d, &e);
    cb_dist_finalize(d);
    return 0;
}
