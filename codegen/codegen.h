// Emitters: a Schedule in, source text out. One expression printer (the op
// table's C templates) serves the C emitter now and the CUDA emitter later.
#ifndef KILN_CODEGEN_H
#define KILN_CODEGEN_H
#include "ir/sched.h"

typedef struct {
  char *src;           // the translation unit (malloc'd)
  char entry[48];      // void entry(void **args): args = rt, dims, inputs..., consts..., outputs...
  char call[48];       // void call(void *rt, void *dims, void *a0, ...): the same, one pointer each (libffi)
  char workspace[48];  // size_t workspace(const int64_t *dims): scratch bytes a run needs
  int nargs;           // pointer arguments after rt and dims
} CSource;

typedef struct {
  int profile;   // time each kernel into rt_profile(rt)[k] (kiln run --profile)
} CgOpts;

// Emit C99 for the whole schedule. Function names carry a hash of the text,
// so objects of different graphs never clash in one JIT. cg_emit_c: default options.
int cg_emit_c_opts(const Schedule *s, const CgOpts *o, CSource *out, char *err, size_t errlen);
int cg_emit_c(const Schedule *s, CSource *out, char *err, size_t errlen);
void cg_source_free(CSource *cs);

#endif
