// mem.c: dtypes and 64-byte aligned memory.
#include "rt.h"

#include <stdlib.h>
#include <string.h>

static const struct { size_t size; const char *name; } dtypes[RT_NDTYPES] = {
    [RT_BOOL] = {1, "bool"},
    [RT_I32] = {4, "i32"},
    [RT_I64] = {8, "i64"},
    [RT_F32] = {4, "f32"},
    [RT_F64] = {8, "f64"},
};

static int dtype_ok(RtDType t) { return (unsigned)t < RT_NDTYPES; }

size_t rt_dtype_size(RtDType t) { return dtype_ok(t) ? dtypes[t].size : 0; }

const char *rt_dtype_name(RtDType t) { return dtype_ok(t) ? dtypes[t].name : "?"; }

void *rt_alloc(size_t bytes) {
    // aligned_alloc wants a multiple of the alignment; round up, refusing overflow.
    if (bytes > SIZE_MAX - RT_ALIGN)
        return NULL;
    size_t n = (bytes + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN;
    return aligned_alloc(RT_ALIGN, n ? n : RT_ALIGN);
}

void *rt_calloc(size_t bytes) {
    void *p = rt_alloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void rt_free(void *p) { free(p); }
