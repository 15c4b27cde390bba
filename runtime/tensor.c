// tensor.c: host tensors and printing them as nested lists.
#include "rt.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUMMARY_THRESHOLD 1000   // NumPy's print threshold and edge items
#define EDGE_ITEMS 3

RtTensor rt_tensor_new(RtDType dt, int ndim, const int64_t *shape) {
    RtTensor t = {.dtype = dt, .ndim = ndim};
    if (rt_dtype_size(dt) == 0 || ndim < 0 || ndim > RT_MAXDIM || (ndim > 0 && !shape)) {
        t.ndim = 0;
        return t;
    }
    // Refuse negative dims and a byte count that overflows.
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return t;
        t.shape[i] = shape[i];
        if (shape[i] && n > (uint64_t)INT64_MAX / (uint64_t)shape[i])
            return t;
        n *= (uint64_t)shape[i];
    }
    if (n > SIZE_MAX / rt_dtype_size(dt) || n > (uint64_t)INT64_MAX / 8)
        return t;
    t.data = rt_calloc((size_t)n * rt_dtype_size(dt));
    t.owns = t.data != NULL;
    return t;
}

void rt_tensor_free(RtTensor *t) {
    if (!t)
        return;
    if (t->owns)
        rt_free(t->data);
    t->data = NULL;
    t->owns = 0;
}

int64_t rt_tensor_numel(const RtTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t rt_tensor_nbytes(const RtTensor *t) {
    return (size_t)rt_tensor_numel(t) * rt_dtype_size(t->dtype);
}

void rt_tensor_add(RtTensor *dst, const RtTensor *src) {
    int64_t n = rt_tensor_numel(dst);
    if (dst->dtype == RT_F64)
        for (int64_t i = 0; i < n; i++) ((double *)dst->data)[i] += ((const double *)src->data)[i];
    else
        for (int64_t i = 0; i < n; i++) ((float *)dst->data)[i] += ((const float *)src->data)[i];
}

static void print_float(FILE *f, double v) {
    // glibc prints "-nan"; one spelling for every nan.
    if (isnan(v))
        fputs("nan", f);
    else if (isinf(v))
        fputs(v > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%g", v);
}

static void print_elem(FILE *f, const RtTensor *t, int64_t i) {
    switch (t->dtype) {
    case RT_BOOL: fputs(((const uint8_t *)t->data)[i] ? "true" : "false", f); break;
    case RT_I32: fprintf(f, "%" PRId32, ((const int32_t *)t->data)[i]); break;
    case RT_I64: fprintf(f, "%" PRId64, ((const int64_t *)t->data)[i]); break;
    case RT_F32: print_float(f, ((const float *)t->data)[i]); break;
    case RT_F64: print_float(f, ((const double *)t->data)[i]); break;
    default: fputc('?', f); break;
    }
}

// Print axis `dim` of the block starting at element `off`; stride[d] is elements per step.
static void print_axis(FILE *f, const RtTensor *t, const int64_t *stride, int dim, int64_t off,
                       int summarize) {
    if (dim == t->ndim) {
        print_elem(f, t, off);
        return;
    }
    int64_t n = t->shape[dim];
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        if (i > 0)
            fputs(", ", f);
        if (summarize && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            fputs("...", f);
            i = n - EDGE_ITEMS - 1;   // the loop's i++ lands on the first tail item
            continue;
        }
        print_axis(f, t, stride, dim + 1, off + i * stride[dim], summarize);
    }
    fputc(']', f);
}

void rt_tensor_print(FILE *f, const RtTensor *t) {
    if (t->ndim < 0 || t->ndim > RT_MAXDIM) {
        fputs("<bad tensor>", f);
        return;
    }
    int64_t n = rt_tensor_numel(t);
    if (!t->data && n > 0) {
        fputs("<no data>", f);
        return;
    }
    int64_t stride[RT_MAXDIM];
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= t->shape[d];
    }
    print_axis(f, t, stride, 0, 0, n > SUMMARY_THRESHOLD);
}

char *rt_tensor_to_string(const RtTensor *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    rt_tensor_print(f, t);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

// Stores v as a C cast would, except that a float out of an integer type's range saturates
// and NaN becomes 0 (the cast would be undefined).
static void put_f(void *dst, RtDType t, int64_t i, double v) {
    switch (t) {
    case RT_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
    case RT_I32:
        ((int32_t *)dst)[i] = v != v ? 0 : v <= INT32_MIN ? INT32_MIN
                                         : v >= INT32_MAX ? INT32_MAX : (int32_t)v;
        break;
    case RT_I64:
        ((int64_t *)dst)[i] = v != v ? 0 : v <= -0x1p63 ? INT64_MIN
                                         : v >= 0x1p63 ? INT64_MAX : (int64_t)v;
        break;
    case RT_F32: ((float *)dst)[i] = (float)v; break;
    case RT_F64: ((double *)dst)[i] = v; break;
    }
}

static void put_i(void *dst, RtDType t, int64_t i, int64_t v) {
    switch (t) {
    case RT_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
    case RT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case RT_I64: ((int64_t *)dst)[i] = v; break;
    case RT_F32: ((float *)dst)[i] = (float)v; break;
    case RT_F64: ((double *)dst)[i] = (double)v; break;
    }
}

void rt_convert(void *dst, RtDType dt, const void *src, RtDType st, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (st) {
        case RT_BOOL: put_i(dst, dt, i, ((const uint8_t *)src)[i]); break;
        case RT_I32: put_i(dst, dt, i, ((const int32_t *)src)[i]); break;
        case RT_I64: put_i(dst, dt, i, ((const int64_t *)src)[i]); break;
        case RT_F32: put_f(dst, dt, i, ((const float *)src)[i]); break;
        case RT_F64: put_f(dst, dt, i, ((const double *)src)[i]); break;
        }
    }
}

int64_t rt_first_inexact(const void *src, RtDType st, RtDType dt, int64_t n) {
    if ((st != RT_F32 && st != RT_F64) || (dt != RT_I32 && dt != RT_I64))
        return -1;
    double lo = dt == RT_I32 ? -2147483648.0 : -0x1p63, hi = dt == RT_I32 ? 2147483648.0 : 0x1p63;
    for (int64_t i = 0; i < n; i++) {
        double v = st == RT_F32 ? ((const float *)src)[i] : ((const double *)src)[i];
        if (!(v == floor(v) && v >= lo && v < hi))
            return i;
    }
    return -1;
}
