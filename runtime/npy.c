// npy.c: NumPy .npy files.
// Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.x, u32 LE for 2.x/3.x),
// a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and '\n' so the data starts on a 64-byte boundary, then the data.
#include "rt.h"
#include "private.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_HEADER (1 << 20)   // a sane header is a few hundred bytes

// The file types Kiln reads and the dtype each becomes; the first five are also
// what it writes. The rest are widened as they are read, exactly: small
// integers (uint8 images, int16 audio) to i32, uint32 to i64, float16 to f32.
// kind: 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'h' half.
static const struct { char code[3]; RtDType dt; int size; char kind; } npy_types[] = {
    {"f4", RT_F32, 4, 'f'}, {"f8", RT_F64, 8, 'f'}, {"i4", RT_I32, 4, 'i'}, {"i8", RT_I64, 8, 'i'}, {"b1", RT_BOOL, 1, 'b'},
    {"u1", RT_I32, 1, 'u'}, {"i1", RT_I32, 1, 'i'}, {"u2", RT_I32, 2, 'u'}, {"i2", RT_I32, 2, 'i'},
    {"u4", RT_I64, 4, 'u'}, {"f2", RT_F32, 2, 'h'},
};
#define NPY_WRITTEN 5   // the entries rt_npy_save uses

static int host_le(void) {
    uint16_t one = 1;
    return *(uint8_t *)&one == 1;
}

//
// Saving
//

// Fills buf (at least 512 bytes) with the preamble and padded header; returns its length.
static size_t make_header(char *buf, const RtTensor *t) {
    char dict[400];
    const char *code = "";
    for (size_t i = 0; i < NPY_WRITTEN; i++)
        if (npy_types[i].dt == t->dtype)
            code = npy_types[i].code;
    char bo = t->dtype == RT_BOOL ? '|' : host_le() ? '<' : '>';
    int n = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                     bo, code);
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, i ? ", %lld" : "%lld",
                      (long long)t->shape[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");
    // NumPy's padding: spaces then '\n', total a multiple of 64 (adding 64 when already so).
    size_t hlen = (size_t)n + 1;
    size_t pad = 64 - (10 + hlen) % 64;
    hlen += pad;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    return 10 + hlen;
}

int rt_npy_save(const char *path, const RtTensor *t, char *err, size_t errlen) {
    if (rt_dtype_size(t->dtype) == 0 || t->ndim < 0 || t->ndim > RT_MAXDIM)
        return rt_errf(err, errlen, path, "invalid tensor (dtype %d, ndim %d)", t->dtype, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return rt_errf(err, errlen, path, "invalid tensor (negative dimension)");
    size_t nbytes = rt_tensor_nbytes(t);
    if (nbytes > 0 && !t->data)
        return rt_errf(err, errlen, path, "tensor has no data");

    char head[512];
    size_t hn = make_header(head, t);
    RtSaveFile f;
    if (rt_save_begin(&f, path, err, errlen) || rt_save_write(&f, head, hn, err, errlen) ||
        rt_save_write(&f, t->data, nbytes, err, errlen))
        return -1;
    return rt_save_commit(&f, err, errlen);
}

//
// Loading
//

typedef struct {
    RtDType dtype;
    int size;    // bytes per element in the file
    char kind;   // npy_types' kind of the file's elements
    int swap;   // data is in the other byte order
    int fortran;
    int ndim;
    int64_t shape[RT_MAXDIM];
} Header;

typedef struct {
    const char *p, *end;
    char *msg;
    size_t msglen;
} Lex;

static int lex_err(Lex *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->msg, l->msglen, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(Lex *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
        l->p++;
}

static int expect(Lex *l, char c) {
    skip_ws(l);
    if (l->p >= l->end || *l->p != c) {
        char s[2] = {c, 0};
        return lex_err(l, "malformed header: expected '%s'", s);
    }
    l->p++;
    return 0;
}

static int peek(Lex *l, char c) {
    skip_ws(l);
    return l->p < l->end && *l->p == c;
}

// string = "'" chars "'" | '"' chars '"'
static int parse_str(Lex *l, char *buf, size_t n) {
    skip_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
        return lex_err(l, "malformed header: expected a string");
    char q = *l->p++;
    size_t i = 0;
    while (l->p < l->end && *l->p != q) {
        if (i + 1 < n)
            buf[i++] = *l->p;
        l->p++;
    }
    buf[i] = '\0';
    if (l->p >= l->end)
        return lex_err(l, "malformed header: unterminated string");
    l->p++;
    return 0;
}

// bool = "True" | "False"
static int parse_bool(Lex *l, int *v) {
    skip_ws(l);
    size_t left = (size_t)(l->end - l->p);
    if (left >= 4 && !memcmp(l->p, "True", 4))
        return l->p += 4, *v = 1, 0;
    if (left >= 5 && !memcmp(l->p, "False", 5))
        return l->p += 5, *v = 0, 0;
    return lex_err(l, "malformed header: fortran_order is not True or False");
}

// shape = "(" (int ("," int)* ","?)? ")"     an int may end in L (Python 2)
static int parse_shape(Lex *l, Header *h) {
    if (expect(l, '('))
        return -1;
    h->ndim = 0;
    while (!peek(l, ')')) {
        if (l->p >= l->end || *l->p < '0' || *l->p > '9')
            return lex_err(l, "malformed header: bad shape");
        int64_t v = 0;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return lex_err(l, "shape dimension too large");
            v = v * 10 + (*l->p++ - '0');
        }
        if (l->p < l->end && *l->p == 'L')
            l->p++;
        if (h->ndim == RT_MAXDIM)
            return lex_err(l, "more than %d dimensions are not supported", RT_MAXDIM);
        h->shape[h->ndim++] = v;
        if (!peek(l, ','))
            break;
        l->p++;
    }
    return expect(l, ')');
}

static int parse_descr(Lex *l, Header *h) {
    skip_ws(l);
    if (l->p < l->end && *l->p != '\'' && *l->p != '"')
        return lex_err(l, "unsupported dtype: structured arrays are not supported");
    char d[32];
    if (parse_str(l, d, sizeof d))
        return -1;
    char bo = d[0];
    if ((bo == '<' || bo == '>' || bo == '|' || bo == '=') && strlen(d) == 3) {
        for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
            if (strcmp(d + 1, npy_types[i].code) != 0)
                continue;
            h->dtype = npy_types[i].dt;
            h->size = npy_types[i].size;
            h->kind = npy_types[i].kind;
            h->swap = h->size > 1 && bo != '|' && bo != '=' && (bo == '<') != host_le();
            return 0;
        }
    }
    return lex_err(l, "unsupported dtype '%s' (supported: f4, f8, i4, i8, b1; read as wider ones: u1, i1, u2, i2, "
                      "u4, f2)", d);
}

// header = "{" (string ":" value ","?)* "}"   with keys descr, fortran_order, shape
static int parse_header(const char *s, size_t n, Header *h, char *msg, size_t msglen) {
    Lex l = {s, s + n, msg, msglen};
    int seen = 0;
    if (expect(&l, '{'))
        return -1;
    while (!peek(&l, '}')) {
        char key[32];
        if (parse_str(&l, key, sizeof key) || expect(&l, ':'))
            return -1;
        int rc;
        if (!strcmp(key, "descr"))
            rc = parse_descr(&l, h), seen |= 1;
        else if (!strcmp(key, "fortran_order"))
            rc = parse_bool(&l, &h->fortran), seen |= 2;
        else if (!strcmp(key, "shape"))
            rc = parse_shape(&l, h), seen |= 4;
        else
            rc = lex_err(&l, "malformed header: unknown key '%s'", key);
        if (rc)
            return -1;
        if (!peek(&l, ','))
            break;
        l.p++;
    }
    if (expect(&l, '}'))
        return -1;
    if (seen != 7) {
        const char *key = !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape";
        return lex_err(&l, "malformed header: missing '%s'", key);
    }
    return 0;
}

static void byteswap(void *data, uint64_t n, size_t size) {
    uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t tmp = p[a];
            p[a] = p[b];
            p[b] = tmp;
        }
}

// Reads the header; on success the stream is at the start of the data.
static int read_header(FILE *f, const char *path, Header *h, char *err, size_t errlen) {
    uint8_t pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return rt_errf(err, errlen, path, "not a .npy file (bad magic)");
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2)
            return rt_errf(err, errlen, path, "truncated header");
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4)
            return rt_errf(err, errlen, path, "truncated header");
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        return rt_errf(err, errlen, path, "unsupported .npy version %d.%d", pre[6], pre[7]);
    }
    if (hlen > MAX_HEADER)
        return rt_errf(err, errlen, path, "header too large (%zu bytes)", hlen);
    char *s = malloc(hlen + 1);
    if (!s)
        return rt_errf(err, errlen, path, "out of memory");
    if (fread(s, 1, hlen, f) != hlen) {
        free(s);
        return rt_errf(err, errlen, path, "truncated header");
    }
    char msg[160];
    int rc = parse_header(s, hlen, h, msg, sizeof msg);
    free(s);
    if (rc)
        return rt_errf(err, errlen, path, "%s", msg);
    // Fortran order is C order when at most one dimension is longer than 1.
    int big = 0;
    for (int i = 0; i < h->ndim; i++)
        big += h->shape[i] > 1;
    h->fortran &= big > 1;
    return 0;
}

// A Fortran-order array (np.save writes one for x.T of a C-order x): t holds it
// column-major; reorders it to C order. -1 if out of memory.
static int fortran_to_c(RtTensor *t, uint64_t numel) {
    size_t es = rt_dtype_size(t->dtype);
    RtTensor c = rt_tensor_new(t->dtype, t->ndim, t->shape);
    if (!c.data)
        return -1;
    int64_t idx[RT_MAXDIM] = {0}, stride[RT_MAXDIM];   // the file's strides, in elements
    for (int d = 0; d < t->ndim; d++)
        stride[d] = d ? stride[d - 1] * t->shape[d - 1] : 1;
    uint64_t off = 0;
    for (uint64_t i = 0; i < numel; i++) {
        memcpy((uint8_t *)c.data + i * es, (uint8_t *)t->data + off * es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {   // the next C index: the last axis fastest
            off += (uint64_t)stride[d];
            if (++idx[d] < t->shape[d])
                break;
            off -= (uint64_t)(stride[d] * t->shape[d]);
            idx[d] = 0;
        }
    }
    rt_tensor_free(t);
    *t = c;
    return 0;
}

// IEEE half to float, exactly (subnormal halves are normal floats).
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0x1f)
        bits = sign | 0x7f800000u | (m << 13);   // inf, NaN (payload kept)
    else if (e)
        bits = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        bits = sign;
    else {   // subnormal: m * 2^-24, normalized
        int shift = 0;
        while (!(m & 0x400)) m <<= 1, shift++;
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((m & 0x3ff) << 13);
    }
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

// The file's narrow elements (raw, in host order) into t's wider dtype.
static void widen_into(RtTensor *t, const void *raw, uint64_t n, const Header *h) {
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)raw + i * (uint64_t)h->size;
        int64_t v = 0;
        if (h->kind == 'h') {
            uint16_t b;
            memcpy(&b, p, 2);
            ((float *)t->data)[i] = half_to_float(b);
            continue;
        }
        if (h->size == 1) v = h->kind == 'u' ? (int64_t)*p : (int64_t)(int8_t)*p;
        else if (h->size == 2) {
            uint16_t b;
            memcpy(&b, p, 2);
            v = h->kind == 'u' ? (int64_t)b : (int64_t)(int16_t)b;
        } else {
            uint32_t b;
            memcpy(&b, p, 4);
            v = (int64_t)b;   // u4
        }
        if (t->dtype == RT_I32) ((int32_t *)t->data)[i] = (int32_t)v;
        else ((int64_t *)t->data)[i] = v;
    }
}

int rt_npy_load(const char *path, RtTensor *out, char *err, size_t errlen) {
    *out = (RtTensor){0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_errf(err, errlen, path, "%s", strerror(errno));
    int rc = rt_npy_read(f, path, out, err, errlen);
    fclose(f);
    return rc;
}

int rt_npy_read(FILE *f, const char *path, RtTensor *out, char *err, size_t errlen) {
    *out = (RtTensor){0};
    Header h = {0};
    if (read_header(f, path, &h, err, errlen) != 0)
        return -1;
    // Check the size against the file before allocating: a corrupt shape must not
    // become a huge allocation.
    uint64_t numel = 1, maxel = (uint64_t)INT64_MAX / 8;
    for (int i = 0; i < h.ndim; i++) {
        if (h.shape[i] && numel > maxel / (uint64_t)h.shape[i])
            return rt_errf(err, errlen, path, "shape too large");
        numel *= (uint64_t)h.shape[i];
    }
    uint64_t nbytes = numel * (uint64_t)h.size;
    struct stat st;
    long pos = ftell(f);
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && pos >= 0 &&
        (uint64_t)(st.st_size - pos) < nbytes)
        return rt_errf(err, errlen, path, "truncated data: expected %llu bytes, found %llu",
                    (unsigned long long)nbytes, (unsigned long long)(st.st_size - pos));
    RtTensor t = rt_tensor_new(h.dtype, h.ndim, h.shape);
    int widen = (size_t)h.size != rt_dtype_size(h.dtype);   // read into raw, then widened into t
    void *raw = widen ? malloc(nbytes ? (size_t)nbytes : 1) : t.data;
    if (!t.data || !raw) {
        if (widen)
            free(raw);
        rt_tensor_free(&t);
        return rt_errf(err, errlen, path, "cannot allocate %llu bytes", (unsigned long long)nbytes);
    }
    size_t got = fread(raw, 1, (size_t)nbytes, f);
    if (got != nbytes) {
        if (widen) free(raw);
        rt_tensor_free(&t);
        return rt_errf(err, errlen, path, "truncated data: expected %llu bytes, found %zu",
                    (unsigned long long)nbytes, got);
    }
    if (h.swap)
        byteswap(raw, numel, (size_t)h.size);
    if (widen) {
        widen_into(&t, raw, numel, &h);
        free(raw);
    }
    if (h.fortran && fortran_to_c(&t, numel)) {
        rt_tensor_free(&t);
        return rt_errf(err, errlen, path, "cannot allocate %llu bytes", (unsigned long long)nbytes);
    }
    if (t.dtype == RT_BOOL)   // kernels rely on bools being exactly 0 or 1
        for (uint64_t i = 0; i < numel; i++)
            ((uint8_t *)t.data)[i] = ((uint8_t *)t.data)[i] != 0;
    *out = t;
    return 0;
}
