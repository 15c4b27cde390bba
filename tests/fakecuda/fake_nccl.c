// fake_nccl.c - a test-only stand-in for libnccl.so.2 (KILN_NCCL names it) for
// fake_cuda.c's devices, whose memory is host memory: ncclCommInitAll makes one
// clique of communicators, and all-reduces (sum, f32 or f64) queued between
// ncclGroupStart and ncclGroupEnd are done at the group's end, the k-th call of
// each rank with the k-th of every other. It refuses what would hang or fail on
// real NCCL: a collective of several ranks outside a group (one thread would
// wait for itself), ranks that queued different counts or types, a stream that
// is not the rank's device's (the fake driver's stream records its context).
// A group's reductions run when it ends, after all work queued on the ranks' streams.
#include "queue.h"

#include <stdlib.h>
#include <string.h>

enum { OK = 0, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };
enum { SUM = 0, F32 = 7, F64 = 8 };
typedef struct { const void *send; void *recv; size_t count; int dtype; void *stream; } Call;
typedef struct Clique Clique;
typedef struct { Clique *q; int rank, device; Call *calls; int ncalls; } Comm;
struct Clique { int n, live; Comm **ranks; };
static __thread int depth;   // ncclGroupStart nesting

int ncclGetVersion(int *v) { *v = 22105; return OK; }
const char *ncclGetErrorString(int r) {
  return r == OK ? "no error" : r == INVALID_ARGUMENT ? "invalid argument" : r == INVALID_USAGE ? "invalid usage" : "unhandled error";
}

int ncclCommInitAll(Comm **comms, int n, const int *devices) {
  if (n < 1) return INVALID_ARGUMENT;
  Clique *q = calloc(1, sizeof *q);
  q->n = q->live = n;
  q->ranks = calloc(n, sizeof *q->ranks);
  for (int i = 0; i < n; i++) {
    Comm *c = calloc(1, sizeof *c);
    *c = (Comm){q, i, devices ? devices[i] : i, NULL, 0};
    q->ranks[i] = comms[i] = c;
  }
  return OK;
}

int ncclCommDestroy(Comm *c) {
  Clique *q = c->q;
  free(c->calls);
  free(c);
  if (--q->live == 0) { free(q->ranks); free(q); }
  return OK;
}

static void reduce(Clique *q, int k) {
  size_t n = q->ranks[0]->calls[k].count, esize = q->ranks[0]->calls[k].dtype == F64 ? 8 : 4;
  double *sum = calloc(n ? n : 1, sizeof *sum);
  for (int r = 0; r < q->n; r++)
    for (size_t i = 0; i < n; i++)
      sum[i] += esize == 8 ? ((const double *)q->ranks[r]->calls[k].send)[i] : ((const float *)q->ranks[r]->calls[k].send)[i];
  for (int r = 0; r < q->n; r++)
    for (size_t i = 0; i < n; i++) {
      if (esize == 8) ((double *)q->ranks[r]->calls[k].recv)[i] = sum[i];
      else ((float *)q->ranks[r]->calls[k].recv)[i] = (float)sum[i];
    }
  free(sum);
}

// Every clique with queued calls: the same number of each, matching, then done.
static int flush(Clique *q) {
  int rc = OK;
  for (int r = 1; r < q->n && !rc; r++) if (q->ranks[r]->ncalls != q->ranks[0]->ncalls) rc = INVALID_USAGE;
  for (int k = 0; !rc && k < q->ranks[0]->ncalls; k++)
    for (int r = 1; r < q->n && !rc; r++)
      if (q->ranks[r]->calls[k].count != q->ranks[0]->calls[k].count || q->ranks[r]->calls[k].dtype != q->ranks[0]->calls[k].dtype)
        rc = INVALID_USAGE;
  for (int r = 0; r < q->n && !rc; r++)   // each rank's stream up to its calls (the reduction runs then, in order)
    for (int k = 0; k < q->ranks[r]->ncalls; k++) fake_flush(q->ranks[r]->calls[k].stream);
  for (int k = 0; !rc && k < q->ranks[0]->ncalls; k++) reduce(q, k);
  for (int r = 0; r < q->n; r++) q->ranks[r]->ncalls = 0;
  return rc;
}

static Clique *pending;   // the clique with calls queued in the open group (one, in these tests)

int ncclGroupStart(void) { depth++; return OK; }
int ncclGroupEnd(void) {
  if (depth <= 0) return INVALID_USAGE;
  if (--depth || !pending) return OK;
  Clique *q = pending;
  pending = NULL;
  return flush(q);
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, Comm *c, void **stream) {
  if (op != SUM || (dtype != F32 && dtype != F64) || !send || !recv) return INVALID_ARGUMENT;
  if (!stream || (long)(size_t)*stream != c->device + 1) return INVALID_ARGUMENT;   // fake_cuda.c's Stream {ctx}
  if (c->q->n > 1 && !depth) return INVALID_USAGE;
  if (pending && pending != c->q) return INVALID_USAGE;
  pending = c->q;
  Call *a = realloc(c->calls, sizeof *a * (c->ncalls + 1));
  if (!a) return INVALID_ARGUMENT;
  c->calls = a;
  c->calls[c->ncalls++] = (Call){send, recv, count, dtype, stream};
  if (!depth) { pending = NULL; return flush(c->q); }
  return OK;
}
