// st_tool.c: a helper for test_safetensors.py, which checks Kiln's safetensors files against
// Python's `safetensors` package.
//   st_tool write PATH    writes the fixed tensors and metadata below
//   st_tool dump PATH     loads PATH and prints, one line each:
//       meta HEXKEY HEXVALUE
//       tensor HEXNAME DTYPE SHAPE VALUE...     SHAPE is d0,d1,... ("-" for 0-d)
//   with names and metadata as hex bytes of their UTF-8 (any text survives), f32 values
//   with %.9g and f64 with %.17g (both exact), nan/inf/-inf as such. Exit 1 with the error
//   on stderr when the load fails.
#include "runtime/ckpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int write_fixed(const char *path) {
    int64_t s23[] = {2, 3}, s4[] = {4}, s22[] = {2, 2}, s5[] = {5}, s04[] = {0, 4}, s6[] = {6};
    RtTensor f32 = rt_tensor_new(RT_F32, 2, s23), f64 = rt_tensor_new(RT_F64, 1, s4),
             i32 = rt_tensor_new(RT_I32, 2, s22), i64 = rt_tensor_new(RT_I64, 0, NULL),
             b = rt_tensor_new(RT_BOOL, 1, s5), empty = rt_tensor_new(RT_F32, 2, s04),
             special = rt_tensor_new(RT_F32, 1, s6);
    for (int i = 0; i < 6; i++)
        ((float *)f32.data)[i] = (float)i * 0.1f - 1;
    const double d[4] = {1e-300, -2.5, 3.141592653589793, 1e300};
    memcpy(f64.data, d, sizeof d);
    const int32_t iv[4] = {INT32_MIN, -1, 0, INT32_MAX};
    memcpy(i32.data, iv, sizeof iv);
    *(int64_t *)i64.data = -9007199254740993;   // -(2^53 + 1): not a double
    const uint8_t bv[5] = {1, 0, 0, 1, 1};
    memcpy(b.data, bv, sizeof bv);
    const float sv[6] = {INFINITY, -INFINITY, -0.0f, 0x1p-149f, NAN, 3.4028235e38f};
    memcpy(special.data, sv, sizeof sv);
    RtNamedTensor ts[] = {{"f32", &f32},     {"f64", &f64},     {"i32", &i32},
                          {"i64_scalar", &i64}, {"bool", &b}, {"empty", &empty},
                          {"special", &special}};
    const char *meta[] = {"epoch", "3",
                          "note", "a \"quote\", a \\ and \xe2\x98\x83 \xf0\x9d\x84\x9e\n",
                          "format", "np"};
    char err[256];
    int rc = rt_safetensors_save(path, ts, 7, meta, 3, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    RtTensor *all[] = {&f32, &f64, &i32, &i64, &b, &empty, &special};
    for (int i = 0; i < 7; i++)
        rt_tensor_free(all[i]);
    return rc ? 1 : 0;
}

static void put_hex(const char *s) {
    if (!*s)
        fputs("-", stdout);
    for (; *s; s++)
        printf("%02x", (unsigned char)*s);
}

static void put_value(const RtTensor *t, int64_t i) {
    double v = 0;
    switch (t->dtype) {
    case RT_BOOL: printf(" %d", ((uint8_t *)t->data)[i]); return;
    case RT_I32: printf(" %d", ((int32_t *)t->data)[i]); return;
    case RT_I64: printf(" %lld", (long long)((int64_t *)t->data)[i]); return;
    case RT_F32: v = ((float *)t->data)[i]; break;
    case RT_F64: v = ((double *)t->data)[i]; break;
    }
    if (isnan(v))
        printf(" nan");
    else if (isinf(v))
        printf(v > 0 ? " inf" : " -inf");
    else
        printf(t->dtype == RT_F32 ? " %.9g" : " %.17g", v);
}

static int dump(const char *path) {
    RtTensorFile f;
    char err[512];
    if (rt_safetensors_load(path, &f, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (int i = 0; i < f.nmeta; i++) {
        printf("meta ");
        put_hex(f.meta_keys[i]);
        printf(" ");
        put_hex(f.meta_vals[i]);
        printf("\n");
    }
    for (int i = 0; i < f.n; i++) {
        const RtTensor *t = &f.t[i];
        printf("tensor ");
        put_hex(f.names[i]);
        printf(" %s ", rt_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            printf(d ? ",%lld" : "%lld", (long long)t->shape[d]);
        if (t->ndim == 0)
            printf("-");
        for (int64_t k = 0; k < rt_tensor_numel(t); k++)
            put_value(t, k);
        printf("\n");
    }
    rt_tensorfile_free(&f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "write"))
        return write_fixed(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "dump"))
        return dump(argv[2]);
    fprintf(stderr, "usage: st_tool write PATH | st_tool dump PATH\n");
    return 2;
}
