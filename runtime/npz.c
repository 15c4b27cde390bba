// npz.c: NumPy's .npz archives (np.savez, np.savez_compressed): zip files whose
// members are .npy files, stored or deflated. What NumPy writes is read: one
// disk, members found through the central directory (Zip64 too: NumPy forces
// it on every member), no encryption. A member is read whole into memory,
// checked against its CRC-32 and parsed as a .npy file from there.
#include "private.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    char name[256];   // without ".npy"
    uint64_t header, csize, usize;   // local header offset, compressed and real sizes
    uint32_t crc;
    int method;   // 0 stored, 8 deflated
} Member;

typedef struct {
    FILE *f;
    const char *path;
    uint64_t size;   // of the file
    Member *m;
    int n;
} Npz;

static uint32_t le16(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static int read_at(Npz *z, uint64_t off, void *buf, size_t n) {
    return off <= z->size && n <= z->size - off && fseeko(z->f, (off_t)off, SEEK_SET) == 0 &&
                   fread(buf, 1, n, z->f) == n ? 0 : -1;
}

static int bad(Npz *z, char *err, size_t errlen, const char *what) {
    return rt_errf(err, errlen, z->path, "not a readable .npz archive (%s)", what);
}

static int end_record(Npz *z, uint8_t *tail, size_t n, uint64_t *off, uint64_t *len, uint64_t *count, char *err,
                      size_t errlen);

// Where the central directory is and how many entries it has, from the end
// record (or its Zip64 form) in the file's last n bytes, read into tail.
static int find_directory(Npz *z, uint64_t *off, uint64_t *len, uint64_t *count, char *err, size_t errlen) {
    enum { TAIL = 22 + 65535 };   // the end record and the longest comment after it
    size_t n = z->size < TAIL ? (size_t)z->size : TAIL;
    uint8_t *tail = malloc(TAIL);
    if (!tail)
        return rt_errf(err, errlen, z->path, "out of memory");
    int rc = end_record(z, tail, n, off, len, count, err, errlen);
    free(tail);
    return rc;
}

static int end_record(Npz *z, uint8_t *tail, size_t n, uint64_t *off, uint64_t *len, uint64_t *count, char *err,
                      size_t errlen) {
    if (n < 22 || read_at(z, z->size - n, tail, n))
        return bad(z, err, errlen, "too short for a zip file");
    long e = (long)n - 22;   // the end record, after which only its comment follows
    while (e >= 0 && le32(tail + e) != 0x06054b50)
        e--;
    if (e < 0)
        return bad(z, err, errlen, "no zip end record");
    const uint8_t *r = tail + e;
    *count = le16(r + 10), *len = le32(r + 12), *off = le32(r + 16);
    if (*count == 0xffff || *len == 0xffffffff || *off == 0xffffffff) {
        uint8_t loc[20], z64[56];
        uint64_t at = z->size - n + (uint64_t)e;
        if (at < 20 || read_at(z, at - 20, loc, 20) || le32(loc) != 0x07064b50 ||
            read_at(z, le64(loc + 8), z64, 56) || le32(z64) != 0x06064b50)
            return bad(z, err, errlen, "bad Zip64 end record");
        *count = le64(z64 + 32), *len = le64(z64 + 40), *off = le64(z64 + 48);
    }
    if (*off > z->size || *len > z->size - *off || *count > *len / 46)
        return bad(z, err, errlen, "central directory out of bounds");
    return 0;
}

// One central directory entry at p (len bytes left) into m; its size, or 0 if malformed.
static size_t parse_entry(const uint8_t *p, size_t len, Member *m) {
    if (len < 46 || le32(p) != 0x02014b50)
        return 0;
    size_t nlen = le16(p + 28), xlen = le16(p + 30), clen = le16(p + 32), size = 46 + nlen + xlen + clen;
    if (size > len || (le16(p + 8) & 1))   // bit 0: encrypted
        return 0;
    m->method = (int)le16(p + 10);
    m->crc = le32(p + 16);
    m->csize = le32(p + 20), m->usize = le32(p + 24), m->header = le32(p + 42);
    // Zip64: the fields that read all ones follow in its extra field, in this order.
    for (const uint8_t *x = p + 46 + nlen, *xe = x + xlen; x + 4 <= xe; x += 4 + le16(x + 2)) {
        if (le16(x) != 1)
            continue;
        const uint8_t *v = x + 4, *ve = v + le16(x + 2);
        uint64_t *field[3] = {&m->usize, &m->csize, &m->header};
        for (int i = 0; i < 3; i++)
            if (*field[i] == 0xffffffff) {
                if (v + 8 > ve || ve > xe)
                    return 0;
                *field[i] = le64(v), v += 8;
            }
    }
    if (nlen >= 4 && !memcmp(p + 46 + nlen - 4, ".npy", 4))
        nlen -= 4;
    if (nlen >= sizeof m->name)
        nlen = sizeof m->name - 1;
    memcpy(m->name, p + 46, nlen);
    m->name[nlen] = '\0';
    return size;
}

static int npz_open(Npz *z, const char *path, char *err, size_t errlen) {
    *z = (Npz){.path = path};
    if (!(z->f = fopen(path, "rb")))
        return rt_errf(err, errlen, path, "%s", strerror(errno));
    uint64_t off = 0, len = 0, count = 0;
    uint8_t *dir = NULL;
    if (fseeko(z->f, 0, SEEK_END) || (z->size = (uint64_t)ftello(z->f)) == (uint64_t)-1 ||
        find_directory(z, &off, &len, &count, err, errlen))
        goto fail;
    dir = malloc(len ? (size_t)len : 1);
    z->m = calloc(count ? (size_t)count : 1, sizeof *z->m);
    if (!dir || !z->m) {
        rt_errf(err, errlen, path, "out of memory");
        goto fail;
    }
    if (read_at(z, off, dir, (size_t)len)) {
        bad(z, err, errlen, "cannot read the central directory");
        goto fail;
    }
    for (size_t at = 0, k; z->n < (int)count; at += k, z->n++)
        if (!(k = parse_entry(dir + at, (size_t)(len - at), &z->m[z->n]))) {
            bad(z, err, errlen, "malformed central directory entry");
            goto fail;
        }
    free(dir);
    return 0;
fail:
    free(dir);
    free(z->m);
    fclose(z->f);
    z->m = NULL, z->f = NULL;
    return -1;
}

static void npz_close(Npz *z) {
    free(z->m);
    if (z->f)
        fclose(z->f);
}

// Member m's bytes, inflated and checked (free() them), or NULL with err set.
static uint8_t *member_bytes(Npz *z, const Member *m, const char *name, char *err, size_t errlen) {
    uint8_t lh[30];
    if (read_at(z, m->header, lh, 30) || le32(lh) != 0x04034b50) {
        bad(z, err, errlen, "bad local header");
        return NULL;
    }
    uint64_t data = m->header + 30 + le16(lh + 26) + le16(lh + 28);
    if (m->method != 0 && m->method != 8) {
        rt_errf(err, errlen, z->path, "%s: compression method %d (NumPy writes stored or deflated members)", name, m->method);
        return NULL;
    }
    // deflate expands at most ~1032:1: a larger real size is a corrupt entry, not an allocation to try
    if ((m->method == 0 && m->usize != m->csize) || (m->method == 8 && m->usize > 1032 * m->csize + 1024) ||
        m->csize > z->size) {
        bad(z, err, errlen, "member sizes");
        return NULL;
    }
    uint8_t *c = malloc(m->csize ? (size_t)m->csize : 1), *u = m->method ? malloc(m->usize ? (size_t)m->usize : 1) : c;
    if (!c || !u) {
        free(c);
        if (u != c) free(u);
        rt_errf(err, errlen, z->path, "%s: cannot allocate %llu bytes", name, (unsigned long long)m->usize);
        return NULL;
    }
    const char *why = read_at(z, data, c, (size_t)m->csize) ? "truncated member" : NULL;
    if (!why && m->method == 8) {
        z_stream s = {0};
        int rc = m->csize > UINT_MAX || m->usize > UINT_MAX ? Z_BUF_ERROR   // one call reads 4 GiB at most
                 : inflateInit2(&s, -MAX_WBITS);                            // raw deflate: no zlib header
        if (rc == Z_OK) {
            s.next_in = c, s.avail_in = (uInt)m->csize, s.next_out = u, s.avail_out = (uInt)m->usize;
            rc = inflate(&s, Z_FINISH);
            if (rc == Z_STREAM_END && s.total_out != m->usize)
                rc = Z_DATA_ERROR;
            inflateEnd(&s);
        }
        if (rc != Z_STREAM_END)
            why = "corrupt deflated data";
    }
    if (c != u)
        free(c);
    if (!why) {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (uint64_t at = 0; at < m->usize; at += 1u << 30)
            crc = crc32(crc, u + at, (uInt)(m->usize - at < (1u << 30) ? m->usize - at : 1u << 30));
        if ((uint32_t)crc != m->crc)
            why = "CRC mismatch: the archive is corrupt";
    }
    if (why) {
        free(u);
        rt_errf(err, errlen, z->path, "%s: %s", name, why);
        return NULL;
    }
    return u;
}

int rt_npz_list(const char *path, char (**names)[256], int *n, char *err, size_t errlen) {
    Npz z;
    *names = NULL, *n = 0;
    if (npz_open(&z, path, err, errlen))
        return -1;
    if (!(*names = malloc(sizeof **names * (size_t)(z.n ? z.n : 1)))) {
        npz_close(&z);
        return rt_errf(err, errlen, path, "out of memory");
    }
    for (int i = 0; i < z.n; i++)
        memcpy((*names)[i], z.m[i].name, 256);
    *n = z.n;
    npz_close(&z);
    return 0;
}

int rt_npz_load(const char *path, const char *name, RtTensor *out, char *err, size_t errlen) {
    *out = (RtTensor){0};
    Npz z;
    if (npz_open(&z, path, err, errlen))
        return -1;
    int i = 0;
    while (i < z.n && strcmp(z.m[i].name, name))
        i++;
    if (i == z.n) {
        char have[200] = "";
        for (int j = 0, k = 0; j < z.n && k < (int)sizeof have; j++)
            k += snprintf(have + k, sizeof have - (size_t)k, "%s%s", j ? ", " : "", z.m[j].name);
        npz_close(&z);
        return rt_errf(err, errlen, path, "no array named '%s' (it has %s)", name, z.n ? have : "none");
    }
    uint8_t *bytes = member_bytes(&z, &z.m[i], name, err, errlen);
    uint64_t size = z.m[i].usize;
    npz_close(&z);
    if (!bytes)
        return -1;
    char what[1024];
    snprintf(what, sizeof what, "%s:%s", path, name);
    FILE *f = size ? fmemopen(bytes, (size_t)size, "rb") : NULL;
    int rc = f ? rt_npy_read(f, what, out, err, errlen) : rt_errf(err, errlen, what, "not a .npy file (empty)");
    if (f)
        fclose(f);
    free(bytes);
    return rc;
}

int rt_npz_suffix(const char *s, size_t len) { return len >= 4 && memcmp(s + len - 4, ".npz", 4) == 0; }

const char *rt_npz_split(const char *path, char *archive, size_t len) {
    const char *colon = strrchr(path, ':');
    if (!colon || !rt_npz_suffix(path, (size_t)(colon - path)) || (size_t)(colon - path) >= len || access(path, F_OK) == 0)
        return NULL;
    memcpy(archive, path, (size_t)(colon - path));
    archive[colon - path] = 0;
    return colon + 1;
}

int rt_npz_load_one(const char *path, RtTensor *out, char *err, size_t errlen) {
    char archive[4096];
    const char *member = rt_npz_split(path, archive, sizeof archive);
    if (member) return rt_npz_load(archive, member, out, err, errlen);
    char(*names)[256];
    int count, rc;
    memset(out, 0, sizeof *out);
    if (rt_npz_list(path, &names, &count, err, errlen)) return -1;
    if (count == 1) rc = rt_npz_load(path, names[0], out, err, errlen);
    else rc = -1, snprintf(err, errlen, "%s holds %d arrays: name one, as %s:%s", path, count, path, count ? names[0] : "NAME");
    free(names);
    return rc;
}
