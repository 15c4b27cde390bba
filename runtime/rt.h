// rt.h: the Kiln runtime, the thin C library that compiled graphs call into.
// It includes nothing else of the tree, so a standalone binary links it alone.
//
// A worked example: a compiled graph scaling a vector on the pool.
//
//     static void scale(void *ctx, int64_t lo, int64_t hi) {
//         float *x = ctx;
//         for (int64_t i = lo; i < hi; i++) x[i] *= 2.0f;
//     }
//
//     KRt *rt = rt_new(0);                            // one thread per usable CPU
//     int64_t shape[2] = {2, 3};
//     RtTensor t = rt_tensor_new(RT_F32, 2, shape);   // zeroed
//     for (int i = 0; i < 6; i++) ((float *)t.data)[i] = rt_rand_uniform_f32(42, i);
//     rt_parallel_for(rt, scale, t.data, rt_tensor_numel(&t), 1024);
//     rt_tensor_print(stdout, &t);   // [[1.22592, 1.97544, 1.65173], [1.4592, 0.652836, 0.629695]]
//     char err[256];
//     if (rt_npy_save("t.npy", &t, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
//     rt_tensor_free(&t);
//     rt_free_ctx(rt);
//
// Sections, one per file: mem.c, pool.c, gemm.c, tensor.c, philox.c, ffi.c, npy.c. For training,
// data.h adds data sets and mini-batches (data.c, csv.c, batch.c), ckpt.h safetensors
// checkpoints, and report.h progress, a metrics log and its plot.
#ifndef KILN_RT_H
#define KILN_RT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

//
// mem.c: dtypes and aligned memory
//

// Element types. The order and values are part of the ABI with generated code.
typedef enum { RT_BOOL, RT_I32, RT_I64, RT_F32, RT_F64 } RtDType;
#define RT_NDTYPES 5

size_t rt_dtype_size(RtDType t);       // bool is one byte (0 or 1); 0 for an invalid dtype
const char *rt_dtype_name(RtDType t);  // "bool", "i32", "i64", "f32", "f64"; "?" if invalid

#define RT_ALIGN 64
// 64-byte aligned memory; a request of 0 bytes still returns a unique pointer.
// NULL when out of memory. rt_calloc zeroes. rt_free(NULL) is a no-op.
void *rt_alloc(size_t bytes);
void *rt_calloc(size_t bytes);
void rt_free(void *p);

//
// pool.c: the runtime context (thread pool + scratch workspace)
//

// Every compiled graph receives a KRt. One KRt serves one graph run at a time;
// rt_parallel_for calls from several outside threads on one KRt are serialized.
typedef struct KRt KRt;

// nthreads <= 0 picks a default: KILN_THREADS from the environment if set and > 0,
// else the number of CPUs this process may run on (sched_getaffinity).
// The count includes the calling thread. NULL when out of memory.
KRt *rt_new(int nthreads);
void rt_free_ctx(KRt *rt);   // NULL is a no-op
int rt_threads(const KRt *rt);
// 1 if this process may run on more CPUs (sched_getaffinity) than `threads`: a
// helper thread (a batcher's prefetch) pays only then; on the pool's own CPUs it
// takes their turns and adds a context switch each way per batch.
int rt_spare_cpu(int threads);
// Resize the pool (n <= 0: the default as in rt_new). Must not run concurrently with
// rt_parallel_for on the same KRt; ignored when called from inside a parallel region.
void rt_set_threads(KRt *rt, int n);

typedef void (*RtRangeFn)(void *ctx, int64_t lo, int64_t hi);
// Run fn(ctx, lo, hi) over [0, n) in contiguous chunks with a static partition:
// nchunks = min(threads, n / grain), chunk t = [t*b + min(t, r), ...) with
// b = n / nchunks, r = n % nchunks (the first r chunks get one more item), so every chunk
// has at least grain items. The calling thread runs chunk 0 and worker t chunk t, unless
// a thread that finished its own finds a chunk not yet started (a worker still waking,
// or its CPU taken by another process): it runs that one too. Each chunk runs once, on
// one thread; which thread may differ between calls.
// Runs inline (one call fn(ctx, 0, n)) when there would be one chunk (n < 2 * grain), when
// the pool has one thread or rt is NULL, or when called from inside a parallel region (a
// nested call). grain < 1 counts as 1. Returns when every chunk is done; the writes of fn
// are then visible to the caller. Workers spin about 100 us after a job before sleeping, so
// back-to-back calls cost well under a microsecond of dispatch on an idle machine.
void rt_parallel_for(KRt *rt, RtRangeFn fn, void *ctx, int64_t n, int64_t grain);

// Scratch memory for one graph run, 64-byte aligned. It grows and never shrinks until
// rt_free_ctx; contents are not kept across a call that grows it, and a pointer from an
// earlier call is invalid after a call that asks for more. NULL when out of memory.
void *rt_workspace(KRt *rt, size_t bytes);
// Per-kernel timing (kiln run --profile): graphs compiled for profiling add each
// kernel's nanoseconds to ns[k] of the array set here (NULL: none, the default).
void rt_set_profile(KRt *rt, uint64_t *ns);
uint64_t *rt_profile(KRt *rt);
uint64_t rt_clock_ns(void);   // CLOCK_MONOTONIC in nanoseconds

//
// gemm.c: matrix products
//

// For p in [0, batch): C_p = A_p @ B_p + beta * C_p, where A_p is m x k, B_p is k x n and
// C_p is m x n, all read through strides in elements: element (i, j) of A_p is
// a[p*a_batch + i*a_rs + j*a_cs], and likewise for b and c. A batch stride of 0 broadcasts
// that operand over the batch, and a transposed operand is only swapped strides (no copy).
// beta == 0 never reads C (it may hold NaN). C must not overlap A or B. A mini-batch
// against a broadcast operand whose rows (columns) follow on from one product to the next
// is computed as one product of batch*m rows (batch*n columns). The work runs on rt's pool,
// in tiles, each a single-threaded GEMM: for f32 Kiln's packed GEMM (any strides; the
// environment variable KILN_GEMM=kiln|blis|loops, read by rt_new, picks another path),
// for f64 a BLIS call when Kiln is built with BLIS and the strides are ones BLIS accepts
// (positive, not overlapping), else plain C loops; rt may be NULL.
void rt_gemm_f32(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t a_batch, int64_t a_rs, int64_t a_cs,
                 const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs,
                 float *c, int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta);
void rt_gemm_f64(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k,
                 const double *a, int64_t a_batch, int64_t a_rs, int64_t a_cs,
                 const double *b, int64_t b_batch, int64_t b_rs, int64_t b_cs,
                 double *c, int64_t c_batch, int64_t c_rs, int64_t c_cs, double beta);
// An epilogue: the same product, and epi(ctx, off, rs, rows, cols) is called once for
// every block of C whose final values are in place, while the block is still in cache:
// rows x cols elements, element (r, q) of the block at c[off + r*rs + q*c_cs] with
// c_cs == 1 (a C with other column strides gets one call per element, rows = cols = 1).
// The blocks cover every element of every product exactly once, calls come from the pool's
// threads concurrently (on disjoint blocks), and an element is final before its block's
// call. Compiled graphs put the elementwise kernels that follow a product (bias,
// activation, an optimizer's update) here, so they read the product where it was written.
typedef void (*RtGemmEpilogue)(void *ctx, int64_t off, int64_t rs, int64_t rows, int64_t cols);
void rt_gemm_f32_epi(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k,
                     const float *a, int64_t a_batch, int64_t a_rs, int64_t a_cs,
                     const float *b, int64_t b_batch, int64_t b_rs, int64_t b_cs,
                     float *c, int64_t c_batch, int64_t c_rs, int64_t c_cs, float beta,
                     RtGemmEpilogue epi, void *ctx);
void rt_gemm_f64_epi(KRt *rt, int64_t batch, int64_t m, int64_t n, int64_t k,
                     const double *a, int64_t a_batch, int64_t a_rs, int64_t a_cs,
                     const double *b, int64_t b_batch, int64_t b_rs, int64_t b_cs,
                     double *c, int64_t c_batch, int64_t c_rs, int64_t c_cs, double beta,
                     RtGemmEpilogue epi, void *ctx);
// Implicit im2col: the same product with A the matrix of a convolution's windows, packed
// from the image x as it is needed instead of materialized (gemm_win.c explains). geom
// holds RT_WIN_NGEOM values: x's sizes [N, C, H, W] and strides in elements, the window
// (kernel, stride, padding at the top and left, dilation) and the output's OH, OW. The
// window matrix has a row per output pixel (n, oh, ow) and a column per tap (c, i, j):
//   W[(n*OH + oh)*OW + ow][(c*KH + i)*KW + j] = x[n, c, oh*SH - PT + i*DH, ow*SW - PL + j*DW]
// and 0 where that falls outside x. A = W (m = N*OH*OW, k = C*KH*KW: a convolution's
// forward product) or, with taps_rows, A = W^T (m = C*KH*KW, k = N*OH*OW: its weights'
// gradient); with taps_rows RT_WIN_TAPS_ONES, A = W^T and a last row of ones (m =
// C*KH*KW + 1): C's last row is then the sum of B's rows, the bias's gradient, in the
// same product. One product (no batch); C is written through its strides; epi may be
// NULL. The result is bit for bit the one rt_gemm_*_epi gives on the materialized matrix.
enum {
    RT_WIN_N, RT_WIN_C, RT_WIN_H, RT_WIN_W, RT_WIN_SN, RT_WIN_SC, RT_WIN_SH, RT_WIN_SW,
    RT_WIN_KH, RT_WIN_KW, RT_WIN_STRIDE_H, RT_WIN_STRIDE_W, RT_WIN_PAD_T, RT_WIN_PAD_L,
    RT_WIN_DIL_H, RT_WIN_DIL_W, RT_WIN_OH, RT_WIN_OW, RT_WIN_NGEOM
};
enum { RT_WIN_TAPS_ONES = 2 };
void rt_gemm_f32_win(KRt *rt, int64_t m, int64_t n, int64_t k, const float *x, const int64_t *geom, int taps_rows,
                     const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, float beta,
                     RtGemmEpilogue epi, void *ctx);
void rt_gemm_f64_win(KRt *rt, int64_t m, int64_t n, int64_t k, const double *x, const int64_t *geom, int taps_rows,
                     const double *b, int64_t b_rs, int64_t b_cs, double *c, int64_t c_rs, int64_t c_cs, double beta,
                     RtGemmEpilogue epi, void *ctx);
// rt_gemm_f32_win's products by Winograd's minimal filtering (wino.c): the convolution in
// 6x6 or 8x8 tiles of the image transformed, 36 or 64 products per tile over the channels
// instead of KH*KW per output (F(4x4, 5x5): 6.25x fewer multiplies, F(4x4, 3x3): 4x,
// less the tiles' overhang past the image's edge). taps_rows 0 is
// the forward product; 1 or RT_WIN_TAPS_ONES the weights' gradient (the windows'
// transpose times dY as B), summed over the tiles in the transformed domain. For kernels
// of 2 to 5 taps a side at stride 1 without dilation, with Kiln's own micro-kernels and
// c_cs == 1; any other product is rt_gemm_f32_win's. Not bit for bit the window product:
// within a few 1e-6 of the largest sum of an output's terms' magnitudes.
void rt_gemm_f32_wino(KRt *rt, int64_t m, int64_t n, int64_t k, const float *x, const int64_t *geom, int taps_rows,
                      const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t c_rs, int64_t c_cs, float beta,
                      RtGemmEpilogue epi, void *ctx);
// 1 if this runtime was built with BLIS (meson option blis), 0 if rt_gemm_* is the loops.
int rt_have_blis(void);
// The columns of Kiln's f32 micro-kernel on this CPU, with KILN_GEMM as rt_new reads
// it: 32 with AVX-512, 16 with AVX2; 1 on the BLIS and loops paths. A product's
// columns are computed in whole micro-tiles (convolution's cost model counts that).
int rt_gemm_f32_cols(void);

//
// tensor.c: host tensors
//

#define RT_MAXDIM 8
// Dense, C order (row-major), no strides. owns: rt_tensor_free frees data.
typedef struct {
    RtDType dtype;
    int ndim;
    int64_t shape[RT_MAXDIM];
    void *data;
    int owns;
} RtTensor;

// Zeroed, owns its data (64-byte aligned). On a bad dtype/ndim/shape or out of memory
// the result has data == NULL.
RtTensor rt_tensor_new(RtDType t, int ndim, const int64_t *shape);
void rt_tensor_free(RtTensor *t);   // frees data if owned; leaves data NULL
int64_t rt_tensor_numel(const RtTensor *t);   // 1 for a 0-d tensor
size_t rt_tensor_nbytes(const RtTensor *t);
void rt_tensor_add(RtTensor *dst, const RtTensor *src);   // dst += src elementwise: f32 or f64, as many elements
// n elements of dtype st at src into dtype dt at dst, as a C cast would, except that a
// float out of an integer type's range saturates and NaN becomes 0: how data reaches a
// graph whose input has another dtype than the file (the batcher, a binary's predict).
void rt_convert(void *dst, RtDType dt, const void *src, RtDType st, int64_t n);
// The index of the first of n floats at src (dtype st) that is not a whole number in the
// range of the integer dtype dt, so that rt_convert would change it; -1 if none (or if st
// is not a float or dt not an integer). Data that would be truncated is refused with it.
int64_t rt_first_inexact(const void *src, RtDType st, RtDType dt, int64_t n);

// Print as nested lists, no trailing newline: [[1, 2], [3, 4]]. A 0-d tensor prints as a
// bare number; floats use %g (nan, inf, -inf); integers print as integers; bool as
// true/false. An empty tensor prints its nesting: shape (0) is [], shape (2, 0) is [[], []].
// More than 1000 elements: axes longer than 6 show their first and last 3 entries with
// "..." between, as NumPy does: [0, 1, 2, ..., 9997, 9998, 9999].
void rt_tensor_print(FILE *f, const RtTensor *t);
char *rt_tensor_to_string(const RtTensor *t);   // the same text, malloc'd; NULL if out of memory

//
// philox.c: counter-based random numbers
//

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// with the Random123 constants. Per round, with (M0, M1) = (0xD2511F53, 0xCD9E8D57):
//     (hi0, lo0) = M0 * c0;  (hi1, lo1) = M1 * c2      (32x32 -> 64-bit products)
//     c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}
// then k0 += 0x9E3779B9, k1 += 0xBB67AE85 between rounds; 10 rounds.
void rt_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

// Element `index` of stream `seed`. The code generator emits this same arithmetic inline
// in C and CUDA, so it is specified exactly. All 32-bit operations are unsigned.
//   key = {(uint32)seed, (uint32)(seed >> 32)}
//   uniform:  ctr = {(uint32)index, (uint32)(index >> 32), 0, 0}, o = philox(ctr, key)
//     f32: (float)(o[0] >> 8) * 0x1p-24f                                  in [0, 1)
//     f64: (double)((((uint64)o[0] << 32) | o[1]) >> 11) * 0x1p-53       in [0, 1)
//     (both are exact, so any IEEE machine gives the same bits.)
//   normal:   ctr = {(uint32)index, (uint32)(index >> 32), 1, 0}, o = philox(ctr, key)
//     f32, Box-Muller on o[0], o[1] with only IEEE f32 +, -, *, sqrtf and integer ops:
//       u1 = (float)((o[0] >> 8) + 1) * 0x1p-24f          in (0, 1], never log(0)
//       z  = sqrtf(-2.0f * poly_logf(u1)) * poly_cos2pi(o[1] >> 8)
//     where poly_logf and poly_cos2pi are the polynomial evaluations in philox.c, whose
//     operation order is normative (copy it; do not call a libm or CUDA log/cos).
//     Compile without FMA contraction (C: -ffp-contract=off; CUDA: --fmad=false or the
//     __fadd_rn/__fmul_rn intrinsics), without fast-math, with f32 evaluated in f32
//     (FLT_EVAL_METHOD 0: SSE, NEON, CUDA; not x87). Flush-to-zero does not matter.
//     Pinned: normal_f32(0, 0) has bits 0x3f88a6ca, normal_f32(42, 1000) 0xbf7a0ea9.
//     Accuracy: log and cos within 2 ulp, z within 1e-6 of exact Box-Muller on u1, u2.
//     f64, Box-Muller on all four words with only IEEE f64 +, -, *, /, sqrt and integer ops:
//       u1 = (double)(((((uint64)o[0] << 32) | o[1]) >> 11) + 1) * 0x1p-53     in (0, 1]
//       k  = (((uint64)o[2] << 32) | o[3]) >> 11                         (u2 = k * 2^-53)
//       z  = sqrt(-2.0 * poly_log(u1)) * poly_cos2pi64(k)
//     poly_log (fdlibm's log) and poly_cos2pi64 (FreeBSD's k_cos/k_sin after an exact
//     quarter-turn reduction of k) are in philox.c, normative as the f32 ones are; the
//     same compilation rules. So f64 normals too are the same bits on every IEEE machine
//     and on the GPU. Pinned: normal_f64(0, 0) and normal_f64(42, 1000) in test_runtime.
//     Accuracy: log within 1 ulp, cos within 2 ulp (1.2e-16 absolute) of the exact values.
float rt_rand_uniform_f32(uint64_t seed, uint64_t index);
double rt_rand_uniform_f64(uint64_t seed, uint64_t index);
float rt_rand_normal_f32(uint64_t seed, uint64_t index);
double rt_rand_normal_f64(uint64_t seed, uint64_t index);

//
// ffi.c: calling a graph whose signature is known only at run time
//

// Calls void fn(void *args[0], ..., void *args[nargs-1]) through libffi.
// Returns 0, or -1 when the call could not be prepared (ffi_prep_cif, nargs < 0, memory).
int rt_ffi_call_ptrs(void *fn, int nargs, void **args);

//
// npy.c: NumPy .npy files
//

// Format versions 1.0, 2.0 and 3.0 on read, C or Fortran order (reordered to C order on
// read); dtypes <f4 <f8 <i4 <i8 |b1, and on read only, widened exactly: u1 i1 u2 i2 to i32,
// u4 to i64, f2 to f32 (big-endian '>' variants are byte-swapped on read). Other dtypes
// (u8, complex, objects, structured) and more than RT_MAXDIM axes are rejected.
// Both return 0, or -1 with a message in err (which may be NULL): "path: what went wrong".
// Save writes version 1.0 in NumPy's layout (data 64-byte aligned), atomically: a temporary
// file beside path, fsync, rename.
int rt_npy_save(const char *path, const RtTensor *t, char *err, size_t errlen);
// On success *out owns new data (free it with rt_tensor_free); on failure out->data is NULL.
int rt_npy_load(const char *path, RtTensor *out, char *err, size_t errlen);

// npz.c: .npz archives (np.savez, np.savez_compressed): zip files of .npy members,
// stored or deflated, Zip64 included; each member's CRC-32 is checked. Members are
// named without ".npy". rt_npz_list: their names in archive order (free(*names)).
int rt_npz_list(const char *path, char (**names)[256], int *n, char *err, size_t errlen);
int rt_npz_load(const char *path, const char *name, RtTensor *out, char *err, size_t errlen);
// "A.npz:NAME" names one array of an archive, unless a file has that whole name:
// the archive's path into archive[len] and the member's name returned; NULL if
// path is no such reference (or the archive's path is too long).
const char *rt_npz_split(const char *path, char *archive, size_t len);
// An input as one tensor: A.npz:NAME, or an archive A.npz that holds one array.
int rt_npz_load_one(const char *path, RtTensor *out, char *err, size_t errlen);

#endif
