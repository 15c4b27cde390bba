// Data sources: the builtins a `data` statement calls (idx, cifar10, csv,
// npy) describe where the examples are; the runtime's loaders (runtime/data.h)
// read them when a train or evaluate statement first needs a split. Also the
// session's training state (Trainer) and the binding of data columns to a
// graph's inputs.
#include "train_int.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static DataSrc *new_src(Ev *ev, const char *kind) {
  DataSrc *d = arena_alloc(ev->arena, sizeof *d);
  d->kind = kind;
  d->split = SPLIT_NONE;
  d->header = -1;
  d->label = -1;
  return d;
}

// A file name or a list of them, for split `split`.
static void files_arg(Ev *ev, Args *a, int pos, const char *kw, DataSrc *d, int split) {
  Span sp;
  Value *v = bi_arg(a, pos, kw, &sp);
  if (!v) return;
  Value one = *v, *items = &one;
  int n = 1;
  if (v->kind == V_LIST) { items = v->items; n = v->n; }
  if (n > 8) ev_fail(ev, sp, "at most 8 files per split");
  for (int i = 0; i < n; i++) {
    if (items[i].kind != V_STR) ev_fail(ev, sp, "%s must be a file name or a list of file names in quotes", kw);
    d->files[split][i] = items[i].s;
  }
  d->nfiles[split] = n;
}

static Value data_value(DataSrc *d) {
  Value v = {0};
  v.kind = V_DATA;
  v.data = d;
  return v;
}

// idx(dir) / cifar10(dir): a directory in the format's usual layout, or
// train=[...], test=[...] files (IDX: images then labels).
static Value b_dirformat(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"dir", "train", "test", "normalize", NULL};
  bi_check(ev, b, a, 1, kws);
  DataSrc *d = new_src(ev, b->name);
  Span sp;
  Value *dir = bi_arg(a, 0, "dir", &sp);
  if (dir) {
    if (dir->kind != V_STR) ev_fail(ev, sp, "%s's directory must be a string", b->name);
    d->dir = dir->s;
  }
  files_arg(ev, a, -1, "train", d, SPLIT_TRAIN);
  files_arg(ev, a, -1, "test", d, SPLIT_TEST);
  if (!d->dir && !d->nfiles[0] && !d->nfiles[1]) ev_fail(ev, a->span, "%s needs a directory or train=/test= files: %s", b->name, b->usage);
  if (!strcmp(b->name, "idx"))
    for (int s = 0; s < NSPLITS; s++)
      if (d->nfiles[s] > 2) ev_fail(ev, a->span, "idx: a split is an images file and a labels file");
  d->normalize = bi_bool(ev, a, -1, "normalize", 0);
  return data_value(d);
}

// csv(path) or csv(train=, test=), label=-1 (a column, negative from the end, or none), header=auto.
static Value b_csv(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"path", "train", "test", "label", "header", NULL};
  bi_check(ev, b, a, 1, kws);
  DataSrc *d = new_src(ev, "csv");
  files_arg(ev, a, 0, "path", d, SPLIT_TRAIN);
  if (!d->nfiles[0]) files_arg(ev, a, -1, "train", d, SPLIT_TRAIN);
  files_arg(ev, a, -1, "test", d, SPLIT_TEST);
  for (int s = 0; s < NSPLITS; s++)
    if (d->nfiles[s] > 1) ev_fail(ev, a->span, "csv: one file per split");
  if (!d->nfiles[0] && !d->nfiles[1]) ev_fail(ev, a->span, "csv needs a file: %s", b->usage);
  Span sp;
  Value *lab = bi_arg(a, -1, "label", &sp);
  if (lab && lab->kind == V_STR && !strcmp(lab->s, "none")) d->label = INT_MIN;
  else if (lab) d->label = (int)ev_const_int(ev, *lab, sp, "label");
  Value *h = bi_arg(a, -1, "header", &sp);
  if (h && !(h->kind == V_STR && !strcmp(h->s, "auto"))) d->header = bi_bool(ev, a, -1, "header", 0);
  return data_value(d);
}

// npy([files]) or npy(train=[...], test=[...]): one column per file.
static Value b_npy(Ev *ev, const Builtin *b, Args *a) {
  static const char *const kws[] = {"files", "train", "test", NULL};
  bi_check(ev, b, a, 1, kws);
  DataSrc *d = new_src(ev, "npy");
  files_arg(ev, a, 0, "files", d, SPLIT_TRAIN);
  if (!d->nfiles[0]) files_arg(ev, a, -1, "train", d, SPLIT_TRAIN);
  files_arg(ev, a, -1, "test", d, SPLIT_TEST);
  if (!d->nfiles[0] && !d->nfiles[1]) ev_fail(ev, a->span, "npy needs files: %s", b->usage);
  return data_value(d);
}

static const Builtin data_table[] = {
  {"idx", b_dirformat, 0, "idx(dir, normalize=false) or idx(train=[images, labels], test=[images, labels])"},
  {"cifar10", b_dirformat, 0, "cifar10(dir, normalize=false) or cifar10(train=[files], test=[files])"},
  {"csv", b_csv, 0, "csv(path, label=-1, header=\"auto\") or csv(train=path, test=path, ...)"},
  {"npy", b_npy, 0, "npy([files]) or npy(train=[files], test=[files])"},
};

const Builtin *data_builtins(int *n) {
  *n = (int)(sizeof data_table / sizeof *data_table);
  return data_table;
}

const Builtin *data_builtin_find(const char *name) {
  for (size_t i = 0; i < sizeof data_table / sizeof *data_table; i++)
    if (!strcmp(data_table[i].name, name)) return &data_table[i];
  return NULL;
}

// A split as the runtime's loader spec (what kiln build also writes into a binary).
void data_spec(const DataSrc *d, int split, RtDataSpec *out) {
  memset(out, 0, sizeof *out);
  out->kind = d->kind;
  out->dir = d->dir;
  out->nfiles = d->nfiles[split];
  for (int i = 0; i < out->nfiles; i++) out->files[i] = d->files[split][i];
  out->split = split;
  out->normalize = d->normalize;
  out->label = d->label == INT_MIN ? RT_DATA_NOLABEL : d->label;
  out->header = d->header;
}

// Reads one split with the runtime's loaders. 0, or -1 with a message.
int data_load(const DataSrc *d, int split, RtDataset *out, char *err, size_t len) {
  static const char *names[NSPLITS] = {"train", "test"};
  if (!d->nfiles[split] && !d->dir) {
    const char *name = d->name ? d->name : d->kind;
    if (split == 1 && d->nfiles[0])   // evaluate on a source of one split: say how to use it
      snprintf(err, len, "%s has no test split: give %s(train=..., test=...), or evaluate on %s.train", name, d->kind, name);
    else snprintf(err, len, "%s has no %s split (give %s=...)", name, names[split], names[split]);
    return -1;
  }
  RtDataSpec spec;
  data_spec(d, split, &spec);
  return rt_model_data(&spec, NULL, out, err, len);
}

// ---- the session's training state ------------------------------------------------
Trainer *trainer(Ev *ev) {
  if (!ev->tr && !(ev->tr = calloc(1, sizeof *ev->tr))) abort();
  return ev->tr;
}

void drop_slots(Trainer *t) {
  for (int i = 0; i < t->nslots; i++) {
    free(t->slots[i]->name);
    for (int k = 0; k < 2; k++) rt_tensor_free(&t->slots[i]->slot[k]);
    free(t->slots[i]);
  }
  t->nslots = 0;
}

void run_end(Run *r) {
  if (r->sigint_set) sigaction(SIGINT, &r->old, NULL);
  rt_batcher_free(r->batches);
  rt_batcher_free(r->eval_batches);
  rt_progress_free(r->progress);
  if (r->step) prog_profile_print(stderr, r->step);   // with --profile: the step's kernels
  prog_free(r->step);
  par_free(r->par);
  for (int i = 0; i < r->nout; i++) rt_tensor_free(&r->out[i]);
  for (int i = 0; i < 4; i++) rt_tensor_free(&r->scalars[i]);
  memset(r, 0, sizeof *r);
}

void ev_train_free(Ev *ev) {
  Trainer *t = ev->tr;
  if (!t) return;
  run_end(&t->run);
  char err[1024];
  if (t->metrics && rt_metrics_close(t->metrics, err, sizeof err)) fprintf(stderr, "kiln: %s\n", err);
  for (int i = 0; i < t->ndata; i++) { free(t->data[i]->key); rt_dataset_free(&t->data[i]->ds); free(t->data[i]); }
  drop_slots(t);
  free(t->data); free(t->slots); free(t);
  ev->tr = NULL;
}

// ---- data ------------------------------------------------------------------------------
// data NAME = SOURCE: the value bound to NAME (the source, named for messages).
Value ev_data_value(Ev *ev, Env *env, AstNode *s) {
  Value v = ev_eval_expr(ev, env, s->rhs);
  if (v.kind != V_DATA)
    ev_fail(ev, s->rhs->span, "a data statement needs a data source: idx(...), cifar10(...), csv(...) or npy(...)");
  DataSrc *d = arena_alloc(ev->arena, sizeof *d);
  *d = *v.data;
  d->name = s->str;
  v.data = d;
  return v;
}

// The split a statement reads, loaded once per session.
RtDataset *split_data(Ev *ev, AstNode *e, int dflt, const char **name) {
  Value v = ev_eval_expr(ev, ev->globals, e);
  if (v.kind != V_DATA) ev_fail(ev, e->span, "expected a data set here (a name from a data statement, like fmnist.train)");
  DataSrc *d = v.data;
  int split = d->split == SPLIT_NONE ? dflt : d->split;
  char key[4096];
  int k = snprintf(key, sizeof key, "%s|%s|%d|%d|%d|%d", d->kind, d->dir ? d->dir : "", d->normalize, d->label, d->header, split);
  for (int i = 0; i < d->nfiles[split] && k < (int)sizeof key; i++) k += snprintf(key + k, sizeof key - k, "|%s", d->files[split][i]);
  Trainer *t = trainer(ev);
  *name = d->name ? d->name : d->kind;
  for (int i = 0; i < t->ndata; i++) if (!strcmp(t->data[i]->key, key)) return &t->data[i]->ds;
  RtDataset ds;
  char err[1024];
  if (data_load(d, split, &ds, err, sizeof err)) ev_fail(ev, e->span, "%s", err);
  t->data = realloc(t->data, sizeof *t->data * (t->ndata + 1));
  LoadedData *ld = malloc(sizeof *ld);
  if (!t->data || !ld) abort();
  ld->key = strdup(key);
  ld->ds = ds;
  t->data[t->ndata++] = ld;
  return &ld->ds;
}

// Which data column feeds input `in` (columns bind to inputs in declaration
// order), with its per-example shape checked against the input's.
int column_of(Ev *ev, RtDataset *ds, Node *in, const char *dname, Span sp) {
  int j = 0;
  while (j < ev->ninputs && ev->inputs[j].node != in) j++;
  if (j == ev->ninputs)   // a REPL line declared it again after this was defined
    ev_fail(ev, sp, "this uses an input '%s' that has been declared again since; define it again", in->a.name);
  if (j >= ds->ncol)
    ev_fail(ev, sp, "%s has %d column%s, but this needs input '%s', the %d%s declared (columns bind to inputs in order)", dname,
            ds->ncol, ds->ncol == 1 ? "" : "s", in->a.name, j + 1, j == 0 ? "st" : j == 1 ? "nd" : j == 2 ? "rd" : "th");
  if (in->ndim < 1 || !in->shape[0].sym || in->shape[0].k != 1)
    ev_fail(ev, sp, "input '%s' gets data in batches, so its first dimension must be a batch size name (like B)", in->a.name);
  int64_t want = 1, have = 1;
  for (int d = 1; d < in->ndim; d++) {
    if (in->shape[d].sym && in->shape[d].k) ev_fail(ev, sp, "input '%s' has a symbolic size after the batch axis", in->a.name);
    want *= in->shape[d].k;
  }
  RtTensor *t = &ds->col[j].t;
  for (int d = 1; d < t->ndim; d++) have *= t->shape[d];
  if (want != have) {
    char b[128], c[256] = "";
    size_t k = 0;
    for (int d = 1; d < t->ndim; d++) k += snprintf(c + k, sizeof c - k, "%s%lld", d > 1 ? ", " : "", (long long)t->shape[d]);
    ev_fail(ev, sp, "%s's column '%s' has examples of shape [%s] (%lld values), but input '%s' is %s (%lld per example)", dname,
            ds->col[j].name, c, (long long)have, in->a.name, ir_shape_str(ev->c, in->ndim, in->shape, b, sizeof b), (long long)want);
  }
  return j;
}

// A batch tensor viewed with the input's shape (same data: reshapes are free).
RtTensor as_input(const RtTensor *batch, Node *in) {
  RtTensor v = *batch;
  v.owns = 0;
  v.ndim = in->ndim;
  v.shape[0] = batch->shape[0];
  for (int d = 1; d < in->ndim; d++) v.shape[d] = in->shape[d].k;
  return v;
}
