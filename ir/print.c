// IR text: one node per line, `%id = op dtype[shape] operands {attributes}`.
// Stable and readable, so golden tests cost one file each.
#include "ir.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

char *ir_shape_str(const IrCtx *c, int ndim, const Dim *shape, char *buf, size_t len) {
  size_t n = 0;
  n += snprintf(buf + n, len - n, "[");
  for (int i = 0; i < ndim && n < len; i++) {
    Dim d = shape[i];
    const char *sep = i ? ", " : "";
    if (!d.sym || !d.k) n += snprintf(buf + n, len - n, "%s%" PRId64, sep, d.k);
    else if (d.k == 1) n += snprintf(buf + n, len - n, "%s%s", sep, c->symnames[d.sym - 1]);
    else n += snprintf(buf + n, len - n, "%s%" PRId64 "*%s", sep, d.k, c->symnames[d.sym - 1]);
  }
  if (n < len) snprintf(buf + n, len - n, "]");
  return buf;
}

void ir_print_dim(FILE *f, const IrCtx *c, Dim d) {
  char b[64];
  ir_shape_str(c, 1, &d, b, sizeof b);
  b[strlen(b) - 1] = 0;
  fputs(b + 1, f);
}

void ir_print_shape(FILE *f, const IrCtx *c, const Node *n) {
  char b[256];
  fprintf(f, "%s%s", ir_dtype_name(n->dtype), ir_shape_str(c, n->ndim, n->shape, b, sizeof b));
}

static void print_ints(FILE *f, const char *name, const int64_t *v, int n) {
  fprintf(f, " %s=[", name);
  for (int i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? "," : "", v[i]);
  fputc(']', f);
}

static void print_const(FILE *f, const Node *n) {
  int64_t m;
  ir_numel_const(n, &m);
  fputs(" {", f);
  // Enough digits to tell values apart: goldens see every bit of an f32.
  for (int64_t i = 0; i < m && i < 8; i++) {
    if (ir_is_float(n->dtype)) fprintf(f, n->dtype == DT_F32 ? "%s%.9g" : "%s%.17g", i ? ", " : "", ir_const_at(n, i));
    else fprintf(f, "%s%" PRId64, i ? ", " : "", ir_const_int_at(n, i));
  }
  if (m > 8) fprintf(f, ", ... %" PRId64 " values", m);
  fputc('}', f);
}

static void print_attrs(FILE *f, const IrCtx *c, const Node *n) {
  switch (ir_ops[n->op].kind) {
  case K_REDUCE: {
    int64_t ax[IR_MAXDIM]; int k = 0;
    for (int d = 0; d < IR_MAXDIM; d++) if (n->a.i[0] & (1 << d)) ax[k++] = d;
    print_ints(f, "axes", ax, k);
    if (n->a.i[1]) fputs(" keepdims", f);
    return;
  }
  case K_ROW: fprintf(f, " axis=%" PRId64, n->a.i[0]); return;
  default: break;
  }
  switch (n->op) {
  case OP_CONST: print_const(f, n); break;
  case OP_INPUT:
    fprintf(f, " \"%s\" %s", n->a.name ? n->a.name : "", n->a.i[0] == ROLE_PARAM ? "param" : n->a.i[0] == ROLE_VAR ? "var" : n->a.i[0] == ROLE_MODE ? "mode" : "input");
    break;
  case OP_IOTA: fprintf(f, " axis=%" PRId64, n->a.i[0]); break;
  case OP_RNG: fprintf(f, " %s seed=%" PRIu64, n->a.i[0] ? "normal" : "uniform", n->a.u); break;
  case OP_DIMV: fprintf(f, " %s", c->symnames[n->a.i[0] - 1]); break;
  case OP_TRANSPOSE: print_ints(f, "perm", n->a.i, n->ndim); break;
  case OP_SLICE: case OP_PAD:
    print_ints(f, "start", n->a.i, n->ndim);
    print_ints(f, "step", n->a.i + IR_MAXDIM, n->ndim);
    break;
  case OP_CONCAT: fprintf(f, " axis=%" PRId64, n->a.i[0]); break;
  case OP_IM2COL: case OP_COL2IM:
    fprintf(f, " kernel=%" PRId64 "x%" PRId64 " stride=%" PRId64 "x%" PRId64 " pad=%" PRId64 "x%" PRId64
            " dilation=%" PRId64 "x%" PRId64 "%s", n->a.i[0], n->a.i[1], n->a.i[2], n->a.i[3], n->a.i[4],
            n->a.i[5], n->a.i[6], n->a.i[7], n->a.i[8] ? " fill=-inf" : "");
    break;
  default: break;
  }
}

// Nodes print with graph-local numbers (`local` maps id -> number) so the
// text does not depend on what else the context holds.
static void print_node(FILE *f, const IrCtx *c, const Node *n, const int *local) {
  fprintf(f, "%%%d = %s ", local ? local[n->id] : n->id, ir_ops[n->op].name);
  ir_print_shape(f, c, n);
  for (int i = 0; i < n->nsrc; i++) fprintf(f, "%s%%%d", i ? ", " : " ", local ? local[n->src[i]->id] : n->src[i]->id);
  print_attrs(f, c, n);
  fputc('\n', f);
}

void ir_print_node(FILE *f, const IrCtx *c, const Node *n) { print_node(f, c, n, NULL); }

void ir_print_graph(FILE *f, const IrCtx *c, const IrGraph *g) {
  int count;
  Node **order = ir_topo((IrCtx *)c, g->outs, g->nout, &count);
  int *local = malloc(sizeof(int) * (c->nnodes + 1));
  if (!local) abort();
  for (int i = 0; i < count; i++) local[order[i]->id] = i;
  for (int i = 0; i < count; i++) print_node(f, c, order[i], local);
  fputs("outputs:", f);
  for (int i = 0; i < g->nout; i++) fprintf(f, " %%%d", local[g->outs[i]->id]);
  fputc('\n', f);
  free(local);
  free(order);
}
