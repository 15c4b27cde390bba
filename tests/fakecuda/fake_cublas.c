// fake_cublas.c - a test-only stand-in for libcublas (KILN_CUBLAS names it) for
// fake_cuda.c's device, whose memory is host memory: the strided batched GEMMs
// as cuBLAS defines them (column-major, op N or T, alpha and beta), computed
// plainly, with the argument checks cuBLAS makes (status 7, INVALID_VALUE, for a
// leading dimension below the stored rows). It lets CI run the host's cuBLAS
// path, the column-major mapping of Kiln's row-major products included.
// The work runs on the fake driver's stream (queue.h), in its turn.
// $KILN_FAKE_CUBLAS_STATUS: a status every GEMM returns instead (to see Kiln report it).
#include "queue.h"

#include <stdlib.h>

typedef struct { void *stream; } Handle;
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7 };

int cublasCreate_v2(Handle **h) { return (*h = calloc(1, sizeof **h)) ? OK : NOT_INITIALIZED; }
int cublasDestroy_v2(Handle *h) { free(h); return OK; }
int cublasGetVersion_v2(Handle *h, int *v) { (void)h; *v = 1; return OK; }
int cublasSetStream_v2(Handle *h, void *s) { h->stream = s; return OK; }

static int check(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, int batch) {
  int arows = ta ? k : m, brows = tb ? n : k;   // the stored (column-major) matrices' rows
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1) || m < 0 || n < 0 || k < 0 || batch < 0) return INVALID_VALUE;
  if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1)) return INVALID_VALUE;
  return OK;
}

// A GEMM's arguments, taken when it is queued (alpha and beta by value), for when its stream runs it.
typedef struct {
  int ta, tb, m, n, k, lda, ldb, ldc, batch;
  double alpha, beta;
  unsigned long long a, b, c;
  long long sa, sb, sc;
} Gemm;

#define GEMM(NAME, T) \
  static void run_##T(void *p) { \
    const Gemm *g = p; \
    for (int q = 0; q < g->batch; q++) { \
      const T *A = (const T *)g->a + q * g->sa, *B = (const T *)g->b + q * g->sb; \
      T *C = (T *)g->c + q * g->sc; \
      for (int j = 0; j < g->n; j++) \
        for (int i = 0; i < g->m; i++) { \
          T acc = 0; \
          for (int l = 0; l < g->k; l++) \
            acc += (g->ta ? A[l + (long long)i * g->lda] : A[i + (long long)l * g->lda]) * \
                   (g->tb ? B[j + (long long)l * g->ldb] : B[l + (long long)j * g->ldb]); \
          T *o = &C[i + (long long)j * g->ldc]; \
          *o = g->beta == 0 ? (T)g->alpha * acc : (T)g->alpha * acc + (T)g->beta * *o; \
        } \
    } \
  } \
  int NAME(Handle *h, int ta, int tb, int m, int n, int k, const T *alpha, unsigned long long a, int lda, long long sa, \
           unsigned long long b, int ldb, long long sb, const T *beta, unsigned long long c, int ldc, long long sc, \
           int batch) { \
    const char *fail = getenv("KILN_FAKE_CUBLAS_STATUS"); \
    if (fail && *fail) return atoi(fail); \
    int r = check(ta, tb, m, n, k, lda, ldb, ldc, batch); \
    if (r) return r; \
    Gemm *g = malloc(sizeof *g); \
    if (!g) return NOT_INITIALIZED; \
    *g = (Gemm){ta, tb, m, n, k, lda, ldb, ldc, batch, *alpha, *beta, a, b, c, sa, sb, sc}; \
    return fake_enqueue(h->stream, run_##T, g) ? INVALID_VALUE : OK; \
  }
GEMM(cublasSgemmStridedBatched, float)
GEMM(cublasDgemmStridedBatched, double)
