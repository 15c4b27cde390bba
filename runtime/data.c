// data.c: data sets in memory: IDX and CIFAR-10 files, columns of .npy files.
// IDX (LeCun's MNIST format): bytes 0 0 TYPE RANK, then RANK big-endian u32 dimensions,
// then the elements, big-endian, in C order.
#include "data.h"
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_BYTES (INT64_MAX / 16)   // far past any memory; keeps size arithmetic exact
#define FIRST_CHUNK ((int64_t)1 << 26)   // Fashion-MNIST's 47 MB fit in the first read
#define CIFAR_IMAGE 3072
#define CIFAR_RECORD (1 + CIFAR_IMAGE)

// A formatted message in err; -1 (the loaders' failure value). csv.c shares it.
int rt_data_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void rt_data_add_col(RtDataset *ds, const char *name, RtTensor t) {
    RtColumn *c = &ds->col[ds->ncol++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->t = t;
}

void rt_dataset_free(RtDataset *ds) {
    if (!ds)
        return;
    for (int i = 0; i < ds->ncol && i < RT_DATA_MAXCOL; i++)
        rt_tensor_free(&ds->col[i].t);
    *ds = (RtDataset){0};
}

// lut[v] = v / 255 when normalizing, else v: a lookup is cheaper than a division per pixel
// and gives the same bits.
static void byte_table(float lut[256], int normalize) {
    for (int v = 0; v < 256; v++)
        lut[v] = normalize ? (float)v / 255.0f : (float)v;
}

//
// IDX
//

static const struct { uint8_t code; int size; const char *name; } idx_types[] = {
    {0x08, 1, "u8"}, {0x09, 1, "i8"}, {0x0B, 2, "i16"}, {0x0C, 4, "i32"}, {0x0D, 4, "f32"},
    {0x0E, 8, "f64"},
};

typedef struct {
    uint8_t type;   // the IDX type code
    int size;       // bytes per element
    const char *tname;
    int ndim;
    int64_t shape[RT_MAXDIM];
    int64_t numel;
    uint8_t *data;   // numel * size bytes, as stored (big-endian)
} Idx;

// Reads up to n bytes; returns how many (fewer at the end of the stream), or -1 on a zlib
// error with its message in *why.
static int64_t gz_read(gzFile f, void *buf, int64_t n, const char **why) {
    int64_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1 << 30) ? 1u << 30 : (unsigned)(n - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int e;
            *why = gzerror(f, &e);
            const char *colon = strstr(*why, ": ");
            if ((*why)[0] == '<' && colon)   // "<fd:3>: incorrect data check"
                *why = colon + 2;
            return -1;
        }
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

static int idx_header(gzFile f, const char *path, Idx *x, char *err, size_t errlen) {
    const char *why = "";
    uint8_t m[4 + 4 * RT_MAXDIM];
    int64_t got = gz_read(f, m, 4, &why);
    if (got < 0)
        return rt_data_fail(err, errlen, "%s: corrupt gzip data: %s", path, why);
    if (got == 0)
        return rt_data_fail(err, errlen, "%s: empty file", path);
    if (got < 4)
        return rt_data_fail(err, errlen, "%s: truncated header (expected 4 bytes, found %lld)", path,
                    (long long)got);
    if (m[0] != 0 || m[1] != 0)
        return rt_data_fail(err, errlen,
                    "%s: bad magic number 0x%02X%02X%02X%02X (an IDX file starts 0x0000TTRR, "
                    "TT the type, RR the rank)", path, m[0], m[1], m[2], m[3]);
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == m[2])
            x->type = m[2], x->size = idx_types[i].size, x->tname = idx_types[i].name;
    if (!x->size)
        return rt_data_fail(err, errlen,
                    "%s: unsupported IDX type 0x%02X (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or "
                    "0x0E)", path, m[2]);
    if (m[3] < 1 || m[3] > RT_MAXDIM)
        return rt_data_fail(err, errlen, "%s: rank %d is not supported (1 to %d)", path, m[3],
                    RT_MAXDIM);
    x->ndim = m[3];
    int64_t want = 4 * (int64_t)x->ndim;
    got = gz_read(f, m + 4, want, &why);
    if (got < 0)
        return rt_data_fail(err, errlen, "%s: corrupt gzip data: %s", path, why);
    if (got < want)
        return rt_data_fail(err, errlen, "%s: truncated header (expected %lld bytes, found %lld)", path,
                    (long long)(4 + want), (long long)(4 + got));
    x->numel = 1;
    for (int i = 0; i < x->ndim; i++) {
        const uint8_t *d = m + 4 + 4 * i;
        x->shape[i] = (int64_t)d[0] << 24 | d[1] << 16 | d[2] << 8 | d[3];
        if (x->shape[i] && x->numel > MAX_BYTES / x->size / x->shape[i])
            return rt_data_fail(err, errlen, "%s: shape too large", path);
        x->numel *= x->shape[i];
    }
    return 0;
}

// Reads the data after the header. The buffer grows as bytes arrive, so a corrupt header
// that promises terabytes costs no memory before the file runs out.
static int idx_data(gzFile f, const char *path, Idx *x, char *err, size_t errlen) {
    const char *why = "";
    int64_t want = x->numel * x->size, cap = want < FIRST_CHUNK ? want : FIRST_CHUNK, have = 0;
    x->data = malloc(cap > 0 ? (size_t)cap : 1);
    for (;;) {
        if (!x->data)
            return rt_data_fail(err, errlen, "%s: out of memory reading %lld bytes", path,
                        (long long)want);
        int64_t got = gz_read(f, x->data + have, cap - have, &why);
        if (got < 0)
            return rt_data_fail(err, errlen, "%s: corrupt gzip data after %lld bytes of data: %s", path,
                        (long long)have, why);
        have += got;
        if (have < cap || cap == want)
            break;
        cap = cap > want / 2 ? want : 2 * cap;
        uint8_t *p = realloc(x->data, (size_t)cap);
        if (!p)
            free(x->data);
        x->data = p;
    }
    int hlen = 4 + 4 * x->ndim;
    if (have < want)
        return rt_data_fail(err, errlen,
                    "%s: truncated data (expected %lld bytes after the %d-byte header, found %lld)",
                    path, (long long)want, hlen, (long long)have);
    // One more byte: there must be none, and reading to the end checks the gzip CRC.
    uint8_t extra;
    int64_t got = gz_read(f, &extra, 1, &why);
    if (got < 0)
        return rt_data_fail(err, errlen, "%s: corrupt gzip data: %s", path, why);
    if (got > 0)
        return rt_data_fail(err, errlen,
                    "%s: bytes after the data (the header says %lld bytes after %d of header)",
                    path, (long long)want, hlen);
    return 0;
}

// Reads an IDX file, plain or gzip-compressed (gzread passes a plain file through).
static int idx_read(const char *path, Idx *x, char *err, size_t errlen) {
    *x = (Idx){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rt_data_fail(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return rt_data_fail(err, errlen, "%s: is a directory", path);
    }
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return rt_data_fail(err, errlen, "%s: out of memory", path);
    }
    gzbuffer(f, 1 << 17);
    int rc = idx_header(f, path, x, err, errlen);
    if (rc == 0)
        rc = idx_data(f, path, x, err, errlen);
    gzclose(f);
    if (rc) {
        free(x->data);
        x->data = NULL;
    }
    return rc;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void idx_to_f32(const Idx *x, float *out, int normalize) {
    const uint8_t *p = x->data;
    float lut[256];
    byte_table(lut, normalize);
    for (int64_t i = 0; i < x->numel; i++, p += x->size) {
        switch (x->type) {
        case 0x08: out[i] = lut[*p]; break;
        case 0x09: out[i] = (float)(int8_t)*p; break;
        case 0x0B: out[i] = (float)(int16_t)(p[0] << 8 | p[1]); break;
        case 0x0C: out[i] = (float)(int32_t)be32(p); break;
        case 0x0D: {
            uint32_t b = be32(p);
            memcpy(&out[i], &b, 4);
            break;
        }
        default: {
            uint64_t b = (uint64_t)be32(p) << 32 | be32(p + 4);
            double d;
            memcpy(&d, &b, 8);
            out[i] = (float)d;
        }
        }
    }
}

static void idx_to_i32(const Idx *x, int32_t *out) {
    const uint8_t *p = x->data;
    for (int64_t i = 0; i < x->numel; i++, p += x->size)
        out[i] = x->type == 0x08   ? *p
                 : x->type == 0x09 ? (int8_t)*p
                 : x->type == 0x0B ? (int16_t)(p[0] << 8 | p[1])
                                   : (int32_t)be32(p);
}

static int idx_labels_ok(const Idx *im, const Idx *lb, const char *images, const char *labels,
                         char *err, size_t errlen) {
    if (lb->ndim != 1)
        return rt_data_fail(err, errlen, "%s: labels must have rank 1, found rank %d", labels, lb->ndim);
    if (lb->type == 0x0D || lb->type == 0x0E)
        return rt_data_fail(err, errlen, "%s: unsupported dtype %s for labels (expected an integer type)",
                    labels, lb->tname);
    if (lb->shape[0] != im->shape[0])
        return rt_data_fail(err, errlen, "%s: label count %lld differs from image count %lld in %s",
                    labels, (long long)lb->shape[0], (long long)im->shape[0], images);
    return 0;
}

static int idx_build(const Idx *im, const Idx *lb, int normalize, RtDataset *ds,
                     const char *path, char *err, size_t errlen) {
    RtTensor t = rt_tensor_new(RT_F32, im->ndim, im->shape);
    if (!t.data)
        return rt_data_fail(err, errlen, "%s: out of memory for %lld images", path,
                    (long long)im->shape[0]);
    idx_to_f32(im, t.data, normalize);
    rt_data_add_col(ds, "images", t);
    if (lb->data) {
        RtTensor l = rt_tensor_new(RT_I32, 1, lb->shape);
        if (!l.data)
            return rt_data_fail(err, errlen, "%s: out of memory", path);
        idx_to_i32(lb, l.data);
        rt_data_add_col(ds, "labels", l);
    }
    ds->n = im->shape[0];
    return 0;
}

int rt_data_idx(const char *images, const char *labels, int normalize, RtDataset *out,
                char *err, size_t errlen) {
    *out = (RtDataset){0};
    if (!images)
        return rt_data_fail(err, errlen, "rt_data_idx: no images file given");
    Idx im, lb = {0};
    RtDataset ds = {0};
    int rc = idx_read(images, &im, err, errlen);
    if (rc == 0 && labels)
        rc = idx_read(labels, &lb, err, errlen);
    if (rc == 0 && labels)
        rc = idx_labels_ok(&im, &lb, images, labels, err, errlen);
    if (rc == 0)
        rc = idx_build(&im, &lb, normalize, &ds, images, err, errlen);
    free(im.data);
    free(lb.data);
    if (rc) {
        rt_dataset_free(&ds);
        return -1;
    }
    snprintf(ds.source, sizeof ds.source, "%s", images);
    *out = ds;
    return 0;
}

// DIR/NAME, else DIR/NAME.gz, into buf; -1 when neither exists.
static int find_file(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    if (access(buf, F_OK) == 0)
        return 0;
    snprintf(buf, n, "%s/%s.gz", dir, name);
    return access(buf, F_OK) == 0 ? 0 : -1;
}

static int check_dir(const char *dir, const char *split, const char *fn, char *err,
                     size_t errlen) {
    struct stat st;
    if (!dir || !split)
        return rt_data_fail(err, errlen, "%s: no directory or split given", fn);
    if (strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
        return rt_data_fail(err, errlen, "%s: unknown split '%s' (expected train or test)", dir, split);
    if (stat(dir, &st) != 0)
        return rt_data_fail(err, errlen, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rt_data_fail(err, errlen, "%s: not a directory", dir);
    if (strlen(dir) > PATH_MAX - 64)
        return rt_data_fail(err, errlen, "%s: path too long", dir);
    return 0;
}

int rt_data_idx_dir(const char *dir, const char *split, int normalize, RtDataset *out,
                    char *err, size_t errlen) {
    *out = (RtDataset){0};
    if (check_dir(dir, split, "rt_data_idx_dir", err, errlen))
        return -1;
    const char *pre = strcmp(split, "train") == 0 ? "train" : "t10k";
    char iname[64], lname[64], ipath[PATH_MAX], lpath[PATH_MAX];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", pre);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", pre);
    if (find_file(ipath, sizeof ipath, dir, iname))
        return rt_data_fail(err, errlen, "%s: no %s or %s.gz in this directory", dir, iname, iname);
    if (find_file(lpath, sizeof lpath, dir, lname))
        return rt_data_fail(err, errlen, "%s: no %s or %s.gz in this directory", dir, lname, lname);
    if (rt_data_idx(ipath, lpath, normalize, out, err, errlen))
        return -1;
    snprintf(out->source, sizeof out->source, "%s (%s)", dir, split);
    return 0;
}

//
// CIFAR-10
//

// The number of records in a CIFAR-10 batch file, or -1.
static int64_t cifar_count(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0)
        return rt_data_fail(err, errlen, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return rt_data_fail(err, errlen, "%s: not a regular file", path);
    if (st.st_size == 0)
        return rt_data_fail(err, errlen, "%s: empty file", path);
    if (st.st_size % CIFAR_RECORD != 0)
        return rt_data_fail(err, errlen,
                    "%s: size %lld is not a multiple of %d bytes (a record is 1 label byte and "
                    "%d image bytes)", path, (long long)st.st_size, CIFAR_RECORD, CIFAR_IMAGE);
    return st.st_size / CIFAR_RECORD;
}

// Reads n records into img (n * 3072 floats) and lab, a chunk of records at a time.
static int cifar_read(const char *path, int64_t n, float *img, int32_t *lab,
                      const float *lut, char *err, size_t errlen) {
    enum { CHUNK = 256 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_data_fail(err, errlen, "%s: %s", path, strerror(errno));
    uint8_t *buf = malloc((size_t)CHUNK * CIFAR_RECORD);
    int rc = buf ? 0 : rt_data_fail(err, errlen, "%s: out of memory", path);
    for (int64_t r = 0; rc == 0 && r < n; r += CHUNK) {
        size_t k = (size_t)(n - r < CHUNK ? n - r : CHUNK);
        size_t got = fread(buf, CIFAR_RECORD, k, f);
        if (got < k) {   // the file shrank since cifar_count
            rc = rt_data_fail(err, errlen, "%s: truncated (expected %lld bytes, found %lld)", path,
                      (long long)(n * CIFAR_RECORD), (long long)((r + (int64_t)got) * CIFAR_RECORD));
            break;
        }
        for (size_t i = 0; i < k; i++) {
            const uint8_t *rec = buf + i * CIFAR_RECORD;
            int64_t at = r + (int64_t)i;
            if (rec[0] > 9) {
                rc = rt_data_fail(err, errlen, "%s: record %lld (byte %lld): label %d is not in 0..9",
                          path, (long long)at, (long long)(at * CIFAR_RECORD), rec[0]);
                break;
            }
            lab[at] = rec[0];
            float *o = img + at * CIFAR_IMAGE;
            for (int j = 0; j < CIFAR_IMAGE; j++)
                o[j] = lut[rec[1 + j]];
        }
    }
    free(buf);
    fclose(f);
    return rc;
}

int rt_data_cifar10(const char *const *files, int nfiles, int normalize, RtDataset *out,
                    char *err, size_t errlen) {
    *out = (RtDataset){0};
    if (!files || nfiles < 1)
        return rt_data_fail(err, errlen, "rt_data_cifar10: no files given");
    // Count first, so one allocation holds every record.
    int64_t *count = malloc((size_t)nfiles * sizeof *count), n = 0;
    if (!count)
        return rt_data_fail(err, errlen, "rt_data_cifar10: out of memory");
    for (int i = 0; i < nfiles; i++) {
        count[i] = cifar_count(files[i], err, errlen);
        if (count[i] < 0) {
            free(count);
            return -1;
        }
        n += count[i];
    }
    RtDataset ds = {0};
    int64_t ishape[4] = {n, 3, 32, 32};
    rt_data_add_col(&ds, "images", rt_tensor_new(RT_F32, 4, ishape));
    rt_data_add_col(&ds, "labels", rt_tensor_new(RT_I32, 1, &n));
    int rc = 0;
    if (!ds.col[0].t.data || !ds.col[1].t.data)
        rc = rt_data_fail(err, errlen, "%s: out of memory for %lld images", files[0], (long long)n);
    float lut[256];
    byte_table(lut, normalize);
    float *img = ds.col[0].t.data;
    int32_t *lab = ds.col[1].t.data;
    for (int64_t i = 0, at = 0; rc == 0 && i < nfiles; at += count[i++])
        rc = cifar_read(files[i], count[i], img + at * CIFAR_IMAGE, lab + at, lut, err, errlen);
    free(count);
    if (rc) {
        rt_dataset_free(&ds);
        return -1;
    }
    ds.n = n;
    snprintf(ds.source, sizeof ds.source, "%s", files[0]);
    *out = ds;
    return 0;
}

int rt_data_cifar10_dir(const char *dir, const char *split, int normalize, RtDataset *out,
                        char *err, size_t errlen) {
    *out = (RtDataset){0};
    if (check_dir(dir, split, "rt_data_cifar10_dir", err, errlen))
        return -1;
    static const char *const train[] = {"data_batch_1.bin", "data_batch_2.bin",
                                        "data_batch_3.bin", "data_batch_4.bin",
                                        "data_batch_5.bin"};
    static const char *const test[] = {"test_batch.bin"};
    int istrain = strcmp(split, "train") == 0, k = istrain ? 5 : 1;
    const char *const *names = istrain ? train : test;
    // DIR itself, else the folder the archive unpacks to.
    char base[PATH_MAX], path[5][PATH_MAX];
    snprintf(base, sizeof base, "%s", dir);
    snprintf(path[0], sizeof path[0], "%s/%s", base, names[0]);
    if (access(path[0], F_OK) != 0) {
        snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
        snprintf(path[0], sizeof path[0], "%s/%s", base, names[0]);
        if (access(path[0], F_OK) != 0)
            return rt_data_fail(err, errlen, "%s: no %s here or in %s/cifar-10-batches-bin", dir,
                        names[0], dir);
    }
    const char *files[5];
    for (int i = 0; i < k; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", base, names[i]);
        files[i] = path[i];
    }
    if (rt_data_cifar10(files, k, normalize, out, err, errlen))
        return -1;
    snprintf(out->source, sizeof out->source, "%s (%s)", base, split);
    return 0;
}

//
// .npy columns
//

// The file's base name without ".npy", cut to fit a column name.
static void npy_name(char name[32], const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len >= 4 && strcmp(base + len - 4, ".npy") == 0)
        len -= 4;
    if (len > 31)
        len = 31;
    memcpy(name, base, len);
    name[len] = '\0';
}

// Adds t as column name (from what, a file or an archive member, for messages;
// from[] keeps each column's entry of the list, to say who took a name).
static int npy_column(RtDataset *ds, const char **from, const char *entry, RtTensor t, const char *name, const char *what,
                      char *err, size_t errlen) {
    int rc = 0;
    if (ds->ncol == RT_DATA_MAXCOL)
        rc = rt_data_fail(err, errlen, "%s: more than %d columns", what, RT_DATA_MAXCOL);
    else if (t.ndim < 1)
        rc = rt_data_fail(err, errlen, "%s: a 0-d array has no example axis", what);
    else if (ds->ncol > 0 && t.shape[0] != ds->n)
        rc = rt_data_fail(err, errlen, "%s: first dimension %lld differs from %lld in %s", what,
                  (long long)t.shape[0], (long long)ds->n, ds->source);
    for (int j = 0; rc == 0 && j < ds->ncol; j++)
        if (strncmp(ds->col[j].name, name, 31) == 0)
            rc = rt_data_fail(err, errlen, "%s: column name '%.31s' is taken by %s", what, name, from[j]);
    if (rc) {
        rt_tensor_free(&t);
        return -1;
    }
    char cut[32];
    snprintf(cut, sizeof cut, "%s", name);
    if (ds->ncol == 0)
        snprintf(ds->source, sizeof ds->source, "%s", what);
    ds->n = t.shape[0];
    from[ds->ncol] = entry;
    rt_data_add_col(ds, cut, t);
    return 0;
}

// One entry of the list: a .npy file; an .npz archive (every array, in its order);
// or ARCHIVE.npz:NAME, one array of it.
static int npy_entry(RtDataset *ds, const char **from, const char *path, char *err, size_t errlen) {
    RtTensor t;
    char archive[4096];
    const char *member = rt_npz_split(path, archive, sizeof archive);
    if (member)
        return rt_npz_load(archive, member, &t, err, errlen) || npy_column(ds, from, path, t, member, path, err, errlen) ? -1 : 0;
    if (rt_npz_suffix(path, strlen(path))) {
        char(*names)[256];
        int n;
        if (rt_npz_list(path, &names, &n, err, errlen))
            return -1;
        int rc = n ? 0 : rt_data_fail(err, errlen, "%s: the archive holds no arrays", path);
        for (int i = 0; rc == 0 && i < n; i++) {
            char what[4096 + 300];
            snprintf(what, sizeof what, "%s:%s", path, names[i]);
            rc = rt_npz_load(path, names[i], &t, err, errlen) || npy_column(ds, from, path, t, names[i], what, err, errlen) ? -1 : 0;
        }
        free(names);
        return rc;
    }
    char name[32];
    npy_name(name, path);
    return rt_npy_load(path, &t, err, errlen) || npy_column(ds, from, path, t, name, path, err, errlen) ? -1 : 0;
}

int rt_data_npy(const char *const *paths, int n, RtDataset *out, char *err, size_t errlen) {
    *out = (RtDataset){0};
    if (!paths || n < 1 || n > RT_DATA_MAXCOL)
        return rt_data_fail(err, errlen, "rt_data_npy: %d files (expected 1 to %d)", paths ? n : 0,
                    RT_DATA_MAXCOL);
    RtDataset ds = {0};
    const char *from[RT_DATA_MAXCOL];
    for (int i = 0; i < n; i++) {
        if (npy_entry(&ds, from, paths[i], err, errlen)) {
            rt_dataset_free(&ds);
            return -1;
        }
    }
    snprintf(ds.source, sizeof ds.source, "%s", paths[0]);
    *out = ds;
    return 0;
}
