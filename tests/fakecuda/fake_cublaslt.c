// fake_cublaslt.c - a test-only stand-in for libcublasLt (KILN_CUBLASLT names it)
// for fake_cuda.c's device, whose memory is host memory: the matmul descriptor,
// its layouts and cublasLtMatmul with the epilogues Kiln asks for (DEFAULT,
// BIAS, RELU_BIAS), computed plainly in column-major, with the checks cuBLASLt
// makes (attribute sizes, layouts that do not match the operation, a bias
// epilogue without a bias). $KILN_FAKE_CUBLASLT_STATUS: a status every matmul
// returns instead (to see Kiln report it). $KILN_FAKE_CUBLASLT_LOG: a file each
// matmul appends "m n k epilogue" to, so tests can see which products went here.
// The work runs on the fake driver's stream (queue.h), in its turn.
#include "queue.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { TRANSA = 3, TRANSB = 4, EPILOGUE = 7, BIAS_POINTER = 8 };
enum { EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4 };
typedef struct { int compute, scale; int32_t ta, tb; uint32_t epi; const void *bias; } Desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld; } Layout;

int cublasLtCreate(void **h) { return (*h = malloc(1)) ? OK : NOT_INITIALIZED; }
int cublasLtDestroy(void *h) { free(h); return OK; }

int cublasLtMatmulDescCreate(Desc **d, int compute, int scale) {
  if ((compute != 68 || scale != 0) && (compute != 70 || scale != 1)) return INVALID_VALUE;   // 32F/R_32F, 64F/R_64F
  if (!(*d = calloc(1, sizeof **d))) return NOT_INITIALIZED;
  (*d)->compute = compute;
  (*d)->scale = scale;
  (*d)->epi = EPI_DEFAULT;
  return OK;
}
int cublasLtMatmulDescDestroy(Desc *d) { free(d); return OK; }
int cublasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t n) {
  if (!buf) return INVALID_VALUE;
  switch (attr) {
  case TRANSA: if (n != 4) return INVALID_VALUE; d->ta = *(const int32_t *)buf; return d->ta == 0 || d->ta == 1 ? OK : INVALID_VALUE;
  case TRANSB: if (n != 4) return INVALID_VALUE; d->tb = *(const int32_t *)buf; return d->tb == 0 || d->tb == 1 ? OK : INVALID_VALUE;
  case EPILOGUE: if (n != 4) return INVALID_VALUE; d->epi = *(const uint32_t *)buf; return OK;
  case BIAS_POINTER: if (n != sizeof(void *)) return INVALID_VALUE; d->bias = *(const void *const *)buf; return OK;
  default: return INVALID_VALUE;
  }
}

int cublasLtMatrixLayoutCreate(Layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if ((type != 0 && type != 1) || ld < (int64_t)rows || ld < 1) return INVALID_VALUE;
  if (!(*l = malloc(sizeof **l))) return NOT_INITIALIZED;
  **l = (Layout){type, rows, cols, ld};
  return OK;
}
int cublasLtMatrixLayoutDestroy(Layout *l) { free(l); return OK; }

// A matmul's arguments, taken when it is queued, for when its stream runs it.
typedef struct {
  Desc d;
  Layout la, lb, ld;
  uint64_t m, n, k;
  double alpha;
  const void *A, *B;
  void *D;
} Lt;

#define MATMUL(T) \
  for (uint64_t j = 0; j < g->n; j++) \
    for (uint64_t i = 0; i < g->m; i++) { \
      double acc = 0; \
      for (uint64_t l = 0; l < g->k; l++) \
        acc += (double)((const T *)g->A)[g->d.ta ? l + i * g->la.ld : i + l * g->la.ld] * \
               ((const T *)g->B)[g->d.tb ? j + l * g->lb.ld : l + j * g->lb.ld]; \
      T v = (T)((T)g->alpha * (T)acc); \
      if (g->d.epi & EPI_BIAS) v += ((const T *)g->d.bias)[i]; \
      if ((g->d.epi & EPI_RELU) && !(v > 0)) v = 0; \
      ((T *)g->D)[i + j * g->ld.ld] = v; \
    }

static void run(void *p) {
  const Lt *g = p;
  if (g->d.scale == 1) { MATMUL(double) }
  else { MATMUL(float) }
}

int cublasLtMatmul(void *h, Desc *d, const void *alpha, const void *A, Layout *la, const void *B, Layout *lb,
                   const void *beta, const void *C, Layout *lc, void *D, Layout *ld, const void *algo, void *ws,
                   size_t wsn, void *stream) {
  (void)h; (void)C; (void)lc; (void)algo; (void)ws; (void)wsn;
  const char *fail = getenv("KILN_FAKE_CUBLASLT_STATUS");
  if (fail && *fail) return atoi(fail);
  uint64_t m = d->ta ? la->cols : la->rows, k = d->ta ? la->rows : la->cols;
  uint64_t kb = d->tb ? lb->cols : lb->rows, n = d->tb ? lb->rows : lb->cols;
  int f64 = d->scale == 1;
  if (k != kb || ld->rows != m || ld->cols != n || la->type != d->scale || lb->type != d->scale || ld->type != d->scale)
    return INVALID_VALUE;
  if (d->epi != EPI_DEFAULT && d->epi != EPI_BIAS && d->epi != (EPI_RELU | EPI_BIAS)) return NOT_SUPPORTED;
  if ((d->epi & EPI_BIAS) && !d->bias) return INVALID_VALUE;
  if (f64 ? *(const double *)beta != 0 : *(const float *)beta != 0) return NOT_SUPPORTED;   // C is not read here
  const char *log = getenv("KILN_FAKE_CUBLASLT_LOG");
  FILE *f = log && *log ? fopen(log, "a") : NULL;
  if (f) { fprintf(f, "%llu %llu %llu %u\n", (unsigned long long)m, (unsigned long long)n, (unsigned long long)k, d->epi); fclose(f); }
  Lt *g = malloc(sizeof *g);
  if (!g) return NOT_INITIALIZED;
  *g = (Lt){*d, *la, *lb, *ld, m, n, k, f64 ? *(const double *)alpha : *(const float *)alpha, A, B, D};
  return fake_enqueue(stream, run, g) ? INVALID_VALUE : OK;
}
