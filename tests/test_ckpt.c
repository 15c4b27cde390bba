// test_ckpt.c: safetensors checkpoints, the progress display, the metrics log and its plot.
// One line per check, then "N passed, N failed"; exits nonzero on any failure.
#include "runtime/ckpt.h"
#include "runtime/report.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "check.h"



static char tmpdir[64];

static const char *tpath(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(tpath(name), "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

// The whole file, NUL-terminated; *n its length.
static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *s = malloc((size_t)len + 1);
    *n = fread(s, 1, (size_t)len, f);
    s[*n] = '\0';
    fclose(f);
    return s;
}

// The entries of dir other than . and .., so a test can see that no temporary file is left.
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

// A hand-made safetensors file: the 8-byte length, the header as given, the data.
static void write_st(const char *name, const char *header, const void *data, size_t n) {
    size_t hl = strlen(header);
    char *buf = malloc(8 + hl + n + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (n)
        memcpy(buf + 8 + hl, data, n);
    write_file(name, buf, 8 + hl + n);
    free(buf);
}

// Loading fails with a message naming the file and containing want, and *out is empty.
static int load_fails(const char *name, const char *want) {
    char err[512] = "";
    RtTensorFile f;
    memset(&f, 0x5a, sizeof f);
    int rc = rt_safetensors_load(tpath(name), &f, err, sizeof err);
    int ok = rc == -1 && f.n == 0 && !f.names && !f.t && f.nmeta == 0 && !f.meta_keys &&
             strstr(err, want) && strstr(err, name);
    if (!ok)
        printf("     got: %s\n", err);
    if (rc == 0)
        rt_tensorfile_free(&f);
    return ok;
}

//
// Round trips
//

static RtTensor filled(RtDType dt, int ndim, const int64_t *shape, int seed) {
    RtTensor t = rt_tensor_new(dt, ndim, shape);
    int64_t n = rt_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        double v = (double)((i * 7 + seed) % 23) - 11.25;
        switch (dt) {
        case RT_BOOL: ((uint8_t *)t.data)[i] = (i + seed) % 3 == 0; break;
        case RT_I32: ((int32_t *)t.data)[i] = (int32_t)(v * 1000); break;
        case RT_I64: ((int64_t *)t.data)[i] = (int64_t)(v * 1e15) + 1; break;
        case RT_F32: ((float *)t.data)[i] = (float)v / 3; break;
        case RT_F64: ((double *)t.data)[i] = v / 3; break;
        }
    }
    return t;
}

static int same_tensor(const RtTensor *a, const RtTensor *b) {
    return a && b && a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) &&
           !memcmp(a->data, b->data, rt_tensor_nbytes(a));
}

static void test_round_trip(void) {
    int64_t s23[] = {2, 3}, s5[] = {5}, s222[] = {2, 2, 2}, s03[] = {0, 3}, s0[] = {0},
            s8[] = {1, 2, 1, 2, 1, 2, 1, 2};
    RtTensor ts[] = {
        filled(RT_F32, 2, s23, 1), filled(RT_F64, 1, s5, 2),  filled(RT_I32, 3, s222, 3),
        filled(RT_I64, 0, NULL, 4), filled(RT_BOOL, 1, s5, 5), filled(RT_F32, 2, s03, 6),
        filled(RT_I64, 1, s0, 7),   filled(RT_F64, 0, NULL, 8), filled(RT_BOOL, 0, NULL, 9),
        filled(RT_I32, 8, s8, 10),
    };
    const char *names[] = {"f32", "f64", "i32", "i64 scalar", "bool", "empty f32", "empty i64",
                           "f64 scalar", "bool scalar", "layer.0/w\"8d\""};
    enum { N = sizeof ts / sizeof ts[0] };
    RtNamedTensor nt[N];
    for (int i = 0; i < N; i++)
        nt[i] = (RtNamedTensor){names[i], &ts[i]};
    const char *meta[] = {"quote\"key", "a \"quoted\" \\ back\\slash",
                          "unicode", "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9d\x84\x9e",
                          "control", "tab\tnewline\ncr\rbell\x07",
                          "empty", ""};
    char err[256] = "";
    int rc = rt_safetensors_save(tpath("rt.safetensors"), nt, N, meta, 4, err, sizeof err);
    check(rc == 0, "save: every dtype, 0-d to 8-d, empty, metadata %s", err);
    RtTensorFile f;
    rc = rt_safetensors_load(tpath("rt.safetensors"), &f, err, sizeof err);
    int ok = rc == 0 && f.n == N && f.nmeta == 4;
    for (int i = 0; ok && i < N; i++)
        ok = !strcmp(f.names[i], names[i]) && same_tensor(&f.t[i], &ts[i]) && f.t[i].owns;
    check(ok, "load: same names in order, dtypes, shapes and bytes %s", err);
    ok = rc == 0;
    for (int i = 0; ok && i < 4; i++) {
        const char *v = rt_tensorfile_meta(&f, meta[2 * i]);
        ok = v && !strcmp(v, meta[2 * i + 1]);
    }
    check(ok, "load: metadata with quotes, backslashes, unicode, control characters");
    check(rc == 0 && rt_tensorfile_find(&f, "bool") == &f.t[4] && !rt_tensorfile_find(&f, "x") &&
              !rt_tensorfile_meta(&f, "x") && !rt_tensorfile_meta(&f, "f32"),
          "find and meta: present and absent");
    rt_tensorfile_free(&f);
    check(f.n == 0 && !f.names && !f.t, "free leaves the file empty");
    rt_tensorfile_free(&f);

    // No tensors, no metadata: "{}" and padding.
    rc = rt_safetensors_save(tpath("none.safetensors"), NULL, 0, NULL, 0, err, sizeof err);
    size_t n;
    char *s = read_file(tpath("none.safetensors"), &n);
    check(rc == 0 && n == 16 && !memcmp(s, "\x08\0\0\0\0\0\0\0{}      ", 16),
          "save: no tensors is {} padded to 8");
    free(s);
    rc = rt_safetensors_load(tpath("none.safetensors"), &f, err, sizeof err);
    check(rc == 0 && f.n == 0 && f.nmeta == 0, "load: no tensors");
    rt_tensorfile_free(&f);
    for (int i = 0; i < N; i++)
        rt_tensor_free(&ts[i]);
}

// The exact bytes of a small file: what the format's readers expect.
static void test_layout(void) {
    int64_t s2[] = {2};
    RtTensor a = rt_tensor_new(RT_F32, 1, s2), b = rt_tensor_new(RT_I64, 0, NULL);
    ((float *)a.data)[0] = 1.0f, ((float *)a.data)[1] = -2.0f;
    *(int64_t *)b.data = 258;
    RtNamedTensor nt[] = {{"w", &a}, {"b", &b}};
    const char *meta[] = {"k", "v"};
    char err[256];
    int rc = rt_safetensors_save(tpath("l.safetensors"), nt, 2, meta, 1, err, sizeof err);
    size_t n;
    char *s = read_file(tpath("l.safetensors"), &n);
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    uint64_t len = 0;
    for (int i = 7; s && i >= 0; i--)
        len = len << 8 | (uint8_t)s[i];
    int ok = rc == 0 && s && len == padded && n == 8 + padded + 16 && !memcmp(s + 8, hdr, hl);
    for (size_t i = hl; ok && i < padded; i++)
        ok = s[8 + i] == ' ';
    ok = ok && !memcmp(s + 8 + padded, "\x00\x00\x80\x3f\x00\x00\x00\xc0\x02\x01\0\0\0\0\0\0", 16);
    check(ok, "save: header text, space padding to 8, little-endian data in order");
    free(s);
    rt_tensor_free(&a);
    rt_tensor_free(&b);
}

static int save_fails(const RtNamedTensor *nt, int n, const char *const *meta, int nmeta,
                      const char *want) {
    char err[256] = "";
    int rc = rt_safetensors_save(tpath("bad.safetensors"), nt, n, meta, nmeta, err, sizeof err);
    int ok = rc == -1 && strstr(err, want) && strstr(err, "bad.safetensors") &&
             access(tpath("bad.safetensors"), F_OK) != 0;
    if (!ok)
        printf("     got: %s\n", err);
    return ok;
}

static void test_save_errors(void) {
    int64_t s2[] = {2};
    RtTensor a = rt_tensor_new(RT_F32, 1, s2), bad = a, nodata = a;
    bad.dtype = (RtDType)9;
    nodata.data = NULL;
    RtNamedTensor dup[] = {{"a", &a}, {"b", &a}, {"a", &a}};
    check(save_fails(dup, 3, NULL, 0, "duplicate tensor name 'a'"), "save: duplicate names");
    RtNamedTensor reserved[] = {{"__metadata__", &a}};
    check(save_fails(reserved, 1, NULL, 0, "not a tensor name"), "save: reserved name");
    const char *meta[] = {"k", "1", "k", "2"};
    check(save_fails(dup, 1, meta, 2, "duplicate metadata key 'k'"), "save: duplicate metadata");
    RtNamedTensor b1[] = {{"x", &bad}};
    check(save_fails(b1, 1, NULL, 0, "tensor 'x': invalid tensor"), "save: bad dtype");
    RtNamedTensor b2[] = {{"x", &nodata}};
    check(save_fails(b2, 1, NULL, 0, "tensor 'x' has no data"), "save: no data");
    RtNamedTensor b3[] = {{"\xff", &a}};
    check(save_fails(b3, 1, NULL, 0, "not valid UTF-8"), "save: name not UTF-8");
    RtNamedTensor b4[] = {{NULL, &a}};
    check(save_fails(b4, 1, NULL, 0, "tensor 0 has no name"), "save: NULL name");
    check(save_fails(dup, -1, NULL, 0, "invalid arguments"), "save: negative count");
    rt_tensor_free(&a);
}

//
// Loading what other writers produce
//

static void test_converted(void) {
    // F16: 1, -2, 65504, the smallest subnormal, inf, -0, nan; BF16: 1, -5; I8, U8, I16.
    const uint8_t data[] = {
        0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7c, 0x00, 0x80, 0x00, 0x7e,
        0x80, 0x3f, 0xa0, 0xc0,
        0x80, 0x7f, 0xff,
        0xff, 0x00,
        0x00, 0x80, 0xff, 0x7f,
    };
    write_st("conv.safetensors",
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
             "\"bf\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[14,18]},"
             "\"i8\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[18,21]},"
             "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[21,23]},"
             "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[23,27]}}",
             data, sizeof data);
    RtTensorFile f;
    char err[256] = "";
    int rc = rt_safetensors_load(tpath("conv.safetensors"), &f, err, sizeof err);
    check(rc == 0 && f.n == 5, "load: F16 BF16 I8 U8 I16 %s", err);
    if (rc)
        return;
    const float *h = f.t[0].data, *bf = f.t[1].data;
    const int32_t *i8 = f.t[2].data, *u8 = f.t[3].data, *i16 = f.t[4].data;
    check(f.t[0].dtype == RT_F32 && h[0] == 1 && h[1] == -2 && h[2] == 65504 &&
              h[3] == 0x1p-24f && isinf(h[4]) && h[5] == 0 && signbit(h[5]) && isnan(h[6]),
          "load: F16 to f32, subnormals, inf, -0 and nan exact");
    check(f.t[1].dtype == RT_F32 && bf[0] == 1 && bf[1] == -5, "load: BF16 to f32");
    check(f.t[2].dtype == RT_I32 && i8[0] == -128 && i8[1] == 127 && i8[2] == -1 &&
              u8[0] == 255 && u8[1] == 0 && i16[0] == -32768 && i16[1] == 32767,
          "load: I8 U8 I16 to i32 with sign");
    rt_tensorfile_free(&f);

    // Whitespace anywhere JSON allows it, escapes, bool bytes other than 0 and 1, a gap.
    const uint8_t b[] = {0, 2, 255, 9, 9, 1};
    write_st("ws.safetensors",
             " {\n\t\"caf\\u00e9 \\ud834\\udd1e \\\"\\/\" : { \"shape\" : [ 3 ] , \"dtype\" : "
             "\"BOOL\" , \"data_offsets\" : [ 0 , 3 ] } ,\"__metadata__\":{}, \"x\":{\"dtype\":"
             "\"BOOL\",\"shape\":[1],\"data_offsets\":[5,6]}}\r\n   ",
             b, sizeof b);
    rc = rt_safetensors_load(tpath("ws.safetensors"), &f, err, sizeof err);
    const uint8_t *v = rc == 0 ? f.t[0].data : NULL;
    check(rc == 0 && f.n == 2 && !strcmp(f.names[0], "caf\xc3\xa9 \xf0\x9d\x84\x9e \"/") &&
              v[0] == 0 && v[1] == 1 && v[2] == 1 && *(uint8_t *)f.t[1].data == 1,
          "load: whitespace, \\u escapes and surrogate pairs, keys in any order, bools, gaps %s",
          err);
    rt_tensorfile_free(&f);
}

//
// Malformed files
//

static void test_truncated(void) {
    int64_t s3[] = {3};
    RtTensor a = filled(RT_F32, 1, s3, 1), b = filled(RT_I64, 0, NULL, 2);
    RtNamedTensor nt[] = {{"w", &a}, {"b", &b}};
    const char *meta[] = {"k", "v\"\\"};
    char err[256];
    rt_safetensors_save(tpath("full.safetensors"), nt, 2, meta, 1, err, sizeof err);
    size_t n;
    char *s = read_file(tpath("full.safetensors"), &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | (uint8_t)s[i];
    int ok = 1, nok = 0;
    for (size_t k = 0; k < n; k++) {
        write_file("cut.safetensors", s, k);
        RtTensorFile f;
        memset(&f, 0x5a, sizeof f);
        err[0] = '\0';
        int rc = rt_safetensors_load(tpath("cut.safetensors"), &f, err, sizeof err);
        const char *want = k < 8 + hl ? "truncated header" : "past the end of the file";
        int good = rc == -1 && f.n == 0 && !f.t && strstr(err, want) && strstr(err, "cut.s");
        if (!good && nok++ < 3)
            printf("     at %zu: %s\n", k, err);
        ok &= good;
    }
    check(ok, "load: the file cut at each of its %zu bytes: truncated header, or data past the "
              "end", n);
    // Each byte of the header replaced by a byte that cannot be there: never a crash.
    int loaded = 0;
    for (size_t k = 8; k < 8 + hl; k++) {
        for (int c = 0; c < 256; c += 37) {
            char *t = malloc(n);
            memcpy(t, s, n);
            t[k] = (char)c;
            write_file("flip.safetensors", t, n);
            free(t);
            RtTensorFile f;
            if (rt_safetensors_load(tpath("flip.safetensors"), &f, err, sizeof err) == 0)
                loaded++, rt_tensorfile_free(&f);
        }
    }
    check(1, "load: every header byte altered, no crash (%d still valid)", loaded);
    free(s);
    rt_tensor_free(&a);
    rt_tensor_free(&b);
}

static void test_malformed(void) {
    static const struct { const char *header, *want; } cases[] = {
        {"", "expected '{', found the end"},
        {"[]", "expected '{', found '['"},
        {"{\"a\" {", "expected ':', found '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "expected '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}", "expected a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
         "expected an integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "no leading zeros"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e3],\"data_offsets\":[0,4]}}", "exponent"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}",
         "expected an integer, found 't'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x",
         "only whitespace after the header object"},
        {"{\"a\\q\":1}", "expected an escape"},
        {"{\"a\\u12g4\":1}", "4 hex digits"},
        {"{\"\\ud800\":1}", "low surrogate"},
        {"{\"\\udc00\":1}", "high surrogate"},
        {"{\"\\u0000\":1}", "\\u0000 in a string"},
        {"{\"a\tb\":1}", "no control characters"},
        {"{\"a\xff\":1}", "not valid UTF-8"},
        {"{\"a\xc0\x80\":1}", "not valid UTF-8"},
        {"{\"abc", "a closing '\"'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"foo\":1}}",
         "tensor 'a': unknown key 'foo'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "tensor 'a': missing 'data_offsets'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}}",
         "tensor 'a': duplicate key 'shape'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         "tensor 'a' appears twice"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", "metadata key 'k' appears twice"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", "'__metadata__' appears twice"},
        {"{\"__metadata__\":{\"k\":1}}", "expected a string, found '1'"},
        {"{\"a\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         "tensor 'a': unsupported dtype 'U32'"},
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}",
         "tensor 'a': unsupported dtype 'F8_E4M3'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         "tensor 'a': shape has more than 8 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
         "data_offsets has more than 2 entries"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
         "data_offsets needs 2 entries, not 1"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
         "data_offsets [4, 0] are not a range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "not a range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
         "tensor 'a': negative dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
         "integer too large"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
         "tensor 'a': shape too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "tensor 'a': data_offsets [0, 16] past the end of the file (8 bytes of data)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3,1],\"data_offsets\":[0,8]}}",
         "tensor 'a': data_offsets [0, 8] hold 8 bytes, but F32 of shape [3, 1] needs 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
         "tensors 'a' and 'b' overlap (data_offsets [0, 4] and [2, 6])"},
        {"{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[4,5]}}", "overlap"},
    };
    char data[8] = {0};
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st("m.safetensors", cases[i].header, data, sizeof data);
        int good = load_fails("m.safetensors", cases[i].want);
        if (!good)
            printf("FAIL case %zu: %s\n", i, cases[i].header);
        ok &= good;
    }
    check(ok, "load: %zu malformed headers, each with its message",
          sizeof cases / sizeof cases[0]);

    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x10, '{', '}'};
    write_file("huge.safetensors", huge, sizeof huge);
    check(load_fails("huge.safetensors", "header length 1152921504606846976 is over the limit"),
          "load: a huge header length");
    uint8_t big[16] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_file("big.safetensors", big, sizeof big);
    check(load_fails("big.safetensors", "truncated header: 1000 bytes, but 8 follow"),
          "load: a header length past the end");
    write_file("empty.safetensors", "", 0);
    check(load_fails("empty.safetensors", "truncated header: the file is 0 bytes long"),
          "load: an empty file");
    check(load_fails("missing.safetensors", "No such file"), "load: a missing file");
    check(load_fails("", "not a regular file"), "load: a directory");
}

//
// Atomic saves
//

static int save_one(const char *path, float v, char *err, size_t errlen) {
    int64_t s[] = {1024};
    RtTensor t = rt_tensor_new(RT_F32, 1, s);
    for (int i = 0; i < 1024; i++)
        ((float *)t.data)[i] = v;
    RtNamedTensor nt[] = {{"w", &t}};
    int rc = rt_safetensors_save(path, nt, 1, NULL, 0, err, errlen);
    rt_tensor_free(&t);
    return rc;
}

static int holds(const char *path, float v) {
    RtTensorFile f;
    char err[256];
    if (rt_safetensors_load(path, &f, err, sizeof err) != 0)
        return 0;
    int ok = f.n == 1 && ((float *)f.t[0].data)[1023] == v;
    rt_tensorfile_free(&f);
    return ok;
}

static void test_atomic(void) {
    char err[256] = "";
    mkdir(tpath("a"), 0777);
    char p[256];
    snprintf(p, sizeof p, "%s", tpath("a/ck.safetensors"));
    check(save_one(p, 1, err, sizeof err) == 0 && save_one(p, 2, err, sizeof err) == 0 &&
              holds(p, 2) && count_entries(tpath("a")) == 1,
          "save: replaces an existing file, no temporary file left");

    // A write that fails midway (the file size limit): the old file stays, the temp goes.
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = save_one(p, 3, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    check(rc == -1 && strstr(err, "write failed") && holds(p, 2) && count_entries(tpath("a")) == 1,
          "save: a failed write leaves the old file and no temporary file: %s", err);

    // The rename fails: the target is a directory.
    mkdir(tpath("a/dir.safetensors"), 0777);
    write_file("a/dir.safetensors/x", "x", 1);
    rc = save_one(tpath("a/dir.safetensors"), 4, err, sizeof err);
    check(rc == -1 && strstr(err, "rename failed") && count_entries(tpath("a")) == 2,
          "save: a failed rename removes the temporary file: %s", err);
    unlink(tpath("a/dir.safetensors/x"));
    rmdir(tpath("a/dir.safetensors"));

    rc = save_one(tpath("a/ck.safetensors/x"), 5, err, sizeof err);
    check(rc == -1 && strstr(err, "cannot create") && holds(p, 2),
          "save: into a path whose directory is a file: %s", err);
    if (geteuid() != 0) {
        chmod(tpath("a"), 0555);
        rc = save_one(p, 6, err, sizeof err);
        chmod(tpath("a"), 0777);
        check(rc == -1 && strstr(err, "Permission denied") && holds(p, 2) &&
                  count_entries(tpath("a")) == 1,
              "save: into an unwritable directory fails, the old file stays: %s", err);
    } else {
        check(1, "save: unwritable directory (skipped: root writes anywhere)");
    }
    unlink(p);
    rmdir(tpath("a"));
}

//
// Metrics
//

static void test_metrics(void) {
    char err[256] = "";
    RtMetrics *m = rt_metrics_new(tpath("m.csv"), err, sizeof err);
    check(m != NULL, "metrics: new %s", err);
    if (!m)
        return;
    rt_metrics_step(m, 1, 1, 2.5, 0.01);
    rt_metrics_step(m, 1, 2, 1.25, NAN);
    const char *names[] = {"train_loss", "accuracy", "odd, \"name\""};
    double vals[] = {1.875, 0.123456789012, NAN};
    rt_metrics_epoch(m, 1, 2, names, vals, 3);
    size_t n;
    char *s = read_file(tpath("m.csv"), &n);
    const char *want = "epoch,step,name,value\n"
                       "1,1,loss,2.5\n"
                       "1,1,lr,0.01\n"
                       "1,2,loss,1.25\n"
                       "1,2,train_loss,1.875\n"
                       "1,2,accuracy,0.123456789\n"
                       "1,2,\"odd, \"\"name\"\"\",nan\n";
    check(s && !strcmp(s, want), "metrics: CSV rows in long form, flushed at the epoch");
    free(s);
    rt_metrics_step(m, 2, 3, INFINITY, 1e-20);
    check(rt_metrics_close(m, err, sizeof err) == 0, "metrics: close %s", err);
    s = read_file(tpath("m.csv"), &n);
    check(s && strstr(s, "\n2,3,loss,inf\n2,3,lr,1e-20\n"), "metrics: close flushes, inf, %%.9g");
    free(s);
    unlink(tpath("m.csv"));

    m = rt_metrics_new("/nonexistent-dir/m.csv", err, sizeof err);
    check(!m && strstr(err, "/nonexistent-dir/m.csv: cannot create the metrics log"),
          "metrics: a path that cannot be created: %s", err);
    m = rt_metrics_new(NULL, err, sizeof err);
    rt_metrics_step(m, 1, 1, 1, 0.1);
    check(m && rt_metrics_close(m, err, sizeof err) == 0 && rt_metrics_close(NULL, err, 1) == 0,
          "metrics: in memory only; close(NULL)");
}

// Stdout and stderr go to a file for the duration, so a test can see that nothing came out.
static int quiet_begin(int saved[2], const char *path) {
    fflush(stdout);
    fflush(stderr);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    saved[0] = dup(1), saved[1] = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    return 0;
}

static void quiet_end(int saved[2]) {
    fflush(stdout);
    fflush(stderr);
    dup2(saved[0], 1);
    dup2(saved[1], 2);
    close(saved[0]);
    close(saved[1]);
}

static void test_plot(void) {
    char err[256] = "";
    RtMetrics *m = rt_metrics_new(NULL, err, sizeof err);
    check(rt_metrics_plot(m, tpath("p.png"), "t", err, sizeof err) == -1 &&
              strstr(err, "no metrics to plot"),
          "plot: nothing to plot: %s", err);
    // Five epochs of a loss falling with noise, an accuracy rising.
    int64_t step = 0;
    for (int e = 1; e <= 5; e++) {
        double sum = 0;
        for (int b = 0; b < 120; b++) {
            double loss = 0.35 + 1.9 * exp(-(double)step / 90) + 0.12 * sin(step * 2.7) *
                          cos(step * 0.31);
            sum += loss;
            rt_metrics_step(m, e, ++step, loss, 0.01);
        }
        const char *names[] = {"train_loss", "test_loss", "accuracy"};
        double vals[] = {sum / 120, sum / 120 + 0.04, 0.9 - 0.35 * exp(-e / 1.3)};
        rt_metrics_epoch(m, e, step, names, vals, 3);
    }
    const char *png = getenv("KILN_TEST_PNG") ? getenv("KILN_TEST_PNG") : tpath("p.png");
    int saved[2];
    quiet_begin(saved, tpath("out.txt"));
    int rc = rt_metrics_plot(m, png, "mlp on Fashion-MNIST", err, sizeof err);
    quiet_end(saved);
    size_t n = 0, nout = 0;
    char *s = read_file(png, &n), *out = read_file(tpath("out.txt"), &nout);
#ifdef KILN_HAVE_PLPLOT
    check(rc == 0 && s && n > 5000 && !memcmp(s, "\x89PNG\r\n\x1a\n", 8),
          "plot: a PNG of %zu bytes %s", n, err);
    check(nout == 0, "plot: nothing on stdout or stderr%s%s", nout ? ": " : "", nout ? out : "");
    quiet_begin(saved, tpath("out.txt"));
    rc = rt_metrics_plot(m, "/nonexistent-dir/p.png", NULL, err, sizeof err);
    quiet_end(saved);
    check(rc == -1 && strstr(err, "/nonexistent-dir/p.png: cannot create"),
          "plot: into a missing directory: %s", err);
#else
    check(rc == -1 && !strcmp(err, "kiln was built without PLplot; --plot is unavailable") && !s,
          "plot: without PLplot: %s", err);
    (void)nout;
#endif
    free(s);
    free(out);
    unlink(tpath("p.png"));
    unlink(tpath("out.txt"));
    rt_metrics_close(m, err, sizeof err);
}

//
// Progress
//

// Runs a small two-epoch training display into a temporary file; returns its text.
static char *run_progress(int tty, int interrupt, double data_s) {
    FILE *f = tmpfile();
    RtProgress *p = rt_progress_new(f, tty);
    const char *names[] = {"accuracy", "error"};
    double acc[] = {0.9012, 0.05, 0.8811, 0.02};
    for (int e = 1; e <= 2; e++) {
        rt_progress_epoch_begin(p, e, 2, 3, 96);
        for (int b = 1; b <= 3; b++) {
            if (interrupt && e == 2 && b == 3)
                break;
            if (tty)   // past the redraw interval, so every step draws
                nanosleep(&(struct timespec){0, 110000000}, NULL);
            if (data_s > 0)
                rt_progress_data(p, data_s);
            rt_progress_step(p, b, 32 * b, 0.5 * b);
        }
        if (interrupt && e == 2)
            break;
        rt_progress_epoch_end(p, 1.0 / e, names, &acc[2 * (e - 1)], 2);
    }
    rt_progress_finish(p, interrupt);
    rt_progress_free(p);
    long len = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)len + 1);
    if (fread(s, 1, (size_t)len, f) != (size_t)len)
        s[0] = '\0';
    fclose(f);
    return s;
}

// Line i (from 0) of s starts with a and, when b is given, ends with b.
static int line_is(const char *s, int i, const char *a, const char *b) {
    for (; i > 0 && s; i--)
        s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL;
    if (!s)
        return 0;
    size_t n = strchr(s, '\n') ? (size_t)(strchr(s, '\n') - s) : strlen(s);
    return n >= strlen(a) && !strncmp(s, a, strlen(a)) &&
           (!b || (n >= strlen(b) && !strncmp(s + n - strlen(b), b, strlen(b))));
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_progress(void) {
    char *s = run_progress(0, 0, 0);
    check(count_lines(s) == 3 && !strchr(s, '\r') && !strchr(s, '\033'),
          "progress: plain mode prints three lines, no bar");
    check(line_is(s, 0, "epoch 1/2: loss 1.0000, ", " s, accuracy 0.9012, error 0.0500") &&
              strstr(s, " ex/s, "),
          "progress: epoch line with loss, throughput, time and metrics");
    check(line_is(s, 1, "epoch 2/2: loss 0.5000, ", " s, accuracy 0.8811, error 0.0200"),
          "progress: second epoch");
    check(line_is(s, 2, "trained 2 epochs in ", " ex/s); best accuracy 0.9012 (epoch 1)"),
          "progress: final line, best of the first metric");
    free(s);
    // Three waits of 1e6 s, longer than the epoch: the share is capped at 100%.
    s = run_progress(0, 0, 1e6);
    check(line_is(s, 0, "epoch 1/2: loss 1.0000, ", " s (data 100%), accuracy 0.9012, error 0.0500"),
          "progress: the share of the epoch spent waiting for data, after its time");
    free(s);
    s = run_progress(0, 1, 0);
    check(count_lines(s) == 2 && line_is(s, 1, "stopped at epoch 2, step 2/3 after ",
                                         "; best accuracy 0.9012 (epoch 1)"),
          "progress: interrupted in an epoch");
    free(s);
    s = run_progress(1, 0, 0);
    check(strstr(s, "\repoch 1/2 [>                             ] 0/3\033[K") &&
              strstr(s, "\repoch 1/2 [==========>                   ] 1/3  ") &&
              strstr(s, "loss 0.5000  ETA 0:") && strstr(s, "\r\033[Kepoch 1/2: loss 1.0000") &&
              strstr(s, "\r\033[Kepoch 2/2: loss 0.5000") && strstr(s, "\ntrained 2 epochs"),
          "progress: tty mode draws a bar with \\r and replaces it by the summary");
    free(s);

    // A nan loss shows, lower is better for an error metric, unknown batch counts.
    FILE *f = tmpfile();
    RtProgress *p = rt_progress_new(f, 1);
    const char *names[] = {"val_error"};
    double v1 = 0.3, v2 = 0.1, v3 = 0.2;
    rt_progress_epoch_begin(p, 1, 0, 0, 0);
    nanosleep(&(struct timespec){0, 110000000}, NULL);
    rt_progress_step(p, 1, 10, NAN);
    nanosleep(&(struct timespec){0, 110000000}, NULL);
    rt_progress_step(p, 2, 20, 1.0);
    rt_progress_epoch_end(p, NAN, names, &v1, 1);
    rt_progress_epoch_begin(p, 2, 0, 0, 0);
    rt_progress_epoch_end(p, 0.5, names, &v2, 1);
    rt_progress_epoch_begin(p, 3, 0, 0, 0);
    rt_progress_epoch_end(p, 0.5, names, &v3, 1);
    rt_progress_finish(p, 0);
    rt_progress_free(p);
    long len = ftell(f);
    rewind(f);
    char buf[2048] = "";
    size_t got = fread(buf, 1, len < 2047 ? (size_t)len : 2047, f);
    buf[got] = '\0';
    fclose(f);

    check(strstr(buf, "\repoch 1  batch 1  ") && strstr(buf, "loss nan") &&
              strstr(buf, "epoch 1: loss nan, ") &&
              strstr(buf, "trained 3 epochs in ") && strstr(buf, "best val_error 0.1000 (epoch 2)"),
          "progress: nan loss, unknown sizes, lower error is better");
    f = tmpfile();
    p = rt_progress_new(f, 1);
    rt_progress_epoch_begin(p, 1, 1, 0, 100);
    nanosleep(&(struct timespec){0, 110000000}, NULL);
    rt_progress_step(p, 7, 50, 1.0);
    rewind(f);
    got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    check(strstr(buf, "[===============>              ] 50/100  ") != NULL,
          "progress: without a batch count the bar follows the examples");
    rt_progress_free(p);
    fclose(f);
    rt_progress_step(NULL, 1, 1, 1);
    rt_progress_finish(NULL, 0);
    rt_progress_free(NULL);
    f = tmpfile();
    p = rt_progress_new(f, -1);
    rt_progress_epoch_begin(p, 1, 1, 10, 10);
    rt_progress_step(p, 1, 1, 1);
    check(ftell(f) == 0, "progress: tty -1 on a file is plain mode");
    rt_progress_free(p);
    fclose(f);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    strcpy(tmpdir, "/tmp/kiln_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    test_round_trip();
    test_layout();
    test_save_errors();
    test_converted();
    test_truncated();
    test_malformed();
    test_atomic();
    test_metrics();
    test_plot();
    test_progress();
    const char *names[] = {"rt.safetensors", "none.safetensors", "l.safetensors",
                           "conv.safetensors", "ws.safetensors", "full.safetensors",
                           "cut.safetensors", "flip.safetensors", "m.safetensors",
                           "huge.safetensors", "big.safetensors", "empty.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unlink(tpath(names[i]));
    check(rmdir(tmpdir) == 0, "scratch directory left clean");
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
