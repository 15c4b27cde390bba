// jit.c - the JIT's front door: options, cache keys, cache-or-compile, load, look up.
// The work is done by a backend (jit_internal.h): llvm (jit_orc.c + clang_shim.cpp) or
// cc (cc_fallback.c).
#include "jit_internal.h"
#include "cache.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

typedef struct { char key[33]; void *unit; } Loaded;

struct Jit {
  JitConf conf;
  void *state;      // the backend's
  Loaded *loaded;   // units loaded so far, by key: a second compile just looks up again
  int nloaded, cap;
};

double jit_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void jit_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  static const char more[] = "\n... (message truncated)";
  if (n >= 0 && (size_t)n >= errlen && errlen > sizeof more)
    memcpy(err + errlen - sizeof more, more, sizeof more);
}

__attribute__((format(printf, 2, 3)))
static void logv(const JitConf *c, const char *fmt, ...) {
  if (!c->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

// ---- options ----

int jit_addflag(JitConf *c, const char *flag) {
  size_t used = 0, n = strlen(flag) + 1;
  for (int i = 0; i < c->nflags; i++) used += strlen(c->flags + used) + 1;
  if (used + n > sizeof c->flags) return -1;
  memcpy(c->flags + used, flag, n);
  c->nflags++;
  return 0;
}

int jit_getflags(const JitConf *c, const char **argv, int max) {
  const char *p = c->flags;
  int i = 0;
  for (; i < c->nflags && i < max; i++, p += strlen(p) + 1) argv[i] = p;
  return i;
}

static const JitBackend *pick_backend(const char *name, char *err, size_t errlen) {
  if (!name || !*name) name = getenv("KILN_JIT");
  if (!name || !*name) {
#ifdef KILN_JIT_LLVM
    return &jit_llvm_backend;
#else
    return &jit_cc_backend;
#endif
  }
#ifdef KILN_JIT_LLVM
  if (!strcmp(name, "llvm")) return &jit_llvm_backend;
#endif
  if (!strcmp(name, "cc")) return &jit_cc_backend;
  jit_seterr(err, errlen, "jit: unknown or unavailable backend '%s' (this build has: %s)",
             name,
#ifdef KILN_JIT_LLVM
             "llvm, cc"
#else
             "cc; rebuild with -Djit=llvm for the in-process LLVM JIT"
#endif
  );
  return NULL;
}

static void conf_free(JitConf *c) {
  free(c->cache_dir);
  c->cache_dir = NULL;
}

static int conf_init(JitConf *c, const JitOptions *o, char *err, size_t errlen) {
  static const JitOptions defaults = JIT_OPTIONS_DEFAULT;
  if (!o) o = &defaults;
  memset(c, 0, sizeof *c);
  if (!(c->be = pick_backend(o->backend, err, errlen))) return -1;
  const char *v = getenv("KILN_JIT_VERBOSE");
  c->verbose = o->verbose || (v && *v && strcmp(v, "0"));
  c->opt_level = o->opt_level < 0 || o->opt_level > 3 ? 3 : o->opt_level;
  const char *cpu = o->target_cpu && *o->target_cpu ? o->target_cpu : "native";
  if (strlen(cpu) >= sizeof c->target_cpu) {
    jit_seterr(err, errlen, "jit: target cpu name too long: %s", cpu);
    return -1;
  }
  strcpy(c->target_cpu, cpu);
  c->vector_math = !o->scalar_math;

  c->cache_dir = o->cache_dir ? (*o->cache_dir ? strdup(o->cache_dir) : NULL)
                              : cache_default_dir();
  if (c->cache_dir && cache_prepare(c->cache_dir)) {
    // An unusable cache is not an error: compile every time.
    logv(c, "kiln-jit: cache dir %s unusable, caching off\n", c->cache_dir);
    conf_free(c);
  }
  if (c->be->configure(c, err, errlen)) {
    conf_free(c);
    return -1;
  }
  return 0;
}

// Everything that changes the compiled bytes goes into the key.
static void make_key(const JitConf *c, const char *src, int object, char key[33]) {
  CacheHash h;
  cache_hash_init(&h);
  cache_hash_str(&h, "kiln-jit " KILN_VERSION);
  cache_hash_str(&h, c->be->name);
  cache_hash_str(&h, object && !c->be->load_is_object ? "object" : "load");
  cache_hash_add(&h, c->flags, sizeof c->flags);  // zero-filled past the last flag
  cache_hash_str(&h, c->fingerprint);
  cache_hash_str(&h, src);
  cache_hash_hex(&h, key);
}

// The unit's bytes: from the cache when there, else compiled (and then cached).
static int get_unit(const JitConf *c, const char *src, int object, const char *key,
                    JitBuf *out, JitStats *st, char *err, size_t errlen) {
  char why[4400];
  if (c->cache_dir) {
    double t0 = jit_now_ms();
    int r = cache_get(c->cache_dir, key, &out->p, &out->n, why, sizeof why);
    st->load_ms += jit_now_ms() - t0;
    if (r == CACHE_HIT) {
      st->cache_hit = 1;
      return 0;
    }
    if (r == CACHE_CORRUPT) {
      st->cache_corrupt = 1;
      logv(c, "kiln-jit: corrupt cache entry %s, rebuilding\n", why);
    }
  }
  double t0 = jit_now_ms();
  if (c->be->compile(c, src, object, out, err, errlen)) return -1;
  st->compile_ms = jit_now_ms() - t0;
  if (c->cache_dir && cache_put(c->cache_dir, key, out->p, out->n))
    logv(c, "kiln-jit: could not write cache entry %s in %s\n", key, c->cache_dir);
  return 0;
}

// ---- API ----

Jit *jit_new(const JitOptions *opt, const JitSymbol *syms, int nsyms, char *err, size_t errlen) {
  Jit *j = calloc(1, sizeof *j);
  if (!j) {
    jit_seterr(err, errlen, "jit: out of memory");
    return NULL;
  }
  if (conf_init(&j->conf, opt, err, errlen)) {
    free(j);
    return NULL;
  }
  if (!(j->state = j->conf.be->open(&j->conf, syms, nsyms, err, errlen))) {
    conf_free(&j->conf);
    free(j);
    return NULL;
  }
  return j;
}

void jit_free(Jit *j) {
  if (!j) return;
  j->conf.be->close(j->state);
  conf_free(&j->conf);
  free(j->loaded);
  free(j);
}

const char *jit_backend_name(void) {
  const JitBackend *be = pick_backend(NULL, NULL, 0);
  return be ? be->describe() : jit_cc_backend.describe();
}

const char *jit_name(const Jit *j) { return j->conf.be->describe(); }

static Loaded *find_loaded(Jit *j, const char *key) {
  for (int i = 0; i < j->nloaded; i++)
    if (!memcmp(j->loaded[i].key, key, 32)) return &j->loaded[i];
  return NULL;
}

static Loaded *add_loaded(Jit *j, const char *key, void *unit) {
  if (j->nloaded == j->cap) {
    int cap = j->cap ? 2 * j->cap : 16;
    Loaded *p = realloc(j->loaded, cap * sizeof *p);
    if (!p) return NULL;
    j->loaded = p, j->cap = cap;
  }
  Loaded *l = &j->loaded[j->nloaded++];
  memcpy(l->key, key, 33);
  l->unit = unit;
  return l;
}

// Loads the unit for key: from the cache or the compiler. A cached unit that does not load
// (damaged in a way the checksum cannot see, say a foreign object) is dropped and rebuilt.
static int load_unit(Jit *j, const char *src, JitStats *st, void **unit, char *err,
                     size_t errlen) {
  for (int attempt = 0;; attempt++) {
    JitBuf b = {0};
    if (get_unit(&j->conf, src, 0, st->key, &b, st, err, errlen)) return -1;
    double t0 = jit_now_ms();
    int r = j->conf.be->load(j->state, &b, unit, err, errlen);
    free(b.p);
    st->load_ms += jit_now_ms() - t0;
    if (!r || !st->cache_hit || attempt > 0) return r;
    char path[4200];
    cache_path(j->conf.cache_dir, st->key, path, sizeof path);
    logv(&j->conf, "kiln-jit: cached %s does not load (%s), rebuilding\n", path, err);
    unlink(path);
    st->cache_hit = 0, st->cache_corrupt = 1;
  }
}

int jit_compile(Jit *j, const char *src, const char *const *names, int n, void **addrs,
                JitStats *st, char *err, size_t errlen) {
  JitStats dummy;
  if (!st) st = &dummy;
  memset(st, 0, sizeof *st);
  make_key(&j->conf, src, 0, st->key);

  Loaded *l = find_loaded(j, st->key);
  if (l) {
    st->cache_hit = 1;
  } else {
    void *unit = NULL;
    if (load_unit(j, src, st, &unit, err, errlen)) return -1;
    if (!(l = add_loaded(j, st->key, unit))) {
      jit_seterr(err, errlen, "jit: out of memory");
      return -1;
    }
  }
  double t0 = jit_now_ms();
  for (int i = 0; i < n; i++)
    if (j->conf.be->lookup(j->state, l->unit, names[i], &addrs[i], err, errlen)) return -1;
  st->load_ms += jit_now_ms() - t0;
  logv(&j->conf, "kiln-jit: %s %s, compile %.1f ms, load %.2f ms\n", st->key,
       st->cache_hit ? "hit" : "compiled", st->compile_ms, st->load_ms);
  return 0;
}

// Write next to the target, then rename: a reader never sees half an object.
static int write_atomic(const char *path, const JitBuf *b, char *err, size_t errlen) {
  size_t n = strlen(path) + 32;
  char *tmp = malloc(n);
  if (!tmp) return jit_seterr(err, errlen, "jit: out of memory"), -1;
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  int bad = !f || fwrite(b->p, 1, b->n, f) != b->n;
  if (f) bad |= fclose(f) != 0;
  if (bad || rename(tmp, path)) {
    jit_seterr(err, errlen, "jit: cannot write %s", path);
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  return 0;
}

// Clang's (llvm backend, or cc being clang) and GCC's names for the vectorizer's account.
static const char *const clang_remarks[] = {"-Rpass=loop-vectorize", "-Rpass-missed=loop-vectorize",
                                            "-Rpass-analysis=loop-vectorize"};
static const char *const gcc_remarks[] = {"-fopt-info-vec-optimized", "-fopt-info-vec-missed"};

int jit_vector_report(const JitOptions *opt, const char *src, char **text, char *err, size_t errlen) {
  JitConf c;
  *text = NULL;
  if (conf_init(&c, opt, err, errlen)) return -1;
  int gcc = !strcmp(c.be->name, "cc") && !strstr(c.fingerprint, "clang");
  const char *const *f = gcc ? gcc_remarks : clang_remarks;
  int nf = gcc ? 2 : 3, r = 0;
  for (int i = 0; i < nf && !r; i++) r = jit_addflag(&c, f[i]);
  if (r) jit_seterr(err, errlen, "jit: flags too long");
  c.keep_diag = 1;
  JitBuf b = {0};
  if (!r) r = c.be->compile(&c, src, 1, &b, err, errlen);   // never cached: the point is the messages
  if (!r) *text = b.diag ? b.diag : strdup("");
  else free(b.diag);
  free(b.p);
  conf_free(&c);
  return r;
}

int jit_compile_object(const JitOptions *opt, const char *src, const char *out_path,
                       char *err, size_t errlen) {
  JitConf c;
  if (conf_init(&c, opt, err, errlen)) return -1;
  JitStats st = {0};
  char key[33];
  make_key(&c, src, 1, key);
  JitBuf b = {0};
  int r = get_unit(&c, src, 1, key, &b, &st, err, errlen);
  if (!r) r = write_atomic(out_path, &b, err, errlen);
  free(b.p);
  conf_free(&c);
  return r;
}
