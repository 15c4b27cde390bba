// Lowering choice: picks how each kernel that has several implementations is
// lowered, and records why. Needs: a fused schedule. Keeps: everything else.
// A float matrix product large enough that a library call pays goes to the
// runtime's rt_gemm_* (BLIS, MM_GEMM); smaller ones, and all of them when
// the runtime has no BLIS, are generated loops (MM_LOOPS). A product whose
// size is symbolic and may fall either side gets both, chosen per run
// (MM_BY_SIZE). Operands are read through their views' strides either way:
// fuse.c gives a transposed or broadcast operand no buffer of its own.
#include "passes.h"
#include <inttypes.h>
#include <stdio.h>

// When BLIS pays, measured with kiln_run on this project's machine (Xeon,
// AVX-512, one thread; f32 microseconds, loops / gemm; NT is a @ transpose(b)):
//   m*n*k    shape          loops    gemm
//    1728    12x12x12        0.35    0.66
//    4096    16x16x16        0.70    0.67    (NT 0.74 / 0.85, f64 0.70 / 0.79)
//    8000    20x20x20        1.54    0.83    (f64 1.54 / 0.96)
//    8192    16x32x16        1.63    0.80    (128x8x8 NT 1.35 / 1.63)
//   32768    32x32x32        6.21    1.20
//    2^21    128x128x128      128      41    (NT 602 / 49)
//    2^27    512x512x512     9634    2570    (NT 123624 / 2537)
// Loops win below about 4096 multiply-adds, where a BLIS call's fixed cost
// (about 0.6 us) is most of the work; from 8192 on BLIS wins by 1.2-2x and
// then 3x and more (50x when b is transposed: the loops then read b across
// rows). One exception: an inner dimension under 8 with b transposed, where
// BLIS is 2x slower at every size (256x256x4 NT: 36 / 72 us; NN 11 / 6.9),
// so that stays loops.
#define GEMM_MIN_WORK 8192
#define GEMM_MIN_K 8

// The size as text ("B*128*10") and its constant part (symbols count as 1).
static double work_text(const IrCtx *c, const Node *mm, char *buf, size_t len, int *symbolic) {
  Dim f[IR_MAXDIM + 3];
  int nf = sched_mm_work(mm, f);
  double work = 1;
  size_t n = 0;
  *symbolic = 0;
  for (int i = 0; i < nf; i++) {
    const char *sep = i ? "*" : "";
    work *= (double)f[i].k;
    if (!f[i].sym || !f[i].k) n += snprintf(buf + n, len - n, "%s%" PRId64, sep, f[i].k);
    else if (f[i].k == 1) n += snprintf(buf + n, len - n, "%s%s", sep, c->symnames[f[i].sym - 1]);
    else n += snprintf(buf + n, len - n, "%s%" PRId64 "*%s", sep, f[i].k, c->symnames[f[i].sym - 1]);
    *symbolic |= f[i].sym && f[i].k;
    if (n >= len) break;
  }
  return work;
}

// b's rows are not contiguous: it is a transpose that moves the last axis
// (a.i holds the permutation), under any broadcast over the batch.
static int rhs_transposed(const Node *mm) {
  const Node *b = mm->src[1];
  while (b->op == OP_BROADCAST) b = b->src[0];
  return b->op == OP_TRANSPOSE && b->a.i[b->ndim - 1] != b->ndim - 1;
}

static void lower_matmul(const IrCtx *c, Kernel *K, const LowerOpts *o) {
  Node *n = K->node;
  Dim kd = n->src[0]->shape[n->ndim - 1];
  char w[80];
  int symbolic;
  double work = work_text(c, n, w, sizeof w, &symbolic);
  const char *fold = sched_mm_shared_rhs(n) ? ", batch as one product" : "";
  K->strategy = MM_LOOPS;
  if (!o->gemm) snprintf(K->why, sizeof K->why, "loops: no BLIS in this build");
  else if (n->dtype != DT_F32 && n->dtype != DT_F64)
    snprintf(K->why, sizeof K->why, "loops: %s has no BLIS product", ir_dtype_name(n->dtype));
  else if ((!symbolic || work == 0) && work < GEMM_MIN_WORK)
    snprintf(K->why, sizeof K->why, "loops: m*n*k = %s = %.0f < %d", w, work, GEMM_MIN_WORK);
  else if (!kd.sym && kd.k < GEMM_MIN_K && rhs_transposed(n))
    snprintf(K->why, sizeof K->why, "loops: inner dimension %" PRId64 " < %d, b transposed", kd.k, GEMM_MIN_K);
  else if (work >= GEMM_MIN_WORK) {
    K->strategy = MM_GEMM;
    if (symbolic) snprintf(K->why, sizeof K->why, "gemm: m*n*k = %s >= %d at any size%s", w, GEMM_MIN_WORK, fold);
    else snprintf(K->why, sizeof K->why, "gemm: m*n*k = %s = %.0f >= %d%s", w, work, GEMM_MIN_WORK, fold);
  } else {
    K->strategy = MM_BY_SIZE;
    K->gemm_from = GEMM_MIN_WORK;
    snprintf(K->why, sizeof K->why, "by size: gemm when m*n*k = %s >= %d, else loops%s", w, GEMM_MIN_WORK, fold);
  }
}

void pass_lower(Schedule *s, const LowerOpts *o) {
  for (int k = 0; k < s->nk; k++)
    if (s->ks[k].kind == KS_MATMUL) lower_matmul(s->ctx, &s->ks[k], o);
}
