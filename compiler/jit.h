// jit.h - compile the code generator's C in-process and hand back function addresses.
//
//   JitSymbol syms[] = {{"rt_parallel_for", (void *)rt_parallel_for}};
//   char err[8192];
//   Jit *j = jit_new(NULL, syms, 1, err, sizeof err);    // NULL: default options
//   if (!j) fail(err);
//   const char *names[] = {"k_1f2e90_entry"};
//   void *fn;
//   JitStats st;
//   if (jit_compile(j, src, names, 1, &fn, &st, err, sizeof err)) fail(err);
//   ((void (*)(void *, void *))fn)(rt, args);
//   jit_free(j);       // unmaps the code: no address from j may be called afterwards
//
// Symbol names. All compiles of one Jit link into one namespace (the LLVM backend), so two
// different sources must not define the same external symbol: the caller prefixes every
// external name with something unique to its source (codegen: k_<hash>_...) and makes
// helpers static. Compiling the same source again is fine: it is loaded once per Jit and
// looked up again.
//
// Backends. "llvm": Clang 14 compiles to an object in memory, ORC's LLJIT links it in
// the process; runtime symbols come from `syms`, anything else (expf) from the process.
// "cc": the system C compiler builds a shared library that is dlopen'ed; `syms` is
// ignored and runtime symbols must be exported by the executable (link with -rdynamic).
// Both keep compiled code in the disk cache, so a warm run never starts a compiler.
//
// A Jit is not thread-safe: use one per thread or a lock around calls. Library code here
// never exits; failures return -1/NULL with a message in err.
#ifndef KILN_COMPILER_JIT_H
#define KILN_COMPILER_JIT_H

#include <stddef.h>

typedef struct Jit Jit;
typedef struct { const char *name; void *addr; } JitSymbol;

typedef struct {
  const char *cache_dir;   // NULL: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
                           // $HOME/.cache/kiln; "" disables the disk cache
  int opt_level;           // -1: default (-O3); 0..3: that level. Beware: 0 means -O0
  const char *target_cpu;  // NULL or "native": the host; else e.g. "x86-64-v3"
  const char *backend;     // NULL: $KILN_JIT, else the best one built in; "llvm" or "cc"
  int scalar_math;         // llvm: 1 = vectorized loops call scalar expf & co, not
                           // glibc's libmvec (within 4 ulp); results then match libm
  int verbose;             // 1 (or $KILN_JIT_VERBOSE=1): cache events on stderr
} JitOptions;
#define JIT_OPTIONS_DEFAULT {NULL, -1, NULL, NULL, 0, 0}

typedef struct {
  int cache_hit;      // 1: no compiler ran (disk cache, or already loaded in this Jit)
  int cache_corrupt;  // 1: a damaged cache entry was found, removed and rebuilt
  double compile_ms;  // time in the C compiler
  double load_ms;     // cache read + link/load + symbol lookups
  char key[33];       // the cache key, 32 hex digits
} JitStats;

Jit *jit_new(const JitOptions *opt, const JitSymbol *syms, int nsyms, char *err, size_t errlen);
void jit_free(Jit *j);

// Compile `src` (C99) and look up names[0..n) into addrs[0..n). Returns 0, or -1 with the
// compiler's diagnostics (file kernel.c, the offending line and a caret) in err.
// st may be NULL.
int jit_compile(Jit *j, const char *src, const char *const *names, int n, void **addrs,
                JitStats *st, char *err, size_t errlen);

// The backend a default jit_new would use, e.g. "llvm-orc (clang 14.0.6)".
const char *jit_backend_name(void);
// The backend of j.
const char *jit_name(const Jit *j);

// Compile to a relocatable object file at out_path (for an AOT `kiln build`): the same
// flags as jit_compile, written atomically. With the llvm backend it shares cache entries
// with jit_compile; objects that call vectorized libm need -lmvec when linked
// (JitOptions.scalar_math = 1 avoids that).
int jit_compile_object(const JitOptions *opt, const char *src, const char *out_path,
                       char *err, size_t errlen);

// The vectorizer's account of each loop in src, compiled as jit_compile would (never
// cached): Clang's loop-vectorize remarks (llvm backend, or a cc that is clang) or GCC's
// -fopt-info-vec messages, as "kernel.c:LINE:COL: ..." lines in *text (malloc'd).
// `kiln emit-c --vectorize` sums them up per kernel.
int jit_vector_report(const JitOptions *opt, const char *src, char **text, char *err, size_t errlen);

#endif
