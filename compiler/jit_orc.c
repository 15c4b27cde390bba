// jit_orc.c - the llvm backend: clang_shim.cpp compiles to an object, ORC's LLJIT links it
// into the process. LLVM's C API only; one LLJIT per Jit.
#include "jit_internal.h"
#include "cache.h"
#include "clang_shim.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>
#include <llvm/Config/llvm-config.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KILN_LLVM_LIBDIR
#define KILN_LLVM_LIBDIR "/usr/lib/llvm-14/lib"
#endif
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct {
  LLVMOrcLLJITRef jit;
  LLVMOrcJITDylibRef jd;
  char async_err[1024];  // what the session reported while materializing, if anything
} Orc;

// Moves an LLVMErrorRef's message into err (prefixed) and frees it.
static void llvm_err(LLVMErrorRef e, const char *what, char *err, size_t errlen) {
  char *m = LLVMGetErrorMessage(e);
  jit_seterr(err, errlen, "jit: %s: %s", what, m);
  LLVMDisposeErrorMessage(m);
}

static const char *describe(void) { return "llvm-orc (clang " LLVM_VERSION_STRING ")"; }

// ---- configuration ----

// Clang's builtin headers (stddef.h, stdint.h's first half): an override, the path meson
// found, or the usual place next to LLVM's libraries.
static const char *resource_dir(char *buf, size_t n) {
  const char *cand[] = {
    getenv("KILN_CLANG_RESOURCE_DIR"),
#ifdef KILN_CLANG_RESOURCE_DIR
    KILN_CLANG_RESOURCE_DIR,
#endif
    KILN_LLVM_LIBDIR "/clang/" LLVM_VERSION_STRING,
    KILN_LLVM_LIBDIR "/clang/" STR(LLVM_VERSION_MAJOR),
  };
  for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
    if (!cand[i] || !*cand[i]) continue;
    snprintf(buf, n, "%s/include/stddef.h", cand[i]);
    if (!access(buf, R_OK)) return snprintf(buf, n, "%s", cand[i]), buf;
  }
  return NULL;
}

static int configure(JitConf *c, char *err, size_t errlen) {
  char opt[8], march[80], dir[1024], ver[256];
  snprintf(opt, sizeof opt, "-O%d", c->opt_level);
  snprintf(march, sizeof march, "-march=%s", c->target_cpu);
  // Vectorized expf & co call glibc's libmvec; it must be in the process for ORC to
  // find it. The handle is never closed: the code we link may call into it.
  if (c->vector_math && !dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL)) c->vector_math = 0;
  // -mcmodel=large: ORC's RuntimeDyld places each object wherever mmap puts it,
  // which can be more than 2 GiB from the runtime, libm and earlier objects; the
  // small model's 32-bit PC-relative references then overflow and the code
  // jumps into nowhere (seen with many graphs in one process). 64-bit addresses
  // cost an instruction per external call, which kernels rarely make.
  const char *flags[] = {"-std=c99", opt, march, "-fno-math-errno", "-ffp-contract=on",
                         "-fPIC", "-mcmodel=large", "-Werror=implicit-function-declaration"};
  int bad = 0;
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) bad |= jit_addflag(c, flags[i]);
  if (c->vector_math) bad |= jit_addflag(c, "-fveclib=libmvec");
  const char *rd = resource_dir(dir, sizeof dir);
  if (rd) bad |= jit_addflag(c, "-resource-dir") | jit_addflag(c, rd);
  if (bad) {
    jit_seterr(err, errlen, "jit: compiler flags too long");
    return -1;
  }

  // -march=native means this host's cpu and features: they belong in the key.
  kiln_clang_version(ver, sizeof ver);
  char *triple = LLVMGetDefaultTargetTriple();
  char host[40] = "";
  if (!strcmp(c->target_cpu, "native")) {
    char *cpu = LLVMGetHostCPUName(), *feat = LLVMGetHostCPUFeatures();
    CacheHash h;
    cache_hash_init(&h);
    cache_hash_str(&h, cpu);
    cache_hash_str(&h, feat);
    cache_hash_hex(&h, host);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(feat);
  }
  snprintf(c->fingerprint, sizeof c->fingerprint, "%s|%s|host %s", ver, triple, host);
  LLVMDisposeMessage(triple);
  return 0;
}

// ---- compile ----

static int compile(const JitConf *c, const char *src, int object, JitBuf *out, char *err,
                   size_t errlen) {
  const char *argv[64];
  int argc = jit_getflags(c, argv, 64);
  char *diag = NULL;
  int r = kiln_clang_compile(argv, argc, src, &out->p, &out->n, &diag);
  if (r) jit_seterr(err, errlen, "jit: generated C does not compile (%s):\n%s", describe(),
                    diag ? diag : "clang failed without a message\n");
  if (!r && c->keep_diag) out->diag = diag, diag = NULL;
  free(diag);
  return r;
}

// ---- the LLJIT ----

static void report(void *ctx, LLVMErrorRef e) {
  Orc *o = ctx;
  char *m = LLVMGetErrorMessage(e);
  snprintf(o->async_err, sizeof o->async_err, "%s", m);
  LLVMDisposeErrorMessage(m);
}

static void close_orc(void *state) {
  Orc *o = state;
  if (!o) return;
  if (o->jit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(o->jit);
    if (e) LLVMConsumeError(e);
  }
  free(o);
}

// Runtime symbols first, then the process (libm, libmvec, libc) for the rest.
static int define_symbols(Orc *o, const JitSymbol *syms, int nsyms, char *err, size_t errlen) {
  LLVMErrorRef e;
  if (nsyms > 0) {
    LLVMJITCSymbolMapPair *pairs = calloc(nsyms, sizeof *pairs);
    if (!pairs) return jit_seterr(err, errlen, "jit: out of memory"), -1;
    for (int i = 0; i < nsyms; i++) {
      pairs[i].Name = LLVMOrcLLJITMangleAndIntern(o->jit, syms[i].name);
      pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)syms[i].addr;
      pairs[i].Sym.Flags.GenericFlags =
          LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
    }
    LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(pairs, nsyms);
    free(pairs);  // the unit owns the names now
    if ((e = LLVMOrcJITDylibDefine(o->jd, mu))) {
      LLVMOrcDisposeMaterializationUnit(mu);
      return llvm_err(e, "defining runtime symbols", err, errlen), -1;
    }
  }
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(o->jit), NULL, NULL);
  if (e) return llvm_err(e, "process symbol search", err, errlen), -1;
  LLVMOrcJITDylibAddGenerator(o->jd, gen);
  return 0;
}

static void *open_orc(const JitConf *c, const JitSymbol *syms, int nsyms, char *err,
                      size_t errlen) {
  if (kiln_llvm_init()) {
    jit_seterr(err, errlen, "jit: LLVM has no native target on this host");
    return NULL;
  }
  Orc *o = calloc(1, sizeof *o);
  if (!o) return jit_seterr(err, errlen, "jit: out of memory"), NULL;
  LLVMErrorRef e = LLVMOrcCreateLLJIT(&o->jit, NULL);  // NULL builder: this host
  if (e) {
    llvm_err(e, "creating the LLJIT", err, errlen);
    o->jit = NULL;
    close_orc(o);
    return NULL;
  }
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(o->jit), report, o);
  o->jd = LLVMOrcLLJITGetMainJITDylib(o->jit);
  if (define_symbols(o, syms, nsyms, err, errlen)) {
    close_orc(o);
    return NULL;
  }
  return o;
}

static int load(void *state, const JitBuf *b, void **unit, char *err, size_t errlen) {
  Orc *o = state;
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy(b->p, b->n, "kernel.o");
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFile(o->jit, o->jd, mb);  // takes mb
  if (e) {
    char *m = LLVMGetErrorMessage(e);
    jit_seterr(err, errlen, "jit: adding object: %s%s", m,
               strstr(m, "Duplicate definition")
                   ? " (external names must be unique per source: prefix them with its hash)"
                   : "");
    LLVMDisposeErrorMessage(m);
    return -1;
  }
  *unit = NULL;  // one namespace: lookups go to the main JITDylib
  return 0;
}

static int lookup(void *state, void *unit, const char *name, void **addr, char *err,
                  size_t errlen) {
  Orc *o = state;
  LLVMOrcExecutorAddress a = 0;
  o->async_err[0] = 0;
  LLVMErrorRef e = LLVMOrcLLJITLookup(o->jit, &a, name);
  if (e) {
    char *m = LLVMGetErrorMessage(e);
    jit_seterr(err, errlen, "jit: looking up %s: %s%s%s", name, m, *o->async_err ? "; " : "",
               o->async_err);
    LLVMDisposeErrorMessage(m);
    return -1;
  }
  *addr = (void *)(uintptr_t)a;
  return 0;
}

const JitBackend jit_llvm_backend = {
  .name = "llvm",
  .describe = describe,
  .load_is_object = 1,
  .configure = configure,
  .compile = compile,
  .open = open_orc,
  .close = close_orc,
  .load = load,
  .lookup = lookup,
};
