// clang_shim.h - the one C++ file's C interface: Clang 14 as a library, C in, ELF out.
#ifndef KILN_COMPILER_CLANG_SHIM_H
#define KILN_COMPILER_CLANG_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Compile `src`, named kernel.c, with driver-style args (as after `clang`, e.g. "-O3",
// "-march=native"; the shim adds -c, -x c and the file names) into an object file in
// memory. Returns 0 and a malloc'd *obj, or -1. *diag gets the malloc'd diagnostics
// (source line and caret included) or NULL when there are none.
int kiln_clang_compile(const char *const *args, int nargs, const char *src,
                       char **obj, size_t *objlen, char **diag);

// Registers the native target with LLVM, once per process (thread-safe). 0, or -1 when
// LLVM has no target for this host.
int kiln_llvm_init(void);

// "Debian clang version 14.0.6" or the like, for cache keys and messages.
void kiln_clang_version(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
