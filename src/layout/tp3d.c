/* 3D tensor parallelism: not implemented yet. */
#include "comm/grid.h"
#include "layout/layout.h"

int cb_layout_3d(cb_grid *g, cb_layout **out, cb_err *e) {
    (void)out;
    return cb_fail(e, CB_EINPUT, "--tp-mode 3d (tp %d) is not implemented yet; use --tp 1", g->tp);
}
