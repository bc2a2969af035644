/* NeuMF (He et al. 2017) declared from the public layers: a GMF branch
 * (the element-wise product of a user and an item factor) and an MLP tower
 * (ReLU layers on the concatenated user and item embeddings of its own),
 * concatenated into one logit, trained with the logistic loss. Each row of
 * a batch is one (user, item) pair: id fields 0 and 1, the label in
 * targets. */
#include <math.h>
#include <stdio.h>

#include "graph/graph.h"

void cb_model_declare_ncf(cb_model *m, const cb_ncf_config *c) {
    int F = c->factors, E = c->mlp[0] / 2;
    cb_model_set_id_fields(m, 2);
    cb_layer *gu = cb_model_lookup(m, "gmf.user", c->users, F);
    cb_layer *gi = cb_model_lookup(m, "gmf.item", c->items, F);
    cb_layer *mu = cb_model_lookup(m, "mlp.user", c->users, E);
    cb_layer *mi = cb_model_lookup(m, "mlp.item", c->items, E);
    cb_layer *tab[4] = {gu, gi, mu, mi};
    for (int k = 0; k < 4; k++) cb_layer_set_init_std(tab[k], 0.1f);
    cb_act *g = cb_op_mul(cb_op_lookup(gu, 0), cb_op_lookup(gi, 1));
    cb_act *h = cb_op_concat(cb_op_lookup(mu, 0), cb_op_lookup(mi, 1));
    for (int l = 1; l < c->n_mlp; l++) {
        char name[32];
        snprintf(name, sizeof name, "mlp.%d", l - 1);
        cb_layer *lin = cb_model_linear(m, name, c->mlp[l - 1], c->mlp[l]);
        cb_layer_set_init_std(lin, sqrtf(2.0f / c->mlp[l - 1])); /* He et al. 2015, for ReLU */
        h = cb_op_relu(cb_op_linear(lin, h));
    }
    int W = F + c->mlp[c->n_mlp - 1];
    cb_layer *out = cb_model_logistic(m, "predict", W);
    cb_layer_set_init_std(out, sqrtf(1.0f / W));
    cb_op_logistic_loss(out, cb_op_concat(g, h));
}

double cb_ncf_flops_per_row(const cb_ncf_config *c) {
    double f = 0;
    for (int l = 1; l < c->n_mlp; l++) f += (double)c->mlp[l - 1] * c->mlp[l];
    f += c->factors + c->mlp[c->n_mlp - 1];
    return 6 * f; /* forward 2 per multiply-add, backward twice that */
}
