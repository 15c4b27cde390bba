// safetensors.c: safetensors files (ckpt.h), with a small strict JSON reader for the header.
#include "ckpt.h"
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER 100000000   // the Python package refuses larger headers too
#define META "__metadata__"

// What Kiln writes (up to T_BOOL), then what converts on load.
enum { T_F32, T_F64, T_I32, T_I64, T_BOOL, T_F16, T_BF16, T_I8, T_U8, T_I16, NTYPES };
static const struct { const char *name; RtDType dt; int size; } st_types[NTYPES] = {
    [T_F32] = {"F32", RT_F32, 4}, [T_F64] = {"F64", RT_F64, 8}, [T_I32] = {"I32", RT_I32, 4},
    [T_I64] = {"I64", RT_I64, 8}, [T_BOOL] = {"BOOL", RT_BOOL, 1}, [T_F16] = {"F16", RT_F32, 2},
    [T_BF16] = {"BF16", RT_F32, 2}, [T_I8] = {"I8", RT_I32, 1}, [T_U8] = {"U8", RT_I32, 1},
    [T_I16] = {"I16", RT_I32, 2},
};

static int host_le(void) {
    uint16_t one = 1;
    return *(uint8_t *)&one == 1;
}

static void byteswap(void *data, size_t n, size_t size) {
    uint8_t *p = data;
    for (size_t i = 0; i < n; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t tmp = p[a];
            p[a] = p[b];
            p[b] = tmp;
        }
}

// RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (len == 0 || i + (size_t)len > n)
            return 0;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A name that appears twice among at(base, 0..n), or NULL. Sorting keeps this
// O(n log n) for models with many tensors. NULL too when out of memory, which only
// skips the check.
typedef const char *(*NameAt)(const void *base, int i);

static const char *find_duplicate(int n, NameAt at, const void *base) {
    const char **v = malloc((n > 0 ? (size_t)n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (int i = 0; i < n; i++)
        v[i] = at(base, i);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (!strcmp(v[i - 1], v[i]))
            dup = v[i];
    free(v);
    return dup;
}

//
// Saving
//

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} Buf;

static void put_n(Buf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void put(Buf *b, const char *s) { put_n(b, s, strlen(s)); }

static void put_int(Buf *b, int64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%lld", (long long)v);
    put(b, s);
}

// A JSON string; bytes from 0x80 up are UTF-8 and pass through.
static void put_json(Buf *b, const char *s) {
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\')
            e[0] = '\\', e[1] = (char)c, e[2] = 0;
        else if (c == '\n' || c == '\t' || c == '\r')
            e[0] = '\\', e[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r', e[2] = 0;
        else if (c < 0x20)
            snprintf(e, sizeof e, "\\u%04x", c);
        else
            e[0] = (char)c, e[1] = 0;
        put(b, e);
    }
    put(b, "\"");
}

static const char *tensor_name_at(const void *base, int i) {
    return ((const RtNamedTensor *)base)[i].name;
}

static const char *meta_key_at(const void *base, int i) {
    return ((const char *const *)base)[2 * i];
}

static int check_tensor(const RtTensor *t, const char *name, const char *path, char *err,
                        size_t errlen) {
    if (!t || (int)t->dtype < 0 || t->dtype >= RT_NDTYPES || t->ndim < 0 || t->ndim > RT_MAXDIM)
        return rt_errf(err, errlen, path, "tensor '%s': invalid tensor", name);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return rt_errf(err, errlen, path, "tensor '%s': negative dimension", name);
        if (t->shape[i] && numel > (uint64_t)INT64_MAX / 8 / (uint64_t)t->shape[i])
            return rt_errf(err, errlen, path, "tensor '%s': shape too large", name);
        numel *= (uint64_t)t->shape[i];
    }
    if (numel > 0 && !t->data)
        return rt_errf(err, errlen, path, "tensor '%s' has no data", name);
    return 0;
}

static int check_names(const char *path, const RtNamedTensor *ts, int n, const char *const *meta,
                       int nmeta, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        const char *s = ts[i].name;
        if (!s)
            return rt_errf(err, errlen, path, "tensor %d has no name", i);
        if (!utf8_valid((const unsigned char *)s, strlen(s)))
            return rt_errf(err, errlen, path, "tensor %d: the name is not valid UTF-8", i);
        if (!strcmp(s, META))
            return rt_errf(err, errlen, path, "'" META "' is not a tensor name");
        if (check_tensor(ts[i].t, s, path, err, errlen))
            return -1;
    }
    for (int i = 0; i < 2 * nmeta; i++) {
        const char *s = meta[i];
        if (!s)
            return rt_errf(err, errlen, path, "metadata %s %d is NULL", i % 2 ? "value" : "key",
                           i / 2);
        if (!utf8_valid((const unsigned char *)s, strlen(s)))
            return rt_errf(err, errlen, path, "metadata %s %d is not valid UTF-8",
                           i % 2 ? "value" : "key", i / 2);
    }
    const char *dup = find_duplicate(n, tensor_name_at, ts);
    if (dup)
        return rt_errf(err, errlen, path, "duplicate tensor name '%s'", dup);
    if ((dup = find_duplicate(nmeta, meta_key_at, meta)))
        return rt_errf(err, errlen, path, "duplicate metadata key '%s'", dup);
    return 0;
}

// The header JSON padded with spaces to a multiple of 8, after its 8-byte length.
static void make_header(Buf *b, const RtNamedTensor *ts, int n, const char *const *meta,
                        int nmeta) {
    put_n(b, "\0\0\0\0\0\0\0\0", 8);
    put(b, "{");
    if (nmeta > 0) {
        put(b, "\"" META "\":{");
        for (int i = 0; i < nmeta; i++) {
            put(b, i ? "," : "");
            put_json(b, meta[2 * i]);
            put(b, ":");
            put_json(b, meta[2 * i + 1]);
        }
        put(b, n ? "}," : "}");
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const RtTensor *t = ts[i].t;
        put(b, i ? "," : "");
        put_json(b, ts[i].name);
        put(b, ":{\"dtype\":\"");
        for (int k = 0; k <= T_BOOL; k++)
            if (st_types[k].dt == t->dtype)
                put(b, st_types[k].name);
        put(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            put(b, d ? "," : "");
            put_int(b, t->shape[d]);
        }
        put(b, "],\"data_offsets\":[");
        put_int(b, off);
        put(b, ",");
        off += (int64_t)rt_tensor_nbytes(t);
        put_int(b, off);
        put(b, "]}");
    }
    put(b, "}");
    while (b->n % 8)
        put(b, " ");
    uint64_t len = b->n - 8;
    for (int i = 0; i < 8 && !b->oom; i++)
        b->p[i] = (char)(len >> (8 * i));
}

// Tensor data in little-endian order, swapped through a buffer on a big-endian host.
static int write_data(RtSaveFile *f, const RtTensor *t, char *err, size_t errlen) {
    size_t size = rt_dtype_size(t->dtype), nbytes = rt_tensor_nbytes(t);
    if (host_le() || size == 1)
        return rt_save_write(f, t->data, nbytes, err, errlen);
    char buf[1 << 16];
    for (size_t at = 0; at < nbytes; at += sizeof buf) {
        size_t k = nbytes - at < sizeof buf ? nbytes - at : sizeof buf;
        memcpy(buf, (const char *)t->data + at, k);
        byteswap(buf, k / size, size);
        if (rt_save_write(f, buf, k, err, errlen))
            return -1;
    }
    return 0;
}

int rt_safetensors_save(const char *path, const RtNamedTensor *ts, int n, const char *const *meta,
                        int nmeta, char *err, size_t errlen) {
    if (n < 0 || nmeta < 0 || (n > 0 && !ts) || (nmeta > 0 && !meta))
        return rt_errf(err, errlen, path, "invalid arguments (n %d, nmeta %d)", n, nmeta);
    if (check_names(path, ts, n, meta, nmeta, err, errlen))
        return -1;
    Buf b = {0};
    make_header(&b, ts, n, meta, nmeta);
    if (b.oom) {
        free(b.p);
        return rt_errf(err, errlen, path, "out of memory");
    }
    RtSaveFile f;
    int rc = rt_save_begin(&f, path, err, errlen) || rt_save_write(&f, b.p, b.n, err, errlen);
    free(b.p);
    for (int i = 0; i < n && !rc; i++)
        rc = write_data(&f, ts[i].t, err, errlen);
    return rc ? -1 : rt_save_commit(&f, err, errlen);
}

//
// Loading: the header
//

typedef struct {
    char *name;
    int type;   // index into st_types
    int ndim;
    int64_t shape[RT_MAXDIM];
    int64_t begin, end;
} Entry;

typedef struct {
    const char *start, *p, *end;   // the header text
    char *msg;   // the error, without the path
    size_t msglen;
    Entry *e;
    int n, cap;
    char **meta;   // key, value, key, value, ...
    int nmeta, metacap;
    int seen_meta;
} Parser;

__attribute__((format(printf, 2, 3))) static int perr(Parser *ps, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->msg, ps->msglen, fmt, ap);
    va_end(ap);
    return -1;
}

// A syntax error, or a value of the wrong kind, at the current position.
static int expected(Parser *ps, const char *what) {
    long at = 8 + (long)(ps->p - ps->start);
    if (ps->p >= ps->end)
        return perr(ps, "bad header at byte %ld: expected %s, found the end", at, what);
    unsigned char c = (unsigned char)*ps->p;
    if (c >= 0x20 && c < 0x7f)
        return perr(ps, "bad header at byte %ld: expected %s, found '%c'", at, what, c);
    return perr(ps, "bad header at byte %ld: expected %s, found byte 0x%02x", at, what, c);
}

static void skip_ws(Parser *ps) {
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

// Consumes c after optional whitespace, if it is there.
static int accept(Parser *ps, char c) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c)
        return ps->p++, 1;
    return 0;
}

static int expect(Parser *ps, char c) {
    if (accept(ps, c))
        return 0;
    char what[4] = {'\'', c, '\'', 0};
    return expected(ps, what);
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

static char *put_utf8(char *q, uint32_t cp) {
    if (cp < 0x80) {
        *q++ = (char)cp;
    } else if (cp < 0x800) {
        *q++ = (char)(0xc0 | cp >> 6);
        *q++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *q++ = (char)(0xe0 | cp >> 12);
        *q++ = (char)(0x80 | (cp >> 6 & 0x3f));
        *q++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *q++ = (char)(0xf0 | cp >> 18);
        *q++ = (char)(0x80 | (cp >> 12 & 0x3f));
        *q++ = (char)(0x80 | (cp >> 6 & 0x3f));
        *q++ = (char)(0x80 | (cp & 0x3f));
    }
    return q;
}

// After the backslash of \uXXXX (and of a following low surrogate): one code point.
static int parse_u(Parser *ps, uint32_t *cp) {
    if (ps->end - ps->p < 5 || hex4(ps->p + 1, cp))
        return expected(ps, "'u' and 4 hex digits");
    ps->p += 5;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return ps->p -= 6, expected(ps, "a high surrogate before a low one");
    if (*cp >= 0xd800 && *cp <= 0xdbff) {
        uint32_t lo;
        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
            lo < 0xdc00 || lo > 0xdfff)
            return expected(ps, "a low surrogate (\\uDC00 to \\uDFFF)");
        ps->p += 6;
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (*cp == 0)
        return ps->p -= 6, perr(ps, "bad header at byte %ld: \\u0000 in a string is not supported",
                                8 + (long)(ps->p - ps->start));
    return 0;
}

// string = '"' (char | '\' escape)* '"'     -> a malloc'd, decoded copy
// The decoded text is never longer than the quoted one, so one allocation does.
static int parse_string(Parser *ps, char **out) {
    *out = NULL;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return expected(ps, "a string");
    const char *q = ps->p + 1;
    while (q < ps->end && *q != '"')
        q += *q == '\\' ? 2 : 1;
    if (q >= ps->end)
        return expected(ps, "a closing '\"'");
    char *s = malloc((size_t)(q - ps->p)), *w = s;
    if (!s)
        return perr(ps, "out of memory");
    ps->p++;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            free(s);
            return expected(ps, "no control characters in a string");
        }
        if (c != '\\') {
            *w++ = (char)c, ps->p++;
            continue;
        }
        ps->p++;
        const char *esc = strchr("\"\\/bfnrt", *ps->p);
        if (*ps->p && esc) {
            *w++ = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
            ps->p++;
            continue;
        }
        uint32_t cp;
        if (*ps->p != 'u') {
            free(s);
            return expected(ps, "an escape (one of \"\\/bfnrtu)");
        }
        if (parse_u(ps, &cp)) {
            free(s);
            return -1;
        }
        w = put_utf8(w, cp);
    }
    ps->p++;
    *w = '\0';
    *out = s;
    return 0;
}

// integer = "-"? ("0" | [1-9][0-9]*)      no fraction, no exponent
static int parse_int(Parser *ps, int64_t *v) {
    skip_ws(ps);
    const char *p = ps->p;
    int neg = p < ps->end && *p == '-';
    p += neg;
    if (p >= ps->end || *p < '0' || *p > '9')
        return expected(ps, "an integer");
    uint64_t u = 0;
    const char *digits = p;
    for (; p < ps->end && *p >= '0' && *p <= '9'; p++) {
        if (u > ((uint64_t)INT64_MAX - 9) / 10)
            return perr(ps, "bad header at byte %ld: integer too large",
                        8 + (long)(ps->p - ps->start));
        u = u * 10 + (uint64_t)(*p - '0');
    }
    if ((*digits == '0' && p - digits > 1) ||
        (p < ps->end && (*p == '.' || *p == 'e' || *p == 'E')))
        return expected(ps, "an integer (no leading zeros, fraction or exponent)");
    ps->p = p;
    *v = neg ? -(int64_t)u : (int64_t)u;
    return 0;
}

// ints = "[" (integer ("," integer)*)? "]"      at most max of them
static int parse_ints(Parser *ps, int64_t *v, int max, int *n, const char *name,
                      const char *what, const char *unit) {
    if (expect(ps, '['))
        return -1;
    *n = 0;
    if (accept(ps, ']'))
        return 0;
    do {
        if (*n == max)
            return perr(ps, "tensor '%s': %s has more than %d %s", name, what, max, unit);
        if (parse_int(ps, &v[(*n)++]))
            return -1;
    } while (accept(ps, ','));
    return expect(ps, ']');
}

// metadata = "{" (string ":" string ("," string ":" string)*)? "}"
static int parse_meta(Parser *ps) {
    if (ps->seen_meta++)
        return perr(ps, "'" META "' appears twice");
    if (expect(ps, '{'))
        return -1;
    if (accept(ps, '}'))
        return 0;
    do {
        if (ps->nmeta == ps->metacap) {
            int cap = ps->metacap ? 2 * ps->metacap : 8;
            char **m = realloc(ps->meta, (size_t)cap * 2 * sizeof *m);
            if (!m)
                return perr(ps, "out of memory");
            ps->meta = m, ps->metacap = cap;
        }
        char **kv = &ps->meta[2 * ps->nmeta];
        if (parse_string(ps, &kv[0]))
            return -1;
        kv[1] = NULL;
        ps->nmeta++;   // counted now, so that the key is freed on any error
        if (expect(ps, ':') || parse_string(ps, &kv[1]))
            return -1;
    } while (accept(ps, ','));
    return expect(ps, '}');
}

static int parse_dtype(Parser *ps, Entry *e) {
    char *s;
    if (parse_string(ps, &s))
        return -1;
    e->type = -1;
    for (int i = 0; i < NTYPES; i++)
        if (!strcmp(s, st_types[i].name))
            e->type = i;
    if (e->type < 0)
        perr(ps, "tensor '%s': unsupported dtype '%.40s' (supported: F32, F64, I32, I64, BOOL, "
                 "F16, BF16, I8, U8, I16)", e->name, s);
    free(s);
    return e->type < 0 ? -1 : 0;
}

// entry = "{" key ":" value ("," key ":" value)* "}"    each of dtype, shape,
// data_offsets exactly once
static int parse_entry(Parser *ps, Entry *e) {
    static const char *keys[3] = {"dtype", "shape", "data_offsets"};
    int seen = 0;
    if (expect(ps, '{'))
        return -1;
    do {
        char *key;
        if (parse_string(ps, &key))
            return -1;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]))
            k++;
        if (k == 3 || seen & 1 << k) {
            perr(ps, "tensor '%s': %s key '%.40s'", e->name, k == 3 ? "unknown" : "duplicate",
                 key);
            free(key);
            return -1;
        }
        free(key);
        seen |= 1 << k;
        int64_t off[2];
        int n, rc = expect(ps, ':');
        if (!rc && k == 0)
            rc = parse_dtype(ps, e);
        else if (!rc && k == 1)
            rc = parse_ints(ps, e->shape, RT_MAXDIM, &e->ndim, e->name, "shape", "dimensions");
        else if (!rc && k == 2)
            rc = parse_ints(ps, off, 2, &n, e->name, "data_offsets", "entries");
        if (rc)
            return -1;
        if (k == 2 && n != 2)
            return perr(ps, "tensor '%s': data_offsets needs 2 entries, not %d", e->name, n);
        if (k == 2)
            e->begin = off[0], e->end = off[1];
    } while (accept(ps, ','));
    if (expect(ps, '}'))
        return -1;
    for (int k = 0; k < 3; k++)
        if (!(seen & 1 << k))
            return perr(ps, "tensor '%s': missing '%s'", e->name, keys[k]);
    return 0;
}

// header = "{" (string ":" (metadata | entry) ("," ...)*)? "}"     then only whitespace
static int parse_header(Parser *ps) {
    if (expect(ps, '{'))
        return -1;
    if (!accept(ps, '}')) {
        do {
            char *name;
            if (parse_string(ps, &name))
                return -1;
            if (!strcmp(name, META)) {
                free(name);
                if (expect(ps, ':') || parse_meta(ps))
                    return -1;
                continue;
            }
            if (ps->n == ps->cap) {
                int cap = ps->cap ? 2 * ps->cap : 16;
                Entry *e = realloc(ps->e, (size_t)cap * sizeof *e);
                if (!e) {
                    free(name);
                    return perr(ps, "out of memory");
                }
                ps->e = e, ps->cap = cap;
            }
            Entry *e = &ps->e[ps->n++];
            *e = (Entry){.name = name};
            if (expect(ps, ':') || parse_entry(ps, e))
                return -1;
        } while (accept(ps, ','));
        if (expect(ps, '}'))
            return -1;
    }
    skip_ws(ps);
    if (ps->p < ps->end)
        return expected(ps, "only whitespace after the header object");
    return 0;
}

//
// Loading: checks and data
//

static int cmp_offsets(const void *a, const void *b) {
    const Entry *x = *(Entry *const *)a, *y = *(Entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void put_shape(char *s, size_t n, const Entry *e) {
    int k = snprintf(s, n, "[");
    for (int d = 0; d < e->ndim && (size_t)k < n; d++)
        k += snprintf(s + k, n - (size_t)k, d ? ", %lld" : "%lld", (long long)e->shape[d]);
    if ((size_t)k < n)
        snprintf(s + k, n - (size_t)k, "]");
}

static int check_entry(Parser *ps, const Entry *e, int64_t datalen) {
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return perr(ps, "tensor '%s': negative dimension in the shape", e->name);
        if (e->shape[d] && numel > (uint64_t)INT64_MAX / 8 / (uint64_t)e->shape[d])
            return perr(ps, "tensor '%s': shape too large", e->name);
        numel *= (uint64_t)e->shape[d];
    }
    const char *dt = st_types[e->type].name;
    long long b = e->begin, x = e->end;
    if (b < 0 || x < b)
        return perr(ps, "tensor '%s': data_offsets [%lld, %lld] are not a range", e->name, b, x);
    if (x > datalen)
        return perr(ps, "tensor '%s': data_offsets [%lld, %lld] past the end of the file "
                        "(%lld bytes of data)", e->name, b, x, (long long)datalen);
    uint64_t need = numel * (uint64_t)st_types[e->type].size;
    if ((uint64_t)(x - b) != need) {
        char shape[200];
        put_shape(shape, sizeof shape, e);
        return perr(ps, "tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, but %s of shape "
                        "%s needs %llu", e->name, b, x, x - b, dt, shape, (unsigned long long)need);
    }
    return 0;
}

static const char *entry_name_at(const void *base, int i) {
    return ((const Entry *)base)[i].name;
}

static int check_entries(Parser *ps, int64_t datalen) {
    for (int i = 0; i < ps->n; i++)
        if (check_entry(ps, &ps->e[i], datalen))
            return -1;
    Entry **v = malloc((ps->n > 0 ? (size_t)ps->n : 1) * sizeof *v);
    if (!v)
        return perr(ps, "out of memory");
    for (int i = 0; i < ps->n; i++)
        v[i] = &ps->e[i];
    qsort(v, (size_t)ps->n, sizeof *v, cmp_offsets);
    int rc = 0;
    for (int i = 1; i < ps->n && !rc; i++) {
        const Entry *a = v[i - 1], *b = v[i];
        if (b->begin < a->end)
            rc = perr(ps, "tensors '%s' and '%s' overlap (data_offsets [%lld, %lld] and "
                          "[%lld, %lld])", a->name, b->name, (long long)a->begin,
                      (long long)a->end, (long long)b->begin, (long long)b->end);
    }
    free(v);
    if (rc)
        return -1;
    const char *dup = find_duplicate(ps->n, entry_name_at, ps->e);
    if (dup)
        return perr(ps, "tensor '%s' appears twice", dup);
    if ((dup = find_duplicate(ps->nmeta, meta_key_at, ps->meta)))
        return perr(ps, "metadata key '%s' appears twice", dup);
    return 0;
}

static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {   // zero or subnormal: man * 2^-24, exact
        f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    uint32_t bits = sign | (exp == 31 ? 0x7f800000 | man << 13 : (exp + 112) << 23 | man << 13);
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

// The raw little-endian bytes of a converted dtype into t (f32 or i32).
static void convert(const uint8_t *src, int type, RtTensor *t, int64_t numel) {
    float *f = t->data;
    int32_t *v = t->data;
    for (int64_t i = 0; i < numel; i++) {
        if (type == T_F16) {
            f[i] = half_to_f32(le16(src + 2 * i));
        } else if (type == T_BF16) {   // the top half of an f32
            uint32_t bits = (uint32_t)le16(src + 2 * i) << 16;
            memcpy(&f[i], &bits, 4);
        } else {
            v[i] = type == T_I16 ? (int16_t)le16(src + 2 * i) : type == T_I8 ? (int8_t)src[i]
                                                                               : src[i];
        }
    }
}

static int read_at(int fd, void *buf, size_t n, int64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = 0;   // the end of the file
        if (r <= 0)
            return -1;
        p += r, off += r, n -= (size_t)r;
    }
    return 0;
}

static int load_tensor(Parser *ps, int fd, int64_t base, const Entry *e, RtTensor *t) {
    const int type = e->type;
    *t = rt_tensor_new(st_types[type].dt, e->ndim, e->shape);
    int64_t numel = rt_tensor_numel(t);
    size_t nbytes = (size_t)(e->end - e->begin);
    if (!t->data)
        return perr(ps, "tensor '%s': cannot allocate %zu bytes", e->name, rt_tensor_nbytes(t));
    void *raw = type <= T_BOOL ? t->data : malloc(nbytes ? nbytes : 1);
    if (!raw)
        return perr(ps, "tensor '%s': out of memory", e->name);
    int rc = read_at(fd, raw, nbytes, base + e->begin);
    if (rc)
        perr(ps, "tensor '%s': read failed: %s", e->name,
             errno ? strerror(errno) : "the file is shorter than it was");
    else if (type > T_BOOL)
        convert(raw, type, t, numel);
    else if (st_types[type].size > 1 && !host_le())
        byteswap(t->data, (size_t)numel, (size_t)st_types[type].size);
    else if (t->dtype == RT_BOOL)   // kernels rely on bools being exactly 0 or 1
        for (int64_t i = 0; i < numel; i++)
            ((uint8_t *)t->data)[i] = ((uint8_t *)t->data)[i] != 0;
    if (raw != t->data)
        free(raw);
    return rc;
}

static void free_parser(Parser *ps) {
    for (int i = 0; i < ps->n; i++)
        free(ps->e[i].name);
    free(ps->e);
    for (int i = 0; i < 2 * ps->nmeta; i++)
        free(ps->meta[i]);
    free(ps->meta);
}

// Moves the parsed names and metadata into out and reads the data.
static int load_data(Parser *ps, int fd, int64_t base, RtTensorFile *out) {
    int n = ps->n;
    out->names = calloc(n > 0 ? (size_t)n : 1, sizeof *out->names);
    out->t = calloc(n > 0 ? (size_t)n : 1, sizeof *out->t);
    out->meta_keys = calloc(ps->nmeta > 0 ? (size_t)ps->nmeta : 1, sizeof(char *));
    out->meta_vals = calloc(ps->nmeta > 0 ? (size_t)ps->nmeta : 1, sizeof(char *));
    if (!out->names || !out->t || !out->meta_keys || !out->meta_vals)
        return perr(ps, "out of memory");
    for (int i = 0; i < ps->nmeta; i++) {
        out->meta_keys[i] = ps->meta[2 * i], out->meta_vals[i] = ps->meta[2 * i + 1];
        ps->meta[2 * i] = ps->meta[2 * i + 1] = NULL;
    }
    out->nmeta = ps->nmeta;
    for (int i = 0; i < n; i++) {
        out->names[i] = ps->e[i].name;
        ps->e[i].name = NULL;
        out->n = i + 1;
        if (load_tensor(ps, fd, base, &ps->e[i], &out->t[i]))
            return -1;
    }
    return 0;
}

// The 8-byte length and the header text; *text is malloc'd.
static int read_header(int fd, const char *path, int64_t size, char **text, uint64_t *len,
                       char *err, size_t errlen) {
    uint8_t b[8];
    if (size < 8)
        return rt_errf(err, errlen, path, "truncated header: the file is %lld bytes long, "
                       "less than the 8-byte header length", (long long)size);
    if (read_at(fd, b, 8, 0))
        return rt_errf(err, errlen, path, "read failed: %s", strerror(errno));
    *len = 0;
    for (int i = 7; i >= 0; i--)
        *len = *len << 8 | b[i];
    if (*len > MAX_HEADER)
        return rt_errf(err, errlen, path, "header length %llu is over the limit of %d bytes "
                       "(not a safetensors file?)", (unsigned long long)*len, MAX_HEADER);
    if ((int64_t)*len > size - 8)
        return rt_errf(err, errlen, path, "truncated header: %llu bytes, but %lld follow the "
                       "header length", (unsigned long long)*len, (long long)(size - 8));
    *text = malloc(*len ? *len : 1);
    if (!*text)
        return rt_errf(err, errlen, path, "out of memory");
    if (read_at(fd, *text, *len, 8)) {
        free(*text);
        return rt_errf(err, errlen, path, "read failed: %s", strerror(errno));
    }
    if (!utf8_valid((const unsigned char *)*text, *len)) {
        free(*text);
        return rt_errf(err, errlen, path, "bad header: not valid UTF-8");
    }
    return 0;
}

static int load_fd(int fd, const char *path, RtTensorFile *out, char *err, size_t errlen);

int rt_safetensors_load(const char *path, RtTensorFile *out, char *err, size_t errlen) {
    *out = (RtTensorFile){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rt_errf(err, errlen, path, "%s", strerror(errno));
    return load_fd(fd, path, out, err, errlen);
}

// An image in memory (weights embedded in a built binary) goes through a memory file, so
// it is read and checked by the same code as a file on disk.
int rt_safetensors_load_mem(const void *p, size_t n, const char *name, RtTensorFile *out,
                            char *err, size_t errlen) {
    *out = (RtTensorFile){0};
    int fd = memfd_create("kiln-weights", MFD_CLOEXEC);
    if (fd < 0)
        return rt_errf(err, errlen, name, "memfd_create: %s", strerror(errno));
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0) {
            close(fd);
            return rt_errf(err, errlen, name, "writing a memory file: %s", strerror(errno));
        }
        done += (size_t)w;
    }
    return load_fd(fd, name, out, err, errlen);
}

// Reads and closes fd.
static int load_fd(int fd, const char *path, RtTensorFile *out, char *err, size_t errlen) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rt_errf(err, errlen, path, "not a regular file");
    }
    char *text = NULL;
    uint64_t len = 0;
    if (read_header(fd, path, st.st_size, &text, &len, err, errlen)) {
        close(fd);
        return -1;
    }
    char msg[512];
    Parser ps = {.start = text, .p = text, .end = text + len, .msg = msg, .msglen = sizeof msg};
    int rc = parse_header(&ps);
    if (!rc)
        rc = check_entries(&ps, st.st_size - 8 - (int64_t)len);
    if (!rc)
        rc = load_data(&ps, fd, 8 + (int64_t)len, out);
    close(fd);
    free(text);
    free_parser(&ps);
    if (rc) {
        rt_tensorfile_free(out);
        return rt_errf(err, errlen, path, "%s", msg);
    }
    return 0;
}

const RtTensor *rt_tensorfile_find(const RtTensorFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name))
            return &f->t[i];
    return NULL;
}

const char *rt_tensorfile_meta(const RtTensorFile *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key))
            return f->meta_vals[i];
    return NULL;
}

void rt_tensorfile_free(RtTensorFile *f) {
    for (int i = 0; i < f->n; i++) {
        free(f->names[i]);
        rt_tensor_free(&f->t[i]);
    }
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->names);
    free(f->t);
    free(f->meta_keys);
    free(f->meta_vals);
    *f = (RtTensorFile){0};
}
