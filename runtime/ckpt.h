// ckpt.h: checkpoints as safetensors files (safetensors.c), the format of Hugging Face's
// `safetensors` package, so PyTorch and NumPy read what Kiln writes and the other way round.
//
// A worked example: save two parameters with a note, load them back.
//
//     RtNamedTensor ts[] = {{"w", &w}, {"b", &b}};
//     const char *meta[] = {"epoch", "3", "model", "mlp"};
//     char err[256];
//     if (rt_safetensors_save("model.safetensors", ts, 2, meta, 2, err, sizeof err) != 0)
//         fprintf(stderr, "%s\n", err);
//     RtTensorFile f;
//     if (rt_safetensors_load("model.safetensors", &f, err, sizeof err) != 0)
//         fprintf(stderr, "%s\n", err);   // e.g. "model.safetensors: truncated header"
//     const RtTensor *w2 = rt_tensorfile_find(&f, "w");        // NULL if absent
//     const char *epoch = rt_tensorfile_meta(&f, "epoch");     // "3"
//     rt_tensorfile_free(&f);
//
// The format: an 8-byte little-endian header length N, N bytes of JSON
//     {"__metadata__": {"epoch": "3"},
//      "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// then the data, little-endian, C order; offsets count from the end of the header.
#ifndef KILN_CKPT_H
#define KILN_CKPT_H

#include "rt.h"

typedef struct {
    const char *name;
    const RtTensor *t;
} RtNamedTensor;

// Writes the tensors in the order given (dtypes F32 F64 I32 I64 BOOL), the header padded
// with spaces to a multiple of 8. meta: nmeta key/value pairs, meta[2*i] and meta[2*i+1]
// (any UTF-8; the "__metadata__" entry is left out when nmeta is 0). Names and keys must be
// valid UTF-8 and distinct; "__metadata__" is not a tensor name. Atomically: a temporary
// file beside path, write, fsync, rename over path, fsync the directory; a failure at any
// point leaves an existing file untouched and removes the temporary file.
// 0, or -1 with "path: what went wrong" in err (which may be NULL).
int rt_safetensors_save(const char *path, const RtNamedTensor *ts, int n, const char *const *meta,
                        int nmeta, char *err, size_t errlen);
// Whether a file can be saved at path later: its directory is there and writable (file.c).
// Training asks before its first step, so a checkpoint's typo costs no epoch. 0, or -1 with
// "path: ..." in err.
int rt_check_writable(const char *path, char *err, size_t errlen);

// A loaded file: n tensors in the order of the header, each owning its data.
typedef struct {
    int n;
    char **names;
    RtTensor *t;
    int nmeta;
    char **meta_keys;
    char **meta_vals;
} RtTensorFile;

// Reads a file written by Kiln or by the Python package (PyTorch, NumPy, ...). F32 F64 I32
// I64 BOOL load as such (bool bytes become 0 or 1); F16 and BF16 become f32; I8 U8 I16
// become i32; another dtype is an error naming the tensor and the dtype. Everything is
// checked: the header length against the file size (headers over 100 MB are refused, as
// the package does), the JSON (strict: objects, arrays, strings, integers; valid UTF-8;
// no duplicate keys), each entry's keys, rank <= RT_MAXDIM, offsets in range and not
// overlapping (gaps are allowed), size == numel * itemsize. Messages name the path and
// the tensor: "path: truncated header: ...", "path: tensor 'w': data_offsets [0, 400]
// past the end of the file (96 bytes of data)", "path: bad header at byte 57: ...".
// 0, or -1 with the message in err (which may be NULL); then *out is empty (all zero).
int rt_safetensors_load(const char *path, RtTensorFile *out, char *err, size_t errlen);
// The same from n bytes in memory (name: for messages).
int rt_safetensors_load_mem(const void *p, size_t n, const char *name, RtTensorFile *out,
                            char *err, size_t errlen);
const RtTensor *rt_tensorfile_find(const RtTensorFile *f, const char *name);   // NULL if absent
const char *rt_tensorfile_meta(const RtTensorFile *f, const char *key);        // NULL if absent
void rt_tensorfile_free(RtTensorFile *f);   // leaves *f empty; an empty *f is a no-op

#endif
