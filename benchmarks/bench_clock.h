// bench_clock.h: the timing helpers the benchmarks' C programs share
// (train_speed/csrc/*.c, standalone/lib_latency.c): a monotonic clock in
// seconds, and a qsort comparator for taking medians of timings.
#ifndef KILN_BENCH_CLOCK_H
#define KILN_BENCH_CLOCK_H
#include <time.h>

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static inline int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
