// Dead code. Needs: nothing. Keeps: everything the outputs reach, and the
// declared inputs (the calling convention), used or not.
//
// Tiny on purpose: nodes are immutable and hash-consed, so a graph is exactly
// what its outputs reach. The pass rebuilds the graph from its outputs (the
// rewrite engine with no rule: one visit per live node, every node its own
// replacement), so whatever earlier rewrites left behind is in no graph, and
// printing and code generation, which walk from the outputs too, never see
// it. The context owns the dead nodes until it is freed.
#include "passes.h"

IrGraph *pass_dce(IrCtx *c, IrGraph *g) { return pass_rewrite(c, g, NULL, NULL); }
