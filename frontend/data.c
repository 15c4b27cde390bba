// Data sources: the builtins a `data` statement calls (idx, cifar10, csv,
// npy) describe where the examples are; the runtime's loaders (runtime/data.h)
// read them when a train or evaluate statement first needs a split.
#include "builtins_int.h"
#include "runtime/data.h"
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

const Builtin *data_builtin_find(const char *name) {
  for (size_t i = 0; i < sizeof data_table / sizeof *data_table; i++)
    if (!strcmp(data_table[i].name, name)) return &data_table[i];
  return NULL;
}

// Reads one split with the runtime's loaders. 0, or -1 with a message.
int data_load(const DataSrc *d, int split, RtDataset *out, char *err, size_t len) {
  static const char *names[NSPLITS] = {"train", "test"};
  const char *const *f = d->files[split];
  int nf = d->nfiles[split];
  if (!nf && !d->dir) {
    snprintf(err, len, "%s has no %s split (give %s=...)", d->name ? d->name : d->kind, names[split], names[split]);
    return -1;
  }
  if (!strcmp(d->kind, "idx"))
    return nf ? rt_data_idx(f[0], nf > 1 ? f[1] : NULL, d->normalize, out, err, len)
              : rt_data_idx_dir(d->dir, names[split], d->normalize, out, err, len);
  if (!strcmp(d->kind, "cifar10"))
    return nf ? rt_data_cifar10(f, nf, d->normalize, out, err, len)
              : rt_data_cifar10_dir(d->dir, names[split], d->normalize, out, err, len);
  if (!strcmp(d->kind, "csv"))
    return rt_data_csv(f[0], d->label == INT_MIN ? RT_DATA_NOLABEL : d->label, d->header, out, err, len);
  return rt_data_npy(f, nf, out, err, len);
}
