// Optimizer updates as IR, following PyTorch's definitions so results compare:
//   sgd:   g += wd*p; b = momentum*b + g; g = nesterov ? g + momentum*b : b; p -= lr*g
//   adam:  g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
//          p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
//   adamw: p *= 1 - lr*wd, then adam without the g += wd*p term
// The bias corrections 1/(1-b^t) are scalars the trainer computes per step.
#include "optim.h"
#include <math.h>

const char *opt_name(OptKind k) { return k == OPT_SGD ? "sgd" : k == OPT_ADAM ? "adam" : "adamw"; }

int opt_nslots(const OptSpec *o) { return o->kind == OPT_SGD ? (o->momentum != 0) : 2; }

const char *opt_slot_name(OptKind k, int i) { return k == OPT_SGD ? "momentum" : i ? "v" : "m"; }

static Node *k(IrCtx *c, Node *like, double v) { return like ? ir_scalar(c, like->dtype, v) : NULL; }
static Node *bin(IrCtx *c, Op op, Node *a, Node *b) { return a && b ? ir_binary(c, op, a, b) : NULL; }
static Node *in_dtype(IrCtx *c, Node *s, Node *like) { return ir_cast(c, s, like->dtype); }

Node *opt_update(IrCtx *c, const OptSpec *o, Node *p, Node *g, Node **slots, Node **new_slots, Node *const *scalars) {
  Node *lr = in_dtype(c, scalars[OPT_LR], p);
  if (o->weight_decay && o->kind != OPT_ADAMW) g = bin(c, OP_ADD, g, bin(c, OP_MUL, k(c, p, o->weight_decay), p));
  if (o->kind == OPT_SGD) {
    if (o->momentum) {
      Node *b = bin(c, OP_ADD, bin(c, OP_MUL, k(c, p, o->momentum), slots[0]), g);
      new_slots[0] = b;
      g = o->nesterov ? bin(c, OP_ADD, g, bin(c, OP_MUL, k(c, p, o->momentum), b)) : b;
    }
    return bin(c, OP_SUB, p, bin(c, OP_MUL, lr, g));
  }
  Node *m = bin(c, OP_ADD, bin(c, OP_MUL, k(c, p, o->beta1), slots[0]), bin(c, OP_MUL, k(c, p, 1 - o->beta1), g));
  Node *v = bin(c, OP_ADD, bin(c, OP_MUL, k(c, p, o->beta2), slots[1]), bin(c, OP_MUL, k(c, p, 1 - o->beta2), bin(c, OP_MUL, g, g)));
  new_slots[0] = m;
  new_slots[1] = v;
  Node *mhat = bin(c, OP_MUL, m, in_dtype(c, scalars[OPT_BIAS1], p));
  Node *vhat = bin(c, OP_MUL, v, in_dtype(c, scalars[OPT_BIAS2], p));
  Node *step = bin(c, OP_DIV, mhat, bin(c, OP_ADD, vhat ? ir_unary(c, OP_SQRT, vhat) : NULL, k(c, p, o->eps)));
  if (o->kind == OPT_ADAMW && o->weight_decay)
    p = bin(c, OP_MUL, p, bin(c, OP_SUB, k(c, p, 1), bin(c, OP_MUL, lr, k(c, p, o->weight_decay))));
  return bin(c, OP_SUB, p, bin(c, OP_MUL, lr, step));
}

int opt_clip(IrCtx *c, Node **grads, int n, double max_norm) {
  Node *total = NULL;
  for (int i = 0; i < n; i++) {
    Node *g = ir_cast(c, grads[i], DT_F64);
    uint32_t all = g->ndim ? (1u << g->ndim) - 1 : 0;
    Node *s = ir_reduce(c, OP_SUM, ir_binary(c, OP_MUL, g, g), all, 0);
    total = total ? ir_binary(c, OP_ADD, total, s) : s;
    if (!total) return -1;
  }
  if (!total) return 0;
  // scale = min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_
  Node *norm = ir_unary(c, OP_SQRT, total);
  Node *scale = ir_binary(c, OP_MINIMUM, ir_scalar(c, DT_F64, 1),
                          ir_binary(c, OP_DIV, ir_scalar(c, DT_F64, max_norm), ir_binary(c, OP_ADD, norm, ir_scalar(c, DT_F64, 1e-6))));
  for (int i = 0; i < n; i++)
    if (!(grads[i] = ir_binary(c, OP_MUL, grads[i], ir_cast(c, scale, grads[i]->dtype)))) return -1;
  return 0;
}
