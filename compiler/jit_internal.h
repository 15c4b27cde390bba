// jit_internal.h - what jit.c needs from a backend (llvm: jit_orc.c, cc: cc_fallback.c).
#ifndef KILN_COMPILER_JIT_INTERNAL_H
#define KILN_COMPILER_JIT_INTERNAL_H

#include "jit.h"

#include <stddef.h>

// Options after defaults and environment are applied; shared by jit_new and
// jit_compile_object.
typedef struct JitBackend JitBackend;
typedef struct {
  const JitBackend *be;
  char *cache_dir;       // NULL: no disk cache
  int opt_level;         // 0..3
  char target_cpu[64];   // "native" or an LLVM/GCC cpu name
  int vector_math;       // llvm: -fveclib=libmvec (libmvec is loaded in the process)
  int verbose;
  char flags[2048];      // compiler flags, each NUL-terminated, back to back
  int nflags;
  char fingerprint[1024];  // toolchain version and host cpu: the rest of a cache key
  int keep_diag;         // compile() hands back its messages (jit_vector_report)
} JitConf;

// One compiled unit's bytes; diag: the compiler's messages when compile() was asked
// for them (JitConf.keep_diag), else NULL. Both malloc'd.
typedef struct { char *p; size_t n; char *diag; } JitBuf;

struct JitBackend {
  const char *name;      // "llvm" or "cc"
  const char *(*describe)(void);  // "llvm-orc (clang 14.0.6)"
  int load_is_object;    // 1: what load() takes is also a relocatable object
  // Fill c->fingerprint (and backend-specific fields). -1 with err if unusable.
  int (*configure)(JitConf *c, char *err, size_t errlen);
  // src -> bytes: what load() takes (object = 0), or a relocatable object (object = 1).
  int (*compile)(const JitConf *c, const char *src, int object, JitBuf *out, char *err,
                 size_t errlen);
  void *(*open)(const JitConf *c, const JitSymbol *syms, int nsyms, char *err, size_t errlen);
  void (*close)(void *state);
  // Load one unit; *unit is handed back to lookup.
  int (*load)(void *state, const JitBuf *b, void **unit, char *err, size_t errlen);
  int (*lookup)(void *state, void *unit, const char *name, void **addr, char *err,
                size_t errlen);
};

extern const JitBackend jit_cc_backend;
#ifdef KILN_JIT_LLVM
extern const JitBackend jit_llvm_backend;
#endif

// Shared helpers (jit.c).
int jit_addflag(JitConf *c, const char *flag);   // -1 when flags is full
int jit_getflags(const JitConf *c, const char **argv, int max);  // -> count
double jit_now_ms(void);
// Copy a message into err, cut to fit with a note when it does not.
void jit_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
