// test_data.c: the data loaders (IDX, CIFAR-10, CSV, .npy) and the mini-batcher.
// Writes its files into a fresh temporary directory and removes it at the end.
// One line per check, then "N passed, N failed"; exits nonzero on any failure.
#include "runtime/data.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include "check.h"

static char tmpdir[64];
static char err[1024];



// A path in the scratch directory, in one of 64 rotating buffers: a test may hold a few
// while it makes more.
static const char *tpath(const char *name) {
    static char buf[64][512];
    static int i;
    char *p = buf[i++ % 64];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(tpath(name), "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", tpath(name));
        exit(2);
    }
    fclose(f);
}

static void write_text(const char *name, const char *s) { write_file(name, s, strlen(s)); }

static void write_gz(const char *name, const void *data, size_t n) {
    gzFile f = gzopen(tpath(name), "wb");
    if (!f || gzwrite(f, data, (unsigned)n) != (int)n) {
        fprintf(stderr, "cannot write %s\n", tpath(name));
        exit(2);
    }
    gzclose(f);
}

static size_t read_file(const char *name, uint8_t *buf, size_t cap) {
    FILE *f = fopen(tpath(name), "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (f)
        fclose(f);
    return n;
}

static int empty(const RtDataset *ds) { return ds->n == 0 && ds->ncol == 0 && !ds->col[0].t.data; }

// rc is -1, *ds is empty and err names `file` (a path in tmpdir) and contains `what`.
static int failed(int rc, const RtDataset *ds, const char *file, const char *what) {
    int ok = rc == -1 && empty(ds) && strstr(err, file ? tpath(file) : "") && strstr(err, what);
    if (!ok)
        printf("     got rc %d, err \"%s\"; wanted %s and \"%s\"\n", rc, err,
               file ? tpath(file) : "-", what);
    return ok;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

//
// IDX
//

// An IDX file: 0 0 type rank, big-endian dims, then the data (already big-endian).
static size_t make_idx(uint8_t *buf, uint8_t type, int ndim, const uint32_t *dims,
                       const void *data, size_t nbytes) {
    buf[0] = buf[1] = 0;
    buf[2] = type;
    buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++)
            buf[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    memcpy(buf + 4 + 4 * ndim, data, nbytes);
    return 4 + 4 * (size_t)ndim + nbytes;
}

static void put_be(uint8_t *p, uint64_t v, int size) {
    for (int b = 0; b < size; b++)
        p[b] = (uint8_t)(v >> (8 * (size - 1 - b)));
}

static int col_is(const RtDataset *ds, int c, const char *name, RtDType dt, int ndim,
                  const int64_t *shape) {
    if (c >= ds->ncol || strcmp(ds->col[c].name, name) || ds->col[c].t.dtype != dt ||
        ds->col[c].t.ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (ds->col[c].t.shape[i] != shape[i])
            return 0;
    return 1;
}

// Images u8 [3, 2, 2] = 20 * i, labels u8 {7, 0, 9}.
static uint8_t px[12], lab3[3] = {7, 0, 9};

static void test_idx_u8(void) {
    uint8_t buf[256];
    for (int i = 0; i < 12; i++)
        px[i] = (uint8_t)(i * 20 + (i == 11 ? 35 : 0));   // up to 255
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {3};
    write_file("im.idx", buf, make_idx(buf, 0x08, 3, idims, px, 12));
    write_gz("im.idx.gz", buf, make_idx(buf, 0x08, 3, idims, px, 12));
    write_file("lb.idx", buf, make_idx(buf, 0x08, 1, ldims, lab3, 3));
    write_gz("lb.gz", buf, make_idx(buf, 0x08, 1, ldims, lab3, 3));

    const char *pairs[4][2] = {{"im.idx", "lb.idx"}, {"im.idx.gz", "lb.gz"},
                               {"im.idx", "lb.gz"}, {"im.idx.gz", "lb.idx"}};
    for (int p = 0; p < 4; p++) {
        for (int norm = 0; norm < 2; norm++) {
            RtDataset ds;
            int rc = rt_data_idx(tpath(pairs[p][0]), tpath(pairs[p][1]), norm, &ds, err,
                                 sizeof err);
            int64_t is[3] = {3, 2, 2}, ls[1] = {3};
            int ok = rc == 0 && ds.n == 3 && ds.ncol == 2 && col_is(&ds, 0, "images", RT_F32, 3, is) &&
                     col_is(&ds, 1, "labels", RT_I32, 1, ls) && !strcmp(ds.source, tpath(pairs[p][0]));
            for (int i = 0; ok && i < 12; i++)
                ok &= ((float *)ds.col[0].t.data)[i] == (norm ? (float)px[i] / 255.0f : (float)px[i]);
            for (int i = 0; ok && i < 3; i++)
                ok &= ((int32_t *)ds.col[1].t.data)[i] == lab3[i];
            check(ok, "idx u8: %s + %s, normalize %d: exact values (%s)", pairs[p][0], pairs[p][1],
                  norm, rc ? err : "");
            rt_dataset_free(&ds);
            check(empty(&ds), "idx: rt_dataset_free empties the data set");
        }
    }
    RtDataset ds;
    int rc = rt_data_idx(tpath("im.idx.gz"), NULL, 1, &ds, err, sizeof err);
    check(rc == 0 && ds.ncol == 1 && ds.n == 3 && !strcmp(ds.col[0].name, "images"),
          "idx: labels NULL gives the images column alone");
    rt_dataset_free(&ds);
    rt_dataset_free(&ds);   // twice is harmless
    rt_dataset_free(NULL);
}

static void test_idx_types(void) {
    uint8_t buf[512], data[128];
    uint32_t dims[2] = {2, 3}, ldims[1] = {2};
    // i8, i16, i32, f32, f64 images with negative and large values; not normalized.
    const double vals[6] = {-128, -1, 0, 1, 100, 127};
    const double fvals[6] = {1.5, -2.25, 0, 1e10, -0.0, 3.0e-3};
    struct { uint8_t type; int size; const double *v; const char *name; } ts[] = {
        {0x09, 1, vals, "i8"},  {0x0B, 2, vals, "i16"}, {0x0C, 4, vals, "i32"},
        {0x0D, 4, fvals, "f32"}, {0x0E, 8, fvals, "f64"},
    };
    for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
        for (int i = 0; i < 6; i++) {
            uint64_t bits;
            if (ts[t].type == 0x0D) {
                float f = (float)ts[t].v[i];
                uint32_t b;
                memcpy(&b, &f, 4);
                bits = b;
            } else if (ts[t].type == 0x0E) {
                memcpy(&bits, &ts[t].v[i], 8);
            } else {
                bits = (uint64_t)(int64_t)ts[t].v[i] * (ts[t].type == 0x0B ? 100 : ts[t].type == 0x0C ? 1000000 : 1);
            }
            put_be(data + i * ts[t].size, bits, ts[t].size);
        }
        write_gz("t.gz", buf, make_idx(buf, ts[t].type, 2, dims, data, 6 * (size_t)ts[t].size));
        // Labels of type i32 and i16, big-endian, negative too.
        uint8_t ld[8];
        put_be(ld, (uint64_t)(int64_t)-5, 4);
        put_be(ld + 4, 100000, 4);
        write_file("l32.idx", buf, make_idx(buf, 0x0C, 1, ldims, ld, 8));
        RtDataset ds;
        int rc = rt_data_idx(tpath("t.gz"), tpath("l32.idx"), 1, &ds, err, sizeof err);
        int ok = rc == 0 && ds.n == 2 && ds.col[0].t.ndim == 2 && ds.col[0].t.shape[1] == 3;
        for (int i = 0; ok && i < 6; i++) {
            double want = ts[t].v[i] * (ts[t].type == 0x0B ? 100 : ts[t].type == 0x0C ? 1000000 : 1);
            ok &= ((float *)ds.col[0].t.data)[i] == (float)want;
        }
        ok = ok && ((int32_t *)ds.col[1].t.data)[0] == -5 && ((int32_t *)ds.col[1].t.data)[1] == 100000;
        check(ok, "idx %s images (gz), i32 labels: exact, not divided by 255 (%s)", ts[t].name,
              rc ? err : "");
        rt_dataset_free(&ds);
    }
    uint8_t l16[4] = {0xff, 0xfe, 0x01, 0x00};   // -2, 256
    write_file("l16.idx", buf, make_idx(buf, 0x0B, 1, ldims, l16, 4));
    RtDataset ds;
    int rc = rt_data_idx(tpath("t.gz"), tpath("l16.idx"), 0, &ds, err, sizeof err);
    check(rc == 0 && ((int32_t *)ds.col[1].t.data)[0] == -2 && ((int32_t *)ds.col[1].t.data)[1] == 256,
          "idx: i16 labels");
    rt_dataset_free(&ds);
    // Rank 1 images.
    uint32_t d1[1] = {4};
    write_file("r1.idx", buf, make_idx(buf, 0x08, 1, d1, "\x01\x02\x03\x04", 4));
    rc = rt_data_idx(tpath("r1.idx"), NULL, 0, &ds, err, sizeof err);
    check(rc == 0 && ds.n == 4 && ds.col[0].t.ndim == 1 && ((float *)ds.col[0].t.data)[3] == 4.0f,
          "idx: rank-1 images");
    rt_dataset_free(&ds);
}

static void test_idx_dir(void) {
    uint8_t buf[256];
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {3};
    mkdir(tpath("mnist"), 0777);
    write_gz("mnist/train-images-idx3-ubyte.gz", buf, make_idx(buf, 0x08, 3, idims, px, 12));
    write_file("mnist/train-labels-idx1-ubyte", buf, make_idx(buf, 0x08, 1, ldims, lab3, 3));
    RtDataset ds;
    int rc = rt_data_idx_dir(tpath("mnist"), "train", 1, &ds, err, sizeof err);
    check(rc == 0 && ds.n == 3 && ((int32_t *)ds.col[1].t.data)[2] == 9 &&
              strstr(ds.source, "mnist (train)"),
          "idx dir: train split, one file gzipped, one plain (%s)", rc ? err : ds.source);
    rt_dataset_free(&ds);
    rc = rt_data_idx_dir(tpath("mnist"), "test", 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "mnist", "t10k-images-idx3-ubyte"),
          "idx dir: a missing split names the directory and the file: %s", err);
    rc = rt_data_idx_dir(tpath("mnist"), "valid", 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "mnist", "unknown split 'valid'"), "idx dir: unknown split: %s", err);
    rc = rt_data_idx_dir(tpath("nodir"), "train", 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "nodir", "No such file"), "idx dir: missing directory: %s", err);
}

static void test_idx_bad(void) {
    uint8_t buf[4096], data[64] = {0};
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {3}, l2[1] = {2};
    RtDataset ds;
    int rc;
    write_file("lb.idx", buf, make_idx(buf, 0x08, 1, ldims, lab3, 3));

    rc = rt_data_idx(tpath("nothere"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "nothere", "No such file"), "idx: missing file: %s", err);
    rc = rt_data_idx(tpath("im.idx"), tpath("nolabels"), 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "nolabels", "No such file"), "idx: missing labels file: %s", err);
    write_file("magic.idx", "\x12\x34\x08\x03\0\0\0\1", 8);
    rc = rt_data_idx(tpath("magic.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "magic.idx", "bad magic number 0x12340803"), "idx: bad magic: %s", err);
    write_file("type.idx", "\0\0\x07\x01\0\0\0\1\0", 9);
    rc = rt_data_idx(tpath("type.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "type.idx", "unsupported IDX type 0x07"), "idx: bad type: %s", err);
    write_file("rank.idx", "\0\0\x08\x00", 4);
    rc = rt_data_idx(tpath("rank.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "rank.idx", "rank 0"), "idx: rank 0: %s", err);
    write_file("empty.idx", "", 0);
    rc = rt_data_idx(tpath("empty.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "empty.idx", "empty file"), "idx: empty file: %s", err);
    write_file("short.idx", "\0\0", 2);
    rc = rt_data_idx(tpath("short.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "short.idx", "truncated header (expected 4 bytes, found 2)"),
          "idx: 2-byte file: %s", err);
    write_file("th.idx", buf, make_idx(buf, 0x08, 3, idims, px, 12) - 12 - 6);
    rc = rt_data_idx(tpath("th.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "th.idx", "truncated header (expected 16 bytes, found 10)"),
          "idx: truncated header: %s", err);
    write_file("td.idx", buf, make_idx(buf, 0x08, 3, idims, px, 12) - 2);
    rc = rt_data_idx(tpath("td.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "td.idx", "truncated data (expected 12 bytes after the 16-byte header, found 10)"),
          "idx: truncated data: %s", err);
    write_gz("td.gz", buf, make_idx(buf, 0x08, 3, idims, px, 12) - 2);
    rc = rt_data_idx(tpath("td.gz"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "td.gz", "truncated data (expected 12 bytes"),
          "idx: truncated data, gzipped: %s", err);
    write_file("long.idx", buf, make_idx(buf, 0x08, 3, idims, data, 13));
    rc = rt_data_idx(tpath("long.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "long.idx", "bytes after the data"), "idx: trailing bytes: %s", err);
    uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    write_file("huge.idx", buf, make_idx(buf, 0x0E, 3, huge, data, 8));
    rc = rt_data_idx(tpath("huge.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "huge.idx", "shape too large"), "idx: absurd shape: %s", err);
    uint32_t big[2] = {0xffffffffu, 0x1000};
    write_file("big.idx", buf, make_idx(buf, 0x08, 2, big, data, 8));
    rc = rt_data_idx(tpath("big.idx"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "big.idx", "truncated data (expected 17592186040320 bytes"),
          "idx: a 16 TB header, 8 bytes of data: %s", err);

    write_file("im.idx", buf, make_idx(buf, 0x08, 3, idims, px, 12));
    write_file("l2.idx", buf, make_idx(buf, 0x08, 1, l2, lab3, 2));
    rc = rt_data_idx(tpath("im.idx"), tpath("l2.idx"), 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "l2.idx", "label count 2 differs from image count 3") &&
              strstr(err, tpath("im.idx")),
          "idx: label/image count mismatch: %s", err);
    write_file("lf.idx", buf, make_idx(buf, 0x0D, 1, ldims, data, 12));
    rc = rt_data_idx(tpath("im.idx"), tpath("lf.idx"), 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "lf.idx", "unsupported dtype f32"), "idx: float labels: %s", err);
    write_file("lr.idx", buf, make_idx(buf, 0x08, 3, idims, px, 12));
    rc = rt_data_idx(tpath("im.idx"), tpath("lr.idx"), 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "lr.idx", "rank 1, found rank 3"), "idx: labels of rank 3: %s", err);
    rc = rt_data_idx(tmpdir, NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, NULL, "is a directory") && strstr(err, tmpdir),
          "idx: a directory: %s", err);

    // A gzip file corrupted midway: inflate fails or the CRC does not match.
    uint8_t *img = malloc(60000), *gz = malloc(80000);
    uint32_t d[3] = {60, 25, 40};
    uint32_t s = 1;
    for (int i = 0; i < 60000; i++) {
        s = s * 1103515245u + 12345u;
        img[i] = (uint8_t)((s >> 16) % 16 * (i % 7));   // compressible, not trivially
    }
    uint8_t *raw = malloc(60100);
    write_gz("c.gz", raw, make_idx(raw, 0x08, 3, d, img, 60000));
    size_t n = read_file("c.gz", gz, 80000);
    rc = rt_data_idx(tpath("c.gz"), NULL, 0, &ds, err, sizeof err);
    check(rc == 0 && ds.n == 60 && ((float *)ds.col[0].t.data)[59999] == img[59999],
          "idx: a 60 KB gzipped file (%zu bytes compressed) reads back", n);
    rt_dataset_free(&ds);
    int ok = 1;
    const char *kind = "";
    for (size_t at = n / 4; at < n - 8; at += n / 5) {
        uint8_t save = gz[at];
        gz[at] ^= 0x5a;
        write_file("c2.gz", gz, n);
        gz[at] = save;
        rc = rt_data_idx(tpath("c2.gz"), NULL, 0, &ds, err, sizeof err);
        ok &= failed(rc, &ds, "c2.gz", "corrupt gzip data");
        kind = err;
    }
    check(ok, "idx: gzip corrupted midway (4 places): %s", kind);
    write_file("c3.gz", gz, n / 2);
    rc = rt_data_idx(tpath("c3.gz"), NULL, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "c3.gz", "truncated data (expected 60000 bytes"),
          "idx: gzip cut in half: %s", err);

    // Random damage never crashes: every outcome is 0 or -1 with a message naming the file.
    size_t plain = make_idx(raw, 0x08, 3, d, img, 60000);
    ok = 1;
    for (int iter = 0; iter < 300; iter++) {
        int usegz = iter % 2;
        uint8_t *b = usegz ? gz : raw;
        size_t len = usegz ? n : plain;
        uint8_t *copy = malloc(len);
        memcpy(copy, b, len);
        s = s * 1103515245u + 12345u;
        size_t cut = s % 4 == 0 ? (s >> 8) % len : len;
        for (int k = 0; k < 1 + iter % 5; k++) {
            s = s * 1103515245u + 12345u;
            copy[(s >> 4) % (iter % 3 == 0 ? 24 : len)] ^= (uint8_t)(1 + (s >> 24) % 255);
        }
        write_file("fz.idx", copy, cut);
        free(copy);
        rc = rt_data_idx(tpath("fz.idx"), NULL, 1, &ds, err, sizeof err);
        ok &= rc == 0 ? ds.ncol == 1 : failed(rc, &ds, "fz.idx", ": ");
        rt_dataset_free(&ds);
    }
    check(ok, "idx: 300 damaged files: no crash, 0 or a message naming the file");
    free(img);
    free(gz);
    free(raw);
}

//
// CIFAR-10
//

// A batch file of n records; record r has label (r + base) % 10 and pixel j = (r * 7 + j) % 256.
static void write_cifar(const char *name, int n, int base, int badrec) {
    uint8_t *b = malloc((size_t)n * 3073);
    for (int r = 0; r < n; r++) {
        b[r * 3073] = (uint8_t)(r == badrec ? 10 : (r + base) % 10);
        for (int j = 0; j < 3072; j++)
            b[r * 3073 + 1 + j] = (uint8_t)((r * 7 + base + j) % 256);
    }
    write_file(name, b, (size_t)n * 3073);
    free(b);
}

static int cifar_ok(const RtDataset *ds, int64_t n, const int *counts, const int *bases,
                    int nfiles, int norm) {
    int64_t is[4] = {n, 3, 32, 32};
    if (ds->n != n || ds->ncol != 2 || !col_is(ds, 0, "images", RT_F32, 4, is) ||
        !col_is(ds, 1, "labels", RT_I32, 1, &n))
        return 0;
    const float *img = ds->col[0].t.data;
    const int32_t *lab = ds->col[1].t.data;
    int64_t at = 0;
    for (int f = 0; f < nfiles; f++)
        for (int r = 0; r < counts[f]; r++, at++) {
            if (lab[at] != (r + bases[f]) % 10)
                return 0;
            for (int j = 0; j < 3072; j++) {
                float v = (float)((r * 7 + bases[f] + j) % 256);
                if (img[at * 3072 + j] != (norm ? v / 255.0f : v))
                    return 0;
            }
        }
    return 1;
}

static void test_cifar(void) {
    write_cifar("a.bin", 3, 0, -1);
    write_cifar("b.bin", 2, 5, -1);
    const char *files[2] = {tpath("a.bin"), tpath("b.bin")};
    int counts[2] = {3, 2}, bases[2] = {0, 5};
    for (int norm = 0; norm < 2; norm++) {
        RtDataset ds;
        int rc = rt_data_cifar10(files, 2, norm, &ds, err, sizeof err);
        check(rc == 0 && cifar_ok(&ds, 5, counts, bases, 2, norm),
              "cifar: two files, 3 + 2 records, normalize %d: exact (%s)", norm, rc ? err : "");
        rt_dataset_free(&ds);
    }
    // The directory layouts.
    mkdir(tpath("cifar"), 0777);
    mkdir(tpath("cifar/cifar-10-batches-bin"), 0777);
    write_cifar("cifar/cifar-10-batches-bin/test_batch.bin", 4, 3, -1);
    char name[64];
    int tc[5], tb[5];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "cifar/data_batch_%d.bin", i + 1);
        write_cifar(name, tc[i] = i + 1, tb[i] = 2 * i, -1);
    }
    RtDataset ds;
    int rc = rt_data_cifar10_dir(tpath("cifar"), "train", 1, &ds, err, sizeof err);
    check(rc == 0 && cifar_ok(&ds, 15, tc, tb, 5, 1),
          "cifar dir: train = data_batch_1..5 in DIR (%s)", rc ? err : ds.source);
    rt_dataset_free(&ds);
    int c4 = 4, b3 = 3;
    rc = rt_data_cifar10_dir(tpath("cifar"), "test", 0, &ds, err, sizeof err);
    check(rc == 0 && cifar_ok(&ds, 4, &c4, &b3, 1, 0) &&
              strstr(ds.source, "cifar-10-batches-bin (test)"),
          "cifar dir: test = test_batch.bin in DIR/cifar-10-batches-bin (%s)",
          rc ? err : ds.source);
    rt_dataset_free(&ds);
    unlink(tpath("cifar/data_batch_4.bin"));
    rc = rt_data_cifar10_dir(tpath("cifar"), "train", 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "cifar/data_batch_4.bin", "No such file"),
          "cifar dir: a missing batch: %s", err);
    rc = rt_data_cifar10_dir(tmpdir, "test", 1, &ds, err, sizeof err);
    check(failed(rc, &ds, NULL, "no test_batch.bin here or in") && strstr(err, tmpdir),
          "cifar dir: no batches: %s", err);

    // Malformed.
    uint8_t *junk = calloc(3073 * 2 + 5, 1);
    write_file("size.bin", junk, 3073 * 2 + 5);
    free(junk);
    const char *bad[2] = {tpath("a.bin"), tpath("size.bin")};
    rc = rt_data_cifar10(bad, 2, 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "size.bin", "size 6151 is not a multiple of 3073"),
          "cifar: wrong size: %s", err);
    write_cifar("label.bin", 3, 0, 1);
    bad[1] = tpath("label.bin");
    rc = rt_data_cifar10(bad, 2, 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "label.bin", "record 1 (byte 3073): label 10 is not in 0..9"),
          "cifar: bad label: %s", err);
    write_file("empty.bin", "", 0);
    bad[1] = tpath("empty.bin");
    rc = rt_data_cifar10(bad, 2, 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "empty.bin", "empty file"), "cifar: empty file: %s", err);
    bad[1] = tpath("gone.bin");
    rc = rt_data_cifar10(bad, 2, 1, &ds, err, sizeof err);
    check(failed(rc, &ds, "gone.bin", "No such file"), "cifar: missing file: %s", err);
    rc = rt_data_cifar10(bad, 0, 1, &ds, err, sizeof err);
    check(rc == -1 && empty(&ds) && strstr(err, "no files"), "cifar: no files: %s", err);
}

//
// CSV
//

static int floats_are(const RtTensor *t, const float *v, int64_t n) {
    if (t->dtype != RT_F32 || rt_tensor_numel(t) != n)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (((float *)t->data)[i] != v[i])
            return 0;
    return 1;
}

static int ints_are(const RtTensor *t, const int32_t *v, int64_t n) {
    if (t->dtype != RT_I32 || t->ndim != 1 || t->shape[0] != n)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (((int32_t *)t->data)[i] != v[i])
            return 0;
    return 1;
}

static void test_csv(void) {
    RtDataset ds;
    int rc;
    write_text("a.csv", "1,2,3\n4,5,6\n");
    rc = rt_data_csv(tpath("a.csv"), -1, -1, &ds, err, sizeof err);
    {
        float f[4] = {1, 2, 4, 5};
        int32_t l[2] = {3, 6};
        int64_t fs[2] = {2, 2};
        check(rc == 0 && ds.n == 2 && col_is(&ds, 0, "features", RT_F32, 2, fs) &&
                  floats_are(&ds.col[0].t, f, 4) && !strcmp(ds.col[1].name, "labels") &&
                  ints_are(&ds.col[1].t, l, 2),
              "csv: no header (detected), label last (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }
    write_text("h.csv", "a, b ,label\r\n\n0.5, 1.5 ,2\r\n  \n-1e3,2,0");
    rc = rt_data_csv(tpath("h.csv"), -1, -1, &ds, err, sizeof err);
    {
        float f[4] = {0.5f, 1.5f, -1000, 2};
        int32_t l[2] = {2, 0};
        check(rc == 0 && ds.n == 2 && floats_are(&ds.col[0].t, f, 4) && ints_are(&ds.col[1].t, l, 2),
              "csv: header detected, CRLF, blank lines, spaces, no final newline (%s)",
              rc ? err : "");
        rt_dataset_free(&ds);
    }
    write_text("f.csv", "y,x1,x2\n-3,0.25,7\n12,1,-8\n");
    rc = rt_data_csv(tpath("f.csv"), 0, 1, &ds, err, sizeof err);
    {
        float f[4] = {0.25f, 7, 1, -8};
        int32_t l[2] = {-3, 12};
        check(rc == 0 && floats_are(&ds.col[0].t, f, 4) && ints_are(&ds.col[1].t, l, 2),
              "csv: header given, label first (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }
    rc = rt_data_csv(tpath("a.csv"), -2, 0, &ds, err, sizeof err);
    {
        float f[4] = {1, 3, 4, 6};
        int32_t l[2] = {2, 5};
        check(rc == 0 && floats_are(&ds.col[0].t, f, 4) && ints_are(&ds.col[1].t, l, 2),
              "csv: label_col -2 is the middle field (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }
    rc = rt_data_csv(tpath("a.csv"), RT_DATA_NOLABEL, -1, &ds, err, sizeof err);
    {
        float f[6] = {1, 2, 3, 4, 5, 6};
        int64_t fs[2] = {2, 3};
        check(rc == 0 && ds.ncol == 1 && col_is(&ds, 0, "features", RT_F32, 2, fs) &&
                  floats_are(&ds.col[0].t, f, 6),
              "csv: no label: features [2, 3] (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }
    write_text("one.csv", "7\n8\n");
    rc = rt_data_csv(tpath("one.csv"), 0, 0, &ds, err, sizeof err);
    {
        int32_t l[2] = {7, 8};
        check(rc == 0 && ds.col[0].t.shape[1] == 0 && ints_are(&ds.col[1].t, l, 2),
              "csv: a label alone gives features [2, 0] (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }

    // Malformed.
    write_text("rag.csv", "1,2,3\n\n4,5\n");
    rc = rt_data_csv(tpath("rag.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "rag.csv", "rag.csv:3: row has 2 fields, expected 3"),
          "csv: ragged row: %s", err);
    write_text("nan.csv", "1,2,3\n4, xy ,6\n");
    rc = rt_data_csv(tpath("nan.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "nan.csv", "nan.csv:2:4: field 2 'xy' is not a number"),
          "csv: not a number: %s", err);
    write_text("hdr0.csv", "a,b\n1,2\n");
    rc = rt_data_csv(tpath("hdr0.csv"), -1, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "hdr0.csv", "hdr0.csv:1:1: field 1 'a' is not a number"),
          "csv: header 0 reads a header as data: %s", err);
    write_text("lab.csv", "1,2,3\n1,2,3.5\n");
    rc = rt_data_csv(tpath("lab.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "lab.csv", "lab.csv:2:5: field 3 '3.5' is a label but not an integer"),
          "csv: non-integer label: %s", err);
    write_text("big.csv", "1,3e9\n");
    rc = rt_data_csv(tpath("big.csv"), 1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "big.csv", "big.csv:1:3: field 2 '3e9' is a label but not an integer in i32"),
          "csv: label out of i32's range: %s", err);
    write_text("hole.csv", "1,2,3\n1,,3\n");
    rc = rt_data_csv(tpath("hole.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "hole.csv", "hole.csv:2:3: field 2 is empty"), "csv: empty field: %s",
          err);
    // RFC 4180 quoting: quoted numbers, commas and "" inside a quoted header
    write_text("q.csv", "\"x, 1\",\"say \"\"y\"\"\", \"label\"\n\"1.5\", 2 ,\" 3 \"\r\n-4,\"5e-1\",\"0\"\n");
    rc = rt_data_csv(tpath("q.csv"), -1, -1, &ds, err, sizeof err);
    {
        const float *f = rc ? NULL : ds.col[0].t.data;
        const int32_t *l = rc ? NULL : ds.col[1].t.data;
        check(!rc && ds.n == 2 && f[0] == 1.5f && f[1] == 2 && f[2] == -4 && f[3] == 0.5f && l[0] == 3 && l[1] == 0,
              "csv: quoted fields and a quoted header with commas and quotes (%s)", rc ? err : "");
        rt_dataset_free(&ds);
    }
    write_text("unq.csv", "1,2,3\n1,\"2,3\n");
    rc = rt_data_csv(tpath("unq.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "unq.csv", "unq.csv:2: a quote is not closed on this line"), "csv: unclosed quote: %s", err);
    write_text("qjunk.csv", "1,2,3\n1,\"2\"x,3\n");
    rc = rt_data_csv(tpath("qjunk.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "qjunk.csv", "qjunk.csv:2:3: field 2 '\"2\"x' is not a number"), "csv: text after a closing quote: %s", err);
    write_text("semi.csv", "1;2;3\n4;5;6\n");
    rc = rt_data_csv(tpath("semi.csv"), -1, 0, &ds, err, sizeof err);
    check(failed(rc, &ds, "semi.csv", "field 1 '1;2;3' is not a number (fields are separated by commas)"),
          "csv: semicolons: %s", err);
    write_text("empty.csv", "");
    rc = rt_data_csv(tpath("empty.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "empty.csv", "empty.csv:1: empty file"), "csv: empty file: %s", err);
    write_text("blank.csv", "\n  \n\r\n");
    rc = rt_data_csv(tpath("blank.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "blank.csv", "blank.csv:1: empty file"), "csv: blank lines only: %s",
          err);
    write_text("honly.csv", "\na,b,c\n");
    rc = rt_data_csv(tpath("honly.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "honly.csv", "honly.csv:2: no data rows after the header"),
          "csv: a header alone: %s", err);
    rc = rt_data_csv(tpath("a.csv"), 3, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "a.csv", "label column 3 is out of range for 3 fields"),
          "csv: label column out of range: %s", err);
    rc = rt_data_csv(tpath("a.csv"), -4, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "a.csv", "label column -4"), "csv: label column -4: %s", err);
    rc = rt_data_csv(tpath("none.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "none.csv", "No such file"), "csv: missing file: %s", err);
    rc = rt_data_csv(tmpdir, -1, -1, &ds, err, sizeof err);
    check(rc == -1 && empty(&ds) && strstr(err, tmpdir), "csv: a directory: %s", err);
    write_file("nul.csv", "1,2\n3,\0\n", 8);
    rc = rt_data_csv(tpath("nul.csv"), -1, -1, &ds, err, sizeof err);
    check(failed(rc, &ds, "nul.csv", "nul.csv:2:3"), "csv: a NUL byte: %s", err);
}

//
// .npy columns
//

static void test_npy(void) {
    int64_t s43[2] = {4, 3}, s4[1] = {4}, s5[1] = {5};
    RtTensor x = rt_tensor_new(RT_F32, 2, s43), y = rt_tensor_new(RT_I64, 1, s4);
    for (int i = 0; i < 12; i++)
        ((float *)x.data)[i] = (float)i * 0.5f - 1;
    for (int i = 0; i < 4; i++)
        ((int64_t *)y.data)[i] = (int64_t)i << 40;
    rt_npy_save(tpath("x.npy"), &x, err, sizeof err);
    rt_npy_save(tpath("the_labels.npy"), &y, err, sizeof err);
    RtTensor z = rt_tensor_new(RT_F64, 1, s5), s = rt_tensor_new(RT_F32, 0, NULL);
    rt_npy_save(tpath("z.npy"), &z, err, sizeof err);
    rt_npy_save(tpath("scalar.npy"), &s, err, sizeof err);
    mkdir(tpath("sub"), 0777);
    rt_npy_save(tpath("sub/x.npy"), &y, err, sizeof err);

    const char *p[3] = {tpath("x.npy"), tpath("the_labels.npy")};
    RtDataset ds;
    int rc = rt_data_npy(p, 2, &ds, err, sizeof err);
    int ok = rc == 0 && ds.n == 4 && ds.ncol == 2 && col_is(&ds, 0, "x", RT_F32, 2, s43) &&
             col_is(&ds, 1, "the_labels", RT_I64, 1, s4) &&
             !memcmp(ds.col[0].t.data, x.data, 48) && !memcmp(ds.col[1].t.data, y.data, 32);
    check(ok, "npy: two columns, named after the files, stored dtypes kept (%s)", rc ? err : "");
    rt_dataset_free(&ds);

    p[2] = tpath("z.npy");
    rc = rt_data_npy(p, 3, &ds, err, sizeof err);
    check(failed(rc, &ds, "z.npy", "first dimension 5 differs from 4") && strstr(err, tpath("x.npy")),
          "npy: first-dimension mismatch: %s", err);
    p[1] = tpath("scalar.npy");
    rc = rt_data_npy(p, 2, &ds, err, sizeof err);
    check(failed(rc, &ds, "scalar.npy", "0-d"), "npy: a 0-d array: %s", err);
    p[1] = tpath("sub/x.npy");
    rc = rt_data_npy(p, 2, &ds, err, sizeof err);
    check(failed(rc, &ds, "sub/x.npy", "column name 'x' is taken by") && strstr(err, tpath("x.npy")),
          "npy: duplicate names, and who took it: %s", err);
    p[1] = tpath("missing.npy");
    rc = rt_data_npy(p, 2, &ds, err, sizeof err);
    check(failed(rc, &ds, "missing.npy", "No such file"), "npy: missing file: %s", err);
    rc = rt_data_npy(p, 9, &ds, err, sizeof err);
    check(rc == -1 && empty(&ds) && strstr(err, "9 files"), "npy: too many files: %s", err);
    rt_tensor_free(&x);
    rt_tensor_free(&y);
    rt_tensor_free(&z);
    rt_tensor_free(&s);
}

//
// The batcher
//

// n examples: "x" f32 [n, 3] with x[i] = {10i, 10i+1, 10i+2}, "y" i32 [n] with y[i] = i.
static RtDataset toy(int64_t n) {
    RtDataset ds = {.n = n, .ncol = 2};
    int64_t xs[2] = {n, 3};
    strcpy(ds.col[0].name, "x");
    strcpy(ds.col[1].name, "y");
    ds.col[0].t = rt_tensor_new(RT_F32, 2, xs);
    ds.col[1].t = rt_tensor_new(RT_I32, 1, &n);
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < 3; j++)
            ((float *)ds.col[0].t.data)[i * 3 + j] = (float)(10 * i + j);
        ((int32_t *)ds.col[1].t.data)[i] = (int32_t)i;
    }
    return ds;
}

// Runs one epoch; order[] gets the example ids seen. 0 if a batch is malformed (wrong size,
// shape, or x and y disagree), else the number of examples.
static int64_t run_epoch(RtBatcher *b, int64_t epoch, int64_t n, int64_t batch, int64_t *order) {
    RtTensor t[2];
    int64_t seen = 0, k = 0, m;
    if (epoch >= 0)
        rt_batcher_start(b, epoch);
    while ((m = rt_batcher_next(b, t)) > 0) {
        int64_t want = n - k * batch < batch ? n - k * batch : batch;
        if (m != want || t[0].shape[0] != m || t[1].shape[0] != m || t[0].shape[1] != 3 ||
            t[0].owns || seen + m > n)
            return 0;
        for (int64_t i = 0; i < m; i++) {
            int32_t id = ((int32_t *)t[1].data)[i];
            for (int j = 0; j < 3; j++)
                if (((float *)t[0].data)[i * 3 + j] != (float)(10 * id + j))
                    return 0;
            order[seen++] = id;
        }
        k++;
    }
    return k == rt_batcher_nbatches(b) && rt_batcher_next(b, t) == 0 ? seen : 0;
}

static int is_perm(const int64_t *order, int64_t n) {
    char *hit = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        ok &= order[i] >= 0 && order[i] < n && !hit[order[i]];
        if (order[i] >= 0 && order[i] < n)
            hit[order[i]] = 1;
    }
    free(hit);
    return ok;
}

static void test_batch_cover(void) {
    int64_t n = 10, sizes[] = {1, 3, 5, 10, 15};
    RtDataset ds = toy(n);
    int64_t order[2][2][10];
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t bs = sizes[si];
        for (int sh = 0; sh < 2; sh++) {
            for (int pf = 0; pf < 2; pf++) {
                RtBatcher *b = rt_batcher_new(&ds, bs, sh, 42, NULL, pf, err, sizeof err);
                int ok = b && rt_batcher_nbatches(b) == (n + bs - 1) / bs;
                for (int e = 0; ok && e < 2; e++) {
                    ok &= run_epoch(b, e, n, bs, order[pf][e]) == n && is_perm(order[pf][e], n);
                    for (int64_t i = 0; !sh && i < n; i++)
                        ok &= order[pf][e][i] == i;
                }
                check(ok, "batcher: batch %lld, shuffle %d, prefetch %d: each example once per "
                          "epoch, batch sizes right", (long long)bs, sh, pf);
                rt_batcher_free(b);
            }
            check(!memcmp(order[0], order[1], sizeof order[0]),
                  "batcher: batch %lld, shuffle %d: prefetch on and off give the same batches",
                  (long long)bs, sh);
        }
    }
    rt_dataset_free(&ds);
}

// A peek shows the batch that rt_batcher_next then hands out, in the same
// storage, and leaves the batch in use as it was; at the epoch's end it gives 0.
static void test_batch_peek(void) {
    int64_t n = 10;
    RtDataset ds = toy(n);
    for (int pf = 0; pf < 2; pf++) {
        RtBatcher *b = rt_batcher_new(&ds, 3, 1, 7, NULL, pf, err, sizeof err);
        int64_t plain[10], seen = 0;
        int ok = b && run_epoch(b, 1, n, 3, plain) == n;
        RtTensor cur[2], ahead[2], t[2];
        rt_batcher_start(b, 1);
        int64_t m = rt_batcher_next(b, cur);
        while (ok && m > 0) {
            int32_t first = ((int32_t *)cur[1].data)[0];
            int64_t pm = rt_batcher_peek(b, ahead), pm2 = rt_batcher_peek(b, t);
            ok &= ((int32_t *)cur[1].data)[0] == first && pm == pm2 && (!pm || ahead[1].data == t[1].data);
            for (int64_t i = 0; i < m; i++) ok &= ((int32_t *)cur[1].data)[i] == plain[seen + i];
            seen += m;
            int64_t nm = rt_batcher_next(b, cur);
            ok &= nm == pm && (!nm || (cur[0].data == ahead[0].data && cur[1].data == ahead[1].data));
            m = nm;
        }
        check(ok && seen == n && rt_batcher_peek(b, t) == 0,
              "batcher, prefetch %d: a peek gives the next batch in the storage next() hands out, and 0 at the end", pf);
        rt_batcher_free(b);
    }
    rt_dataset_free(&ds);
}

static void test_batch_order(void) {
    // The permutation specified in data.h, computed by an independent Python version.
    static const int64_t pin0[10] = {2, 8, 7, 1, 6, 4, 5, 0, 9, 3},
                         pin1[10] = {2, 3, 6, 7, 0, 4, 1, 5, 9, 8},
                         pin7[12] = {3, 4, 7, 0, 10, 5, 9, 6, 8, 2, 11, 1};
    RtDataset ds = toy(10);
    int64_t o[12];
    RtBatcher *b = rt_batcher_new(&ds, 4, 1, 42, NULL, 0, err, sizeof err);
    check(run_epoch(b, 0, 10, 4, o) == 10 && !memcmp(o, pin0, sizeof pin0),
          "batcher: seed 42 epoch 0 gives the pinned order");
    check(run_epoch(b, 1, 10, 4, o) == 10 && !memcmp(o, pin1, sizeof pin1),
          "batcher: seed 42 epoch 1 gives the pinned order");
    rt_batcher_free(b);
    rt_dataset_free(&ds);
    ds = toy(12);
    b = rt_batcher_new(&ds, 5, 1, 0x123456789abcdef0ull, NULL, 1, err, sizeof err);
    check(run_epoch(b, 7, 12, 5, o) == 12 && !memcmp(o, pin7, sizeof pin7),
          "batcher: a 64-bit seed, epoch 7, prefetch: the pinned order");
    rt_batcher_free(b);
    rt_dataset_free(&ds);

    int64_t n = 1000, *a = malloc(8 * n), *c = malloc(8 * n), *d = malloc(8 * n);
    ds = toy(n);
    RtBatcher *b1 = rt_batcher_new(&ds, 64, 1, 7, NULL, 1, err, sizeof err);
    RtBatcher *b2 = rt_batcher_new(&ds, 64, 1, 7, NULL, 0, err, sizeof err);
    RtBatcher *b3 = rt_batcher_new(&ds, 64, 1, 8, NULL, 0, err, sizeof err);
    run_epoch(b1, 3, n, 64, a);
    run_epoch(b2, 3, n, 64, c);
    check(!memcmp(a, c, 8 * n), "batcher: same seed and epoch, same order (separate batchers)");
    run_epoch(b2, 0, n, 64, c);
    run_epoch(b2, 3, n, 64, d);
    check(!memcmp(a, d, 8 * n), "batcher: epoch 3 again after epoch 0: the same order");
    check(memcmp(a, c, 8 * n) != 0, "batcher: different epochs, different orders");
    run_epoch(b3, 3, n, 64, c);
    check(memcmp(a, c, 8 * n) != 0, "batcher: different seeds, different orders");

    // Restart mid-epoch, with and without prefetch, also into another epoch.
    RtTensor t[2];
    int ok = 1;
    for (RtBatcher *bb = b1; bb; bb = bb == b1 ? b2 : NULL) {
        rt_batcher_start(bb, 3);
        rt_batcher_next(bb, t);
        rt_batcher_next(bb, t);
        ok &= run_epoch(bb, 3, n, 64, c) == n && !memcmp(a, c, 8 * n);
        rt_batcher_start(bb, 5);
        rt_batcher_next(bb, t);
        ok &= run_epoch(bb, 3, n, 64, c) == n && !memcmp(a, c, 8 * n);
        rt_batcher_start(bb, 3);
        rt_batcher_next(bb, t);
        rt_batcher_start(bb, 3);
        rt_batcher_start(bb, 3);
        ok &= run_epoch(bb, -1, n, 64, c) == n && !memcmp(a, c, 8 * n);
    }
    check(ok, "batcher: restart mid-epoch (same epoch, another one, twice in a row)");
    RtBatcher *b4 = rt_batcher_new(&ds, 64, 1, 7, NULL, 1, err, sizeof err);
    RtBatcher *b5 = rt_batcher_new(&ds, 64, 1, 7, NULL, 1, err, sizeof err);
    run_epoch(b4, 0, n, 64, c);
    run_epoch(b5, -1, n, 64, d);
    check(!memcmp(c, d, 8 * n), "batcher: a new batcher stands at the start of epoch 0");
    rt_batcher_free(b4);
    rt_batcher_free(b5);
    rt_batcher_free(b1);
    rt_batcher_free(b2);
    rt_batcher_free(b3);

    // Many tiny batches through the prefetch thread, several epochs.
    b = rt_batcher_new(&ds, 1, 1, 99, NULL, 1, err, sizeof err);
    ok = 1;
    for (int e = 0; e < 5; e++)
        ok &= run_epoch(b, e, n, 1, a) == n && is_perm(a, n);
    check(ok, "batcher: batch 1 with prefetch, 5 epochs of 1000");
    rt_batcher_free(b);
    free(a);
    free(c);
    free(d);
    rt_dataset_free(&ds);
}

static void test_batch_dtypes(void) {
    int64_t n = 4, s3[2] = {4, 2};
    RtDataset ds = {.n = n, .ncol = 3};
    ds.col[0].t = rt_tensor_new(RT_F32, 2, s3);
    ds.col[1].t = rt_tensor_new(RT_I32, 1, &n);
    ds.col[2].t = rt_tensor_new(RT_BOOL, 1, &n);
    const float fx[8] = {1.75f, -2.5f, 1e20f, -1e20f, NAN, 0.0f, 3.0f, -0.5f};
    const int32_t iy[4] = {-7, 0, 1, 2147483647};
    const uint8_t bz[4] = {1, 0, 1, 0};
    memcpy(ds.col[0].t.data, fx, sizeof fx);
    memcpy(ds.col[1].t.data, iy, sizeof iy);
    memcpy(ds.col[2].t.data, bz, sizeof bz);
    RtTensor t[3];
    int ok = 1;

    RtDType w1[3] = {RT_F64, RT_I64, RT_F32};
    RtBatcher *b = rt_batcher_new(&ds, 3, 0, 0, w1, 1, err, sizeof err);
    int64_t m = rt_batcher_next(b, t);
    ok = m == 3 && t[0].dtype == RT_F64 && t[1].dtype == RT_I64 && t[2].dtype == RT_F32 &&
         t[0].ndim == 2 && t[0].shape[1] == 2;
    for (int i = 0; ok && i < 6; i++)
        ok &= ((double *)t[0].data)[i] == (double)fx[i] ||
              (isnan(fx[i]) && isnan(((double *)t[0].data)[i]));
    for (int i = 0; ok && i < 3; i++)
        ok &= ((int64_t *)t[1].data)[i] == iy[i] && ((float *)t[2].data)[i] == (float)bz[i];
    m = rt_batcher_next(b, t);
    ok &= m == 1 && ((double *)t[0].data)[1] == -0.5 && ((int64_t *)t[1].data)[0] == 2147483647;
    check(ok, "batcher: f32 -> f64, i32 -> i64, bool -> f32");
    rt_batcher_free(b);

    // Floats into an integer input must be whole numbers in its range (labels from
    // an .npy of floats): 1.75 would become 1, NaN 0, 1e20 saturate, without a word.
    RtDType w2[3] = {RT_I32, RT_BOOL, RT_I64};
    b = rt_batcher_new(&ds, 4, 0, 0, w2, 0, err, sizeof err);
    check(!b && strstr(err, "column 1") && strstr(err, "feeds an i32 input but holds 1.75 at row 0"),
          "batcher: f32 -> i32 refuses a fraction: %s", err);
    const float whole[8] = {1.0f, -2.0f, 2147483520.0f, -2147483648.0f, 0.0f, -0.0f, 3.0f, 7.0f};
    memcpy(ds.col[0].t.data, whole, sizeof whole);
    b = rt_batcher_new(&ds, 4, 0, 0, w2, 0, err, sizeof err);
    m = b ? rt_batcher_next(b, t) : 0;
    const int32_t xi[8] = {1, -2, 2147483520, INT32_MIN, 0, 0, 3, 7};
    const uint8_t yb[4] = {1, 0, 1, 1};
    ok = m == 4 && !memcmp(t[0].data, xi, sizeof xi) && !memcmp(t[1].data, yb, 4) &&
         ((int64_t *)t[2].data)[2] == 1 && ((int64_t *)t[2].data)[3] == 0;
    check(ok, "batcher: whole f32 -> i32 exactly; i32 -> bool; bool -> i64 %s", b ? "" : err);
    rt_batcher_free(b);
    ((float *)ds.col[0].t.data)[5] = 3e9f;
    b = rt_batcher_new(&ds, 4, 0, 0, w2, 0, err, sizeof err);
    check(!b && strstr(err, "holds 3e+09 at row 2"), "batcher: f32 -> i32 refuses a value past i32: %s", err);
    ((float *)ds.col[0].t.data)[5] = NAN;
    b = rt_batcher_new(&ds, 4, 0, 0, w2, 0, err, sizeof err);
    check(!b && strstr(err, "holds nan at row 2"), "batcher: f32 -> i32 refuses NaN: %s", err);
    memcpy(ds.col[0].t.data, whole, sizeof whole);

    RtDType w3[3] = {RT_I64, RT_F32, RT_BOOL};
    b = rt_batcher_new(&ds, 4, 1, 5, w3, 1, err, sizeof err);
    m = rt_batcher_next(b, t);
    ok = m == 4;
    for (int i = 0; ok && i < 4; i++) {
        int64_t id = -1;
        for (int j = 0; j < 4; j++)
            if ((float)iy[j] == ((float *)t[1].data)[i])
                id = j;
        ok &= id >= 0 && ((uint8_t *)t[2].data)[i] == bz[id] &&
              ((int64_t *)t[0].data)[2 * i + 1] == (int64_t)whole[2 * id + 1];
    }
    check(ok, "batcher: conversions with shuffle and prefetch keep rows together");
    rt_batcher_free(b);
    rt_dataset_free(&ds);
}

static void test_batch_args(void) {
    RtDataset ds = toy(5), zero = toy(0);
    RtBatcher *b = rt_batcher_new(&ds, 0, 0, 0, NULL, 0, err, sizeof err);
    check(!b && strstr(err, "rt_batcher_new: batch must be at least 1, got 0"),
          "batcher: batch 0: %s", err);
    b = rt_batcher_new(NULL, 2, 0, 0, NULL, 0, err, sizeof err);
    check(!b && strstr(err, "no data set"), "batcher: no data set: %s", err);
    ds.col[1].t.shape[0] = 4;
    b = rt_batcher_new(&ds, 2, 0, 0, NULL, 1, err, sizeof err);
    check(!b && strstr(err, "column 1 'y' is not a tensor of shape [5, ...]"),
          "batcher: column of the wrong length: %s", err);
    ds.col[1].t.shape[0] = 5;
    RtDType w[2] = {RT_F32, (RtDType)17};
    b = rt_batcher_new(&ds, 2, 0, 0, w, 1, err, sizeof err);
    check(!b && strstr(err, "column 1 'y': bad dtype 17"), "batcher: bad wanted dtype: %s", err);
    RtDataset none = {0};
    b = rt_batcher_new(&none, 2, 0, 0, NULL, 1, err, sizeof err);
    check(!b && strstr(err, "0 columns"), "batcher: no columns: %s", err);
    RtDataset none2 = {0};
    check(!rt_batcher_new(&none2, 1, 1, 0, NULL, 1, NULL, 0) &&
              rt_data_csv(tpath("nothing.csv"), -1, -1, &none2, NULL, 0) == -1,
          "batcher and loaders: err may be NULL");
    b = rt_batcher_new(&zero, 4, 1, 0, NULL, 1, err, sizeof err);
    RtTensor t[2];
    check(b && rt_batcher_nbatches(b) == 0 && rt_batcher_next(b, t) == 0,
          "batcher: an empty data set has no batches");
    rt_batcher_start(b, 1);
    check(rt_batcher_next(b, t) == 0, "batcher: still none after start");
    rt_batcher_free(b);
    rt_batcher_free(NULL);
    check(rt_batcher_nbatches(NULL) == 0 && rt_batcher_next(NULL, t) == 0, "batcher: NULL is harmless");
    rt_dataset_free(&ds);
    rt_dataset_free(&zero);
}

//
// The real Fashion-MNIST, when installed
//

static void test_fashion(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    struct stat st;
    if (stat(dir, &st) != 0) {
        printf("note: %s not found; skipping the Fashion-MNIST checks\n", dir);
        return;
    }
    const char *splits[2] = {"train", "test"};
    const int64_t counts[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        RtDataset ds;
        double t0 = now_s();
        int rc = rt_data_idx_dir(dir, splits[s], 1, &ds, err, sizeof err);
        double t1 = now_s();
        int64_t n = counts[s], is[3] = {n, 28, 28};
        int ok = rc == 0 && ds.n == n && col_is(&ds, 0, "images", RT_F32, 3, is) &&
                 col_is(&ds, 1, "labels", RT_I32, 1, &n);
        int64_t per[10] = {0};
        float lo = 1, hi = 0;
        for (int64_t i = 0; ok && i < n; i++) {
            int32_t l = ((int32_t *)ds.col[1].t.data)[i];
            ok &= l >= 0 && l <= 9;
            if (ok)
                per[l]++;
        }
        for (int64_t i = 0; ok && i < n * 784; i++) {
            float v = ((float *)ds.col[0].t.data)[i];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        for (int c = 0; ok && c < 10; c++)
            ok &= per[c] == n / 10;   // Fashion-MNIST is balanced
        check(ok && lo == 0 && hi == 1,
              "fashion-mnist %s: %lld examples, [n, 28, 28] f32 in [0, 1], labels 0..9, %lld "
              "per class; loaded in %.2f s (%s)", splits[s], (long long)n, (long long)n / 10,
              t1 - t0, rc ? err : "");
        if (rc == 0) {
            RtDType want[2] = {RT_F32, RT_I64};
            RtBatcher *b = rt_batcher_new(&ds, 128, 1, 1, want, 1, err, sizeof err);
            RtTensor t[2];
            int64_t seen = 0, m, sum = 0;
            t0 = now_s();
            rt_batcher_start(b, 0);
            while ((m = rt_batcher_next(b, t)) > 0) {
                seen += m;
                for (int64_t i = 0; i < m; i++)
                    sum += ((int64_t *)t[1].data)[i];
            }
            t1 = now_s();
            check(seen == n && sum == 45 * n / 10,
                  "fashion-mnist %s: one shuffled, prefetched epoch of batches of 128 in %.3f s",
                  splits[s], t1 - t0);
            rt_batcher_free(b);
        }
        rt_dataset_free(&ds);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/kiln-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_idx_u8();
    test_idx_types();
    test_idx_dir();
    test_idx_bad();
    test_cifar();
    test_csv();
    test_npy();
    test_batch_cover();
    test_batch_peek();
    test_batch_order();
    test_batch_dtypes();
    test_batch_args();
    test_fashion();
    remove_tree(tmpdir);
    struct stat st;
    check(stat(tmpdir, &st) != 0, "scratch directory removed");
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
