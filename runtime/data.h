// data.h: data sets in memory (IDX, CIFAR-10, CSV, .npy) and mini-batches over them.
// Part of the runtime: it includes nothing else of the tree.
//
// A worked example: one epoch of shuffled Fashion-MNIST batches.
//
//     char err[512];
//     RtDataset ds;
//     if (rt_data_idx_dir("/usr/share/datasets/fashion-mnist", "train", 1, &ds, err, sizeof err))
//         fprintf(stderr, "%s\n", err);                  // "DIR: no train-images-idx3-ubyte..."
//     // ds.col[0]: "images" f32 [60000, 28, 28] in [0, 1]; ds.col[1]: "labels" i32 [60000]
//     RtDType want[2] = {RT_F32, RT_I64};
//     RtBatcher *b = rt_batcher_new(&ds, 128, 1, 42, want, 1, err, sizeof err);
//     RtTensor x[2];
//     rt_batcher_start(b, 0);                            // epoch 0
//     for (int64_t m; (m = rt_batcher_next(b, x)) > 0;)
//         train_step(&x[0], &x[1]);                      // [m, 28, 28] f32, [m] i64; m = 128
//                                                        // except the last batch, m = 96
//     rt_batcher_free(b);
//     rt_dataset_free(&ds);
//
// Sections, one per file: data.c (IDX, CIFAR-10, .npy), csv.c, batch.c.
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include "rt.h"

#define RT_DATA_MAXCOL 8
#define RT_DATA_NOLABEL INT32_MIN

// One column of a data set: a tensor of shape [n, ...] (example axis first).
typedef struct { char name[32]; RtTensor t; } RtColumn;
// A data set held in memory: n examples, ncol columns. source says where it came from
// (a path, or a directory and split), for messages.
typedef struct { int64_t n; int ncol; RtColumn col[RT_DATA_MAXCOL]; char source[512]; } RtDataset;

//
// data.c: loaders. Each returns 0, or -1 with a message in err (which may be NULL),
// "PATH: what is wrong". Malformed input never crashes; on failure *out is left empty
// (nothing to free). Label columns are i32. Feature columns are f32, divided by 255 when
// normalize is set and the stored type is u8 (exactly (float)v / 255.0f).
//

// IDX (MNIST, Fashion-MNIST): an images file of any IDX type (0x08 u8, 0x09 i8, 0x0B i16,
// 0x0C i32, 0x0D f32, 0x0E f64) and rank 1..8, and a labels file of rank 1 and integer type.
// Either may be gzip-compressed (told by its content, not its name). Bytes past the data
// the header describes are an error. Columns "images" f32 [n, d1, d2...] and "labels" i32
// [n]; labels may be NULL (then the images column alone).
int rt_data_idx(const char *images, const char *labels, int normalize, RtDataset *out,
                char *err, size_t errlen);
// A directory in the MNIST layout: split "train" reads train-images-idx3-ubyte and
// train-labels-idx1-ubyte, "test" t10k-*, each as is or with .gz appended.
int rt_data_idx_dir(const char *dir, const char *split, int normalize, RtDataset *out,
                    char *err, size_t errlen);

// CIFAR-10 binary batches: records of 1 label byte + 3072 image bytes (3x32x32, channel
// major). Columns "images" f32 [n, 3, 32, 32], "labels" i32 [n]. An empty file, a size that
// is not a multiple of 3073 and a label above 9 are errors.
int rt_data_cifar10(const char *const *files, int nfiles, int normalize, RtDataset *out,
                    char *err, size_t errlen);
// split "train": data_batch_1.bin .. data_batch_5.bin; "test": test_batch.bin; in DIR or
// in DIR/cifar-10-batches-bin.
int rt_data_cifar10_dir(const char *dir, const char *split, int normalize, RtDataset *out,
                        char *err, size_t errlen);

// .npy files (see rt_npy_load), one column each, named after the file's base name without
// .npy (cut to 31 bytes) and kept in their stored dtype. All must have rank >= 1 and the
// same first dimension; 1..RT_DATA_MAXCOL files with distinct names.
int rt_data_npy(const char *const *paths, int n, RtDataset *out, char *err, size_t errlen);

void rt_dataset_free(RtDataset *ds);   // frees the columns and empties *ds; NULL is a no-op

//
// csv.c: numbers separated by commas
//

// One row per line ('\n' or "\r\n"); blank lines are skipped; fields may have spaces around
// them and are read with strtod. header: 1 the first line is a header, 0 none, -1 detect
// (a header when the first line has a field that is not a number). label_col: the label's
// field (negative counts from the end, -1 the last), or RT_DATA_NOLABEL. Columns
// "features" f32 [n, fields - 1] ([n, fields] without a label) and "labels" i32 [n].
// Errors "PATH:LINE: ..." (ragged row, empty file) and "PATH:LINE:COL: ..." (a field that
// is not a number, a label that is not an integer in i32's range).
int rt_data_csv(const char *path, int label_col, int header, RtDataset *out, char *err,
                size_t errlen);

//
// batch.c: mini-batches
//

typedef struct RtBatcher RtBatcher;

// Batches of `batch` examples; the last batch of an epoch has n % batch when that is not
// 0 (no example is dropped or repeated). The data set's tensors must outlive the batcher
// (*ds itself need not). Without shuffle an epoch visits the examples in order; with it,
// in a permutation that depends on (seed, epoch) alone, the same on every machine:
//     perm = 0, 1, ..., n-1
//     for i = n-1 down to 1:
//         o = rt_philox4x32({(u32)i, (u32)(i >> 32), (u32)epoch, 0x53485546 ^ (u32)(epoch >> 32)},
//                           {(u32)seed, (u32)(seed >> 32)})
//         j = (((u64)o[0] << 32) | o[1]) % (i + 1);  swap perm[i], perm[j]
// (0x53485546 is "SHUF": these counters never meet those of rt_rand_*, whose last word is 0.)
// want: per column the dtype handed out (NULL: as stored); conversions are C casts, except
// that floats convert to integers saturating, NaN to 0. prefetch: one background thread,
// started here, assembles batch k+1 while the caller uses batch k. NULL on bad arguments
// or out of memory, with a message in err (which may be NULL).
RtBatcher *rt_batcher_new(const RtDataset *ds, int64_t batch, int shuffle, uint64_t seed,
                          const RtDType *want, int prefetch, char *err, size_t errlen);
int64_t rt_batcher_nbatches(const RtBatcher *b);   // per epoch: ceil(n / batch)
// Begins epoch `epoch` (0-based) at its first batch; may be called at any time, also
// mid-epoch. A new batcher stands at the start of epoch 0.
void rt_batcher_start(RtBatcher *b, int64_t epoch);
// Fills out[0..ncol) with the next batch of the current epoch, tensors of shape [m, ...]
// that the batcher owns (valid until the next rt_batcher_next, _start or _free; do not free
// them), and returns m; 0 when the epoch is over.
int64_t rt_batcher_next(RtBatcher *b, RtTensor *out);
// The batch rt_batcher_next will hand out next, without moving on: the same tensors
// (and storage) it will give, valid until the call after that next one; 0 at the
// epoch's end. The batch in use stays valid. A trainer copies the next batch to a
// GPU with it while the current one trains.
int64_t rt_batcher_peek(RtBatcher *b, RtTensor *out);
void rt_batcher_free(RtBatcher *b);   // NULL is a no-op

#endif
