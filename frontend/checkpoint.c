// save and load: parameters, state and optimizer state as safetensors, with
// the step and epoch in the metadata (what --resume continues from).
#include "build.h"
#include "optim.h"
#include "train_int.h"
#include <stdlib.h>
#include <string.h>

// The latest parameter of each name (a REPL may declare one twice).
static int latest(Ev *ev, int i) {
  for (int j = i + 1; j < ev->nparams; j++)
    if (!strcmp(ev->params[j].node->a.name, ev->params[i].node->a.name)) return 0;
  return 1;
}

// The kind of the optimizer state held (adam and adamw name their slots alike).
static OptKind held_kind(const Trainer *t) { return !strcmp(t->opt_kind, "sgd") ? OPT_SGD : OPT_ADAM; }

int save_checkpoint(Ev *ev, const char *path, char *err, size_t len) {
  Trainer *t = trainer(ev);
  if (pipe_cuda_sync(&ev->pipe, err, len)) return -1;   // a training step's state on the GPU
  int cap = ev->nparams + 2 * t->nslots + 1, n = 0;
  RtNamedTensor *ts = calloc(cap, sizeof *ts);
  char **names = calloc(cap, sizeof *names);
  if (!ts || !names) abort();
  for (int i = 0; i < ev->nparams; i++)
    if (latest(ev, i)) ts[n++] = (RtNamedTensor){ev->params[i].node->a.name, &ev->params[i].value};
  OptKind kind = held_kind(t);
  for (int i = 0; i < t->nslots; i++)
    for (int k = 0; k < t->slots[i]->n; k++) {
      char b[1024];
      snprintf(b, sizeof b, "optimizer.%s.%s", opt_slot_name(kind, k), t->slots[i]->name);
      names[n] = strdup(b);
      ts[n] = (RtNamedTensor){names[n], &t->slots[i]->slot[k]};
      n++;
    }
  char step[32], epoch[32];
  snprintf(step, sizeof step, "%lld", (long long)t->step);
  snprintf(epoch, sizeof epoch, "%d", t->epoch);
  const char *meta[] = {"format", "kiln-checkpoint-1", "optimizer", t->opt_kind, "step", step, "epoch", epoch};
  int rc = rt_safetensors_save(path, ts, n, meta, 4, err, len);
  for (int i = 0; i < n; i++) free(names[i]);
  free(names); free(ts);
  return rc;
}

static const char *path_arg(Ev *ev, AstNode *s) {
  Value v = ev_eval_expr(ev, ev->globals, s->lhs);
  if (v.kind != V_STR) ev_fail(ev, s->lhs->span, "%s needs a file name in quotes", s->kind == AST_SAVE ? "save" : "load");
  return v.s;
}

void ev_exec_save(Ev *ev, AstNode *s) {
  char err[1024];
  if (ev->pipe.dump_after || ev->pipe.emit_c) return;   // kiln ir / emit-c trained nothing: keep the file
  if (ev->build) { ev->build->save_path = path_arg(ev, s); return; }   // kiln build: the binary's default --out
  if (save_checkpoint(ev, path_arg(ev, s), err, sizeof err)) ev_fail(ev, s->span, "%s", err);
}

OptSlots *slots_of(Trainer *t, const char *name) {
  for (int i = 0; i < t->nslots; i++) if (!strcmp(t->slots[i]->name, name)) return t->slots[i];
  t->slots = realloc(t->slots, sizeof *t->slots * (t->nslots + 1));
  OptSlots *s = calloc(1, sizeof *s);
  if (!t->slots || !s) abort();
  t->slots[t->nslots++] = s;
  s->name = strdup(name);
  return s;
}

// Parameters (and optimizer state, step and epoch when the file has them) from a checkpoint.
void load_checkpoint(Ev *ev, const char *path, Span sp) {
  RtTensorFile f;
  char err[1024];
  if (pipe_cuda_release(&ev->pipe, err, sizeof err)) ev_fail(ev, sp, "%s", err);   // its host copies are overwritten
  if (rt_safetensors_load(path, &f, err, sizeof err)) ev_fail(ev, sp, "%s", err);
  char missing[512] = "";
  size_t k = 0;
  int nmissing = 0;
  for (int i = 0; i < ev->nparams; i++) {
    Param *p = &ev->params[i];
    if (!latest(ev, i)) continue;
    const RtTensor *t = rt_tensorfile_find(&f, p->node->a.name);
    if (!t) {
      if (nmissing++ < 5) k += snprintf(missing + k, k < sizeof missing ? sizeof missing - k : 0, "%s'%s'", nmissing > 1 ? ", " : "", p->node->a.name);
      continue;
    }
    int same = t->dtype == p->value.dtype && t->ndim == p->value.ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->value.shape[d];
    if (!same) {
      char msg[1024], have[256] = "";
      size_t k2 = 0;
      for (int d = 0; d < t->ndim; d++) k2 += snprintf(have + k2, sizeof have - k2, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
      snprintf(msg, sizeof msg, "%s: tensor '%s' is %s[%s], but the parameter is %s%s", path, p->node->a.name,
               rt_dtype_name(t->dtype), have, rt_dtype_name(p->value.dtype),
               ir_shape_str(ev->c, p->node->ndim, p->node->shape, err, sizeof err));
      rt_tensorfile_free(&f);
      ev_fail(ev, sp, "%s", msg);
    }
    memcpy(p->value.data, t->data, rt_tensor_nbytes(t));
  }
  if (nmissing) {
    rt_tensorfile_free(&f);
    ev_fail(ev, sp, "%s has no tensor for %d parameter%s: %s%s", path, nmissing, nmissing == 1 ? "" : "s", missing, nmissing > 5 ? ", ..." : "");
  }
  Trainer *t = trainer(ev);
  const char *opt = rt_tensorfile_meta(&f, "optimizer"), *step = rt_tensorfile_meta(&f, "step"), *epoch = rt_tensorfile_meta(&f, "epoch");
  if (opt && *opt) {
    drop_slots(t);
    snprintf(t->opt_kind, sizeof t->opt_kind, "%s", opt);
    OptKind kind = held_kind(t);
    for (int i = 0; i < f.n; i++) {
      const char *nm = f.names[i];
      if (strncmp(nm, "optimizer.", 10)) continue;
      const char *slot = nm + 10, *dot = strchr(slot, '.');
      int which = -1;   // optimizer.SLOT.PARAM, SLOT as save_checkpoint names it
      for (int k = 0; dot && k < 2 && which < 0; k++)
        if (!strncmp(slot, opt_slot_name(kind, k), (size_t)(dot - slot)) && !opt_slot_name(kind, k)[dot - slot]) which = k;
      if (which < 0) continue;
      OptSlots *os = slots_of(t, dot + 1);
      rt_tensor_free(&os->slot[which]);
      os->slot[which] = rt_tensor_new(f.t[i].dtype, f.t[i].ndim, f.t[i].shape);
      if (!os->slot[which].data) abort();
      memcpy(os->slot[which].data, f.t[i].data, rt_tensor_nbytes(&f.t[i]));
      if (which + 1 > os->n) os->n = which + 1;
    }
  }
  if (step) t->step = atoll(step);
  if (epoch) t->epoch = atoi(epoch);
  rt_tensorfile_free(&f);
}

void ev_exec_load(Ev *ev, AstNode *s) { load_checkpoint(ev, path_arg(ev, s), s->span); }
