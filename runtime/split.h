// split.h: a training batch split between devices in proportion to their measured
// speed (Caffe con Troll's hybrid CPU+GPU training), for kiln run's train statements
// over several devices (frontend/parallel.c) and built binaries' (model_par.c).
// Runtime-only: includes nothing outside runtime/.
#ifndef KILN_SPLIT_H
#define KILN_SPLIT_H
#include <stddef.h>
#include <stdint.h>

enum { RT_SPLIT_MAX = 16 };

typedef struct {
  int device;               // CUDA ordinal, -1 the CPU
  int64_t n, row;           // this step's rows of the batch, from row
  double frac;              // its fraction of a batch, from the last balance
  double ms;                // this step's time on its share (the caller sets it)
  double sum_n, sum_ms;     // since the last balance
  double rate;              // rows per ms, measured at the last balance (0: not yet)
} RtShare;

typedef struct {
  int n;
  RtShare sh[RT_SPLIT_MAX];
  int started;              // a step has run (the first's times include loading and allocating)
  int64_t steps;            // steps measured
  double wall_ms, wall_n;   // since the last balance: the steps' time and rows
  double last_rate;         // rows per ms of the whole at the last balance
  int balances;
} RtSplit;

// Even shares between n devices (at most RT_SPLIT_MAX).
void rt_split_init(RtSplit *s, const int *devices, int n);
// Each share's rows of a batch of rows: its fraction, rounded so that they add
// up, at least one each while rows allows (so each device's speed is measured).
void rt_split_rows(RtSplit *s, int64_t rows);
// After a step over rows that took wall_ms, each share's ms set: counts the step
// (not the first, which loads and allocates) and, after the third measured step
// and every fifty after, sets each share's fraction from its measured speed.
// 1 when that was the first balance, else 0.
int rt_split_step(RtSplit *s, int64_t rows, double wall_ms);
// "cuda:0 80% (9100 examples/s), the CPU 20% (1200 examples/s)".
void rt_split_text(const RtSplit *s, char *buf, size_t len);
// The text and "; the steps ran at N examples/s, 1.60x cuda:0's speed alone" (the
// fastest device's speed on its own shares); "" before the first balance.
void rt_split_report(const RtSplit *s, char *buf, size_t len);
// "cuda:N" or "the CPU".
void rt_split_name(int device, char *buf, size_t len);

#endif
