// Optimizers as IR: the update of every parameter is part of the training
// step's graph, so it fuses with the gradient that feeds it (one pass over
// the parameter, its gradient and its state).
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H
#include "ir/ir.h"

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } OptKind;

typedef struct {
  OptKind kind;
  double lr, momentum, beta1, beta2, eps, weight_decay;
  int nesterov;
} OptSpec;

// The step's scalars, graph inputs (f64) the trainer sets before each step.
enum { OPT_LR, OPT_BIAS1, OPT_BIAS2, OPT_NSCALARS };

const char *opt_name(OptKind k);
int opt_nslots(const OptSpec *o);                    // state tensors per parameter
const char *opt_slot_name(OptKind k, int i);         // "momentum"; "m", "v"
// New value of parameter p with gradient g; slots[i] the state inputs,
// new_slots[i] gets their next values. NULL with c->err on a builder error.
Node *opt_update(IrCtx *c, const OptSpec *o, Node *p, Node *g, Node **slots, Node **new_slots, Node *const *scalars);
// Gradients scaled so their global L2 norm is at most max_norm (in place).
int opt_clip(IrCtx *c, Node **grads, int n, double max_norm);

#endif
