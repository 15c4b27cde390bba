// test_jit.c - the JIT and its disk cache, on every backend this build has.
// Prints one ok/FAIL line per check; exits 1 if any failed. Needs the executable to export
// its symbols (-rdynamic): the cc backend resolves kt_parallel_for that way.
#include "compiler/cache.h"
#include "compiler/jit.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int fails, passes;

// void * <-> function pointers by memcpy: POSIX makes it work, -Wpedantic stays quiet.
#define AS_FN(type, var, ptr) type var; memcpy(&var, &(ptr), sizeof var)

#define CHECK(cond, ...)                                          \
  do {                                                            \
    int ok_ = !!(cond);                                           \
    printf("%s - ", ok_ ? "ok" : "FAIL");                         \
    printf(__VA_ARGS__);                                          \
    printf("\n");                                                 \
    if (ok_) passes++;                                            \
    if (!ok_) fails++, printf("  at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
  } while (0)

// ---- the "runtime" the generated code calls ----

typedef struct { int calls; } TestRt;

// Exported (not static): the cc backend finds it through the executable's dynamic symbols.
void kt_parallel_for(void *rt, void (*fn)(void *, int64_t, int64_t), void *ctx, int64_t n,
                     int64_t grain) {
  ((TestRt *)rt)->calls++;
  for (int64_t lo = 0; lo < n; lo += grain) fn(ctx, lo, lo + grain < n ? lo + grain : n);
}

// Only reachable through JitSymbol (llvm backend): static, so not in the dynamic table.
static double kt_secret(double x) { return 3 * x; }

// ---- generated-looking sources; %s is a per-run prefix that keeps names unique ----

static const char *k_exp =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "void kt_parallel_for(void *rt, void (*fn)(void *, int64_t, int64_t), void *ctx,\n"
    "                     int64_t n, int64_t grain);\n"
    "typedef struct { const float *x; float *y; float s; } Args;\n"
    "static void body(void *p, int64_t lo, int64_t hi) {\n"
    "  Args *a = p;\n"
    "  for (int64_t i = lo; i < hi; i++) a->y[i] = expf(a->x[i]) * a->s;\n"
    "}\n"
    "void %s_exp(void *rt, const float *x, float *y, int64_t n) {\n"
    "  Args a = {x, y, 2.0f};\n"
    "  kt_parallel_for(rt, body, &a, n, 64);\n"
    "}\n";

static const char *k_vec =
    "#include <stdint.h>\n"
    "float %s_saxpy_sum(float *restrict y, const float *restrict x, float a, int64_t n) {\n"
    "  float s = 0;\n"
    "  for (int64_t i = 0; i < n; i++) { y[i] = a * x[i] + y[i]; s += y[i]; }\n"
    "  return s;\n"
    "}\n";

static const char *k_secret =
    "double kt_secret(double);\n"
    "double %s_secret(double x) { return kt_secret(x) + 1; }\n";

static const char *k_bad =
    "#include <stdint.h>\n"
    "void %s_bad(float *y, int64_t n) {\n"
    "  for (int64_t i = 0; i < n; i++)\n"
    "    y[i] = y[i] +* ;   /* the broken line */\n"
    "}\n";

static const char *k_undef =
    "void kt_no_such_function(void);\n"
    "void %s_undef(void) { kt_no_such_function(); }\n";

// About 50 lines of what codegen emits: a fused layernorm + gelu + softmax row kernel.
static const char *k_big =
    "#include <math.h>\n"
    "#include <stddef.h>\n"
    "#include <stdint.h>\n"
    "void kt_parallel_for(void *rt, void (*fn)(void *, int64_t, int64_t), void *ctx,\n"
    "                     int64_t n, int64_t grain);\n"
    "typedef struct { const float *x, *g, *b; float *y; int64_t rows, cols; float eps; } Ctx;\n"
    "static float gelu(float v) {\n"
    "  return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));\n"
    "}\n"
    "static void row_kernel(void *p, int64_t lo, int64_t hi) {\n"
    "  const Ctx *c = p;\n"
    "  for (int64_t r = lo; r < hi; r++) {\n"
    "    const float *x = c->x + r * c->cols;\n"
    "    float *y = c->y + r * c->cols;\n"
    "    float mean = 0, var = 0;\n"
    "    for (int64_t i = 0; i < c->cols; i++) mean += x[i];\n"
    "    mean /= (float)c->cols;\n"
    "    for (int64_t i = 0; i < c->cols; i++) {\n"
    "      float d = x[i] - mean;\n"
    "      var += d * d;\n"
    "    }\n"
    "    float inv = 1.0f / sqrtf(var / (float)c->cols + c->eps);\n"
    "    for (int64_t i = 0; i < c->cols; i++)\n"
    "      y[i] = gelu((x[i] - mean) * inv * c->g[i] + c->b[i]);\n"
    "    float m = -INFINITY;\n"
    "    for (int64_t i = 0; i < c->cols; i++) m = fmaxf(m, y[i]);\n"
    "    float s = 0;\n"
    "    for (int64_t i = 0; i < c->cols; i++) {\n"
    "      y[i] = expf(y[i] - m);\n"
    "      s += y[i];\n"
    "    }\n"
    "    float is = 1.0f / s;\n"
    "    for (int64_t i = 0; i < c->cols; i++) y[i] *= is;\n"
    "  }\n"
    "}\n"
    "void %s_big(void *rt, const float *x, const float *g, const float *b, float *y,\n"
    "            int64_t rows, int64_t cols) {\n"
    "  Ctx c = {x, g, b, y, rows, cols, 1e-5f};\n"
    "  kt_parallel_for(rt, row_kernel, &c, rows, 4);\n"
    "}\n"
    "float %s_dot(const float *restrict a, const float *restrict b, int64_t n) {\n"
    "  float s = 0;\n"
    "  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];\n"
    "  return s;\n"
    "}\n"
    "void %s_scale(float *restrict y, const float *restrict x, float a, int64_t n) {\n"
    "  for (int64_t i = 0; i < n; i++) y[i] = a * x[i];\n"
    "}\n";

// ---- helpers ----

static char *fmt(const char *src, const char *pre) {
  size_t n = strlen(src) + 8 * strlen(pre) + 1;
  char *s = malloc(n);
  snprintf(s, n, src, pre, pre, pre);
  return s;
}

static Jit *new_jit(const char *backend, const char *dir, char *err, size_t errlen) {
  JitOptions o = JIT_OPTIONS_DEFAULT;
  o.backend = backend;
  o.cache_dir = dir;
  void (*pf)(void *, void (*)(void *, int64_t, int64_t), void *, int64_t, int64_t) =
      kt_parallel_for;
  double (*sf)(double) = kt_secret;
  JitSymbol syms[] = {{"kt_parallel_for", NULL}, {"kt_secret", NULL}};
  memcpy(&syms[0].addr, &pf, sizeof pf);
  memcpy(&syms[1].addr, &sf, sizeof sf);
  return jit_new(&o, syms, 2, err, errlen);
}

typedef void (*ExpFn)(void *, const float *, float *, int64_t);
typedef float (*SaxpyFn)(float *, const float *, float, int64_t);
typedef double (*SecretFn)(double);
typedef void (*BigFn)(void *, const float *, const float *, const float *, float *, int64_t,
                      int64_t);

// Runs the exp kernel and compares with libm.
static int exp_ok(void *fn) {
  enum { N = 1000 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = (i - 500) / 50.0f, y[i] = 0;
  TestRt rt = {0};
  AS_FN(ExpFn, f, fn);
  f(&rt, x, y, N);
  for (int i = 0; i < N; i++) {
    float want = expf(x[i]) * 2;
    if (fabsf(y[i] - want) > 1e-5f * want) return 0;
  }
  return rt.calls == 1;
}

// Compiles k_exp in a fresh Jit; returns the stats and whether it ran right.
static int exp_in_new_jit(const char *be, const char *dir, const char *pre, JitStats *st) {
  char err[8192], name[64];
  Jit *j = new_jit(be, dir, err, sizeof err);
  if (!j) return printf("  jit_new: %s\n", err), 0;
  char *src = fmt(k_exp, pre);
  snprintf(name, sizeof name, "%s_exp", pre);
  const char *names[] = {name};
  void *fn = NULL;
  int ok = !jit_compile(j, src, names, 1, &fn, st, err, sizeof err) && exp_ok(fn);
  if (!ok) printf("  %s\n", err);
  free(src);
  jit_free(j);
  return ok;
}

static void corrupt(const char *path, int how) {
  struct stat sb;
  if (stat(path, &sb)) return;
  if (how == 0) {
    if (truncate(path, sb.st_size / 2)) printf("  truncate failed\n");
    return;
  }
  FILE *f = fopen(path, "r+b");
  long at = how == 1 ? sb.st_size - 100 : 3;  // 1: a payload byte, 2: the magic
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
}

// ---- the checks, per backend ----

static void test_backend(const char *be, const char *root) {
  char dir[512], err[8192], path[700], pre[32];
  snprintf(dir, sizeof dir, "%s/%s/cache", root, be);  // mkdir -p is the JIT's job
  snprintf(pre, sizeof pre, "k_%s_%ld", be, (long)getpid());
  printf("# backend %s\n", be);

  Jit *j = new_jit(be, dir, err, sizeof err);
  CHECK(j, "%s: jit_new (%s)", be, j ? jit_name(j) : err);
  if (!j) return;

  // 1. runtime symbol + expf
  JitStats st;
  char name[64], name2[64];
  char *src = fmt(k_exp, pre);
  snprintf(name, sizeof name, "%s_exp", pre);
  const char *names[] = {name};
  void *fn = NULL;
  int r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
  CHECK(!r && exp_ok(fn), "%s: kernel calling kt_parallel_for and expf (first compile %.1f ms) %s",
        be, st.compile_ms, r ? err : "");
  CHECK(!st.cache_hit && st.compile_ms > 0 && strlen(st.key) == 32, "%s: cold compile, key %s",
        be, st.key);
  cache_path(dir, st.key, path, sizeof path);
  CHECK(!access(path, R_OK), "%s: cache entry written: %s", be, path);

  // 2. same source, same Jit: loaded once, looked up again
  fn = NULL;
  r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
  CHECK(!r && st.cache_hit && exp_ok(fn), "%s: same source in the same Jit reuses the unit", be);

  // 3. same source, new Jit: from disk, no compiler
  r = exp_in_new_jit(be, dir, pre, &st);
  CHECK(r && st.cache_hit && st.compile_ms == 0 && !st.cache_corrupt,
        "%s: warm cache hit in a new Jit (%.2f ms: read + load + lookup)", be, st.load_ms);

  // 4. damaged entries are detected, removed, rebuilt
  static const char *damage[] = {"truncated", "payload byte flipped", "magic flipped"};
  for (int how = 0; how < 3; how++) {
    corrupt(path, how);
    r = exp_in_new_jit(be, dir, pre, &st);
    CHECK(r && !st.cache_hit && st.cache_corrupt, "%s: %s entry rebuilt, right results", be,
          damage[how]);
    r = exp_in_new_jit(be, dir, pre, &st);
    CHECK(r && st.cache_hit && !st.cache_corrupt, "%s: rebuilt entry is a hit again", be);
  }

  // 5. a vectorizable loop
  free(src);
  src = fmt(k_vec, pre);
  snprintf(name, sizeof name, "%s_saxpy_sum", pre);
  r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
  float x[1003], y[1003], s = -1;
  for (int i = 0; i < 1003; i++) x[i] = i % 7, y[i] = 1;
  if (!r) {
    AS_FN(SaxpyFn, f, fn);
    s = f(y, x, 2, 1003);
  }
  float want = 0;
  for (int i = 0; i < 1003; i++) want += 2.0f * (i % 7) + 1;
  CHECK(!r && s == want && y[1002] == 2.0f * (1002 % 7) + 1, "%s: vectorizable loop (%g)", be, s);

#if defined(__x86_64__)
  // Other target cpu and opt level: a different key, still right.
  {
    JitOptions o2 = JIT_OPTIONS_DEFAULT;
    o2.backend = be, o2.cache_dir = dir, o2.target_cpu = "x86-64-v2", o2.opt_level = 1;
    JitStats st2;
    Jit *jv = jit_new(&o2, NULL, 0, err, sizeof err);
    r = jv ? jit_compile(jv, src, names, 1, &fn, &st2, err, sizeof err) : -1;
    for (int i = 0; i < 1003; i++) y[i] = 1;
    if (!r) {
      AS_FN(SaxpyFn, f, fn);
      s = f(y, x, 2, 1003);
    }
    CHECK(!r && s == want && strcmp(st2.key, st.key), "%s: -march=x86-64-v2 -O1 %s", be,
          r ? err : "");
    jit_free(jv);
  }
#endif

  // jit_compile_object: an ELF relocatable object on disk
  snprintf(path, sizeof path, "%s/%s/vec.o", root, be);
  JitOptions o = JIT_OPTIONS_DEFAULT;
  o.backend = be, o.cache_dir = dir;
  r = jit_compile_object(&o, src, path, err, sizeof err);
  unsigned char hdr[18] = {0};
  FILE *f = fopen(path, "rb");
  if (f) {
    if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr) hdr[0] = 0;
    fclose(f);
  }
  CHECK(!r && !memcmp(hdr, "\177ELF", 4) && hdr[16] == 1 /* ET_REL */,
        "%s: jit_compile_object writes an ELF object %s", be, r ? err : "");

  // 6. syntax errors name the generated line
  free(src);
  src = fmt(k_bad, pre);
  snprintf(name, sizeof name, "%s_bad", pre);
  r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
  CHECK(r && strstr(err, "y[i] = y[i] +* ;") && strstr(err, "kernel.c:4:"),
        "%s: syntax error message shows kernel.c:4 and its line", be);
  if (!r || !strstr(err, "+* ;")) printf("  got: %s\n", err);

  // 7. an undefined function is a clear error, not a crash
  free(src);
  src = fmt(k_undef, pre);
  snprintf(name, sizeof name, "%s_undef", pre);
  r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
  CHECK(r && strstr(err, "kt_no_such_function"), "%s: undefined symbol reported", be);

  // 8. the llvm backend takes runtime symbols from JitSymbol, not only from the process
  if (!strcmp(be, "llvm")) {
    free(src);
    src = fmt(k_secret, pre);
    snprintf(name, sizeof name, "%s_secret", pre);
    r = jit_compile(j, src, names, 1, &fn, &st, err, sizeof err);
    AS_FN(SecretFn, f, fn);
    CHECK(!r && f(2) == 7, "%s: JitSymbol-only runtime symbol", be);
    // A different source defining an existing name: refused with a hint.
    char *dup = malloc(strlen(src) + 40);
    sprintf(dup, "%s/* other */\n", src);
    r = jit_compile(j, dup, names, 1, &fn, &st, err, sizeof err);
    CHECK(r && strstr(err, "unique"), "%s: duplicate external name refused: %s", be, err);
    free(dup);
  }

  // 9. a 50-line kernel, cold then warm (timings printed, not asserted)
  free(src);
  src = fmt(k_big, pre);
  snprintf(name, sizeof name, "%s_big", pre);
  snprintf(name2, sizeof name2, "%s_dot", pre);
  const char *bnames[] = {name, name2};
  void *bfn[2];
  r = jit_compile(j, src, bnames, 2, bfn, &st, err, sizeof err);
  enum { R = 8, C = 64 };
  static float bx[R * C], bg[C], bb[C], by[R * C];
  for (int i = 0; i < R * C; i++) bx[i] = (i % 13) * 0.1f;
  for (int i = 0; i < C; i++) bg[i] = 1, bb[i] = 0;
  TestRt rt = {0};
  if (!r) {
    AS_FN(BigFn, f, bfn[0]);
    f(&rt, bx, bg, bb, by, R, C);
  }
  float rs = 0;
  for (int i = 0; i < C; i++) rs += by[i];
  CHECK(!r && fabsf(rs - 1) < 1e-4f, "%s: 50-line kernel (softmax rows sum to %g) %s", be, rs,
        r ? err : "");
  printf("# %s: 50-line kernel cold compile %.1f ms, load %.2f ms\n", be, st.compile_ms,
         st.load_ms);
  Jit *j2 = new_jit(be, dir, err, sizeof err);
  r = j2 ? jit_compile(j2, src, bnames, 2, bfn, &st, err, sizeof err) : -1;
  CHECK(!r && st.cache_hit, "%s: 50-line kernel warm", be);
  printf("# %s: 50-line kernel warm (new Jit): %.2f ms\n", be, st.load_ms);
  jit_free(j2);

  // 10. no cache ("") and an unusable cache dir both still compile
  JitStats st2;
  r = exp_in_new_jit(be, "", pre, &st) && exp_in_new_jit(be, "", pre, &st2);
  CHECK(r && !st.cache_hit && !st2.cache_hit, "%s: cache_dir \"\" compiles every time", be);
  r = exp_in_new_jit(be, "/proc/kiln-no-such-dir/cache", pre, &st);
  CHECK(r && !st.cache_hit, "%s: unusable cache dir: compiles without caching", be);

  // 11. concurrent writers of one new key: all succeed, the entry is sound
  char cpre[40];
  snprintf(cpre, sizeof cpre, "%s_conc", pre);
  int kids = 4, good = 0;
  for (int i = 0; i < kids; i++)
    if (fork() == 0) _exit(exp_in_new_jit(be, dir, cpre, &st) ? 0 : 1);
  for (int i = 0; i < kids; i++) {
    int status;
    wait(&status);
    good += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  r = exp_in_new_jit(be, dir, cpre, &st);
  CHECK(good == kids && r && st.cache_hit, "%s: %d concurrent writers, entry sound", be, good);

  free(src);
  jit_free(j);
}

// The cache on its own: keys and entries.
static void test_cache(const char *root) {
  char dir[512], key[33], key2[33], why[600];
  snprintf(dir, sizeof dir, "%s/unit/a/b", root);
  CHECK(!cache_prepare(dir), "cache: mkdir -p %s", dir);
  CacheHash h;
  cache_hash_init(&h), cache_hash_str(&h, "ab"), cache_hash_str(&h, "c"), cache_hash_hex(&h, key);
  cache_hash_init(&h), cache_hash_str(&h, "a"), cache_hash_str(&h, "bc"), cache_hash_hex(&h, key2);
  CHECK(strlen(key) == 32 && strcmp(key, key2), "cache: keys are 128-bit and split-aware");
  char *data;
  size_t n;
  CHECK(cache_get(dir, key, &data, &n, why, sizeof why) == CACHE_MISS, "cache: miss");
  CHECK(!cache_put(dir, key, "hello", 5), "cache: put");
  int r = cache_get(dir, key, &data, &n, why, sizeof why);
  CHECK(r == CACHE_HIT && n == 5 && !memcmp(data, "hello", 5), "cache: hit returns the payload");
  if (r == CACHE_HIT) free(data);
  // An entry copied under another key is caught by the key in its header.
  char p1[700], p2[700];
  cache_path(dir, key, p1, sizeof p1);
  cache_path(dir, key2, p2, sizeof p2);
  rename(p1, p2);
  CHECK(cache_get(dir, key2, &data, &n, why, sizeof why) == CACHE_CORRUPT && access(p2, F_OK),
        "cache: misnamed entry rejected and removed (%s)", why);
}

int main(void) {
  char root[] = "/tmp/kiln-test-jit-XXXXXX";
  if (!mkdtemp(root)) return perror("mkdtemp"), 1;
  setvbuf(stdout, NULL, _IONBF, 0);  // forked children must not repeat buffered lines
  printf("# default backend: %s\n", jit_backend_name());
  test_cache(root);
  char err[256];
  JitOptions o = JIT_OPTIONS_DEFAULT;
  o.backend = "llvm", o.cache_dir = "";
  Jit *probe = jit_new(&o, NULL, 0, err, sizeof err);
  if (probe) {
    jit_free(probe);
    test_backend("llvm", root);
  } else {
    printf("# llvm backend not built: %s\n", err);
  }
  test_backend("cc", root);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);  // our own mkdtemp dir only
  if (system(cmd)) printf("# could not remove %s\n", root);
  printf("%d passed, %d failed\n", passes, fails);
  return fails ? 1 : 0;
}
