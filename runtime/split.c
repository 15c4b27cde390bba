// Shares of a training batch in proportion to each device's measured speed (split.h).
#include "split.h"
#include <stdio.h>
#include <string.h>

enum { BALANCE_FIRST = 3, BALANCE_EVERY = 50 };

void rt_split_name(int device, char *buf, size_t len) {
  if (device < 0) snprintf(buf, len, "the CPU");
  else snprintf(buf, len, "cuda:%d", device);
}

void rt_split_init(RtSplit *s, const int *devices, int n) {
  memset(s, 0, sizeof *s);
  s->n = n < RT_SPLIT_MAX ? n : RT_SPLIT_MAX;
  for (int k = 0; k < s->n; k++) s->sh[k].device = devices[k], s->sh[k].frac = 1.0 / s->n;
}

void rt_split_rows(RtSplit *s, int64_t rows) {
  int64_t given = 0;
  for (int k = 0; k < s->n; k++) {
    s->sh[k].n = (int64_t)(s->sh[k].frac * rows);
    if (!s->sh[k].n && rows >= s->n) s->sh[k].n = 1;
    given += s->sh[k].n;
  }
  while (given != rows) {   // the difference from whoever is furthest from its fraction
    int best = -1, more = given < rows;
    double gap = -1e300;
    for (int k = 0; k < s->n; k++) {
      double g = (s->sh[k].frac * rows - s->sh[k].n) * (more ? 1 : -1);
      if (g > gap && (more || s->sh[k].n > 1)) gap = g, best = k;
    }
    s->sh[best].n += more ? 1 : -1;
    given += more ? 1 : -1;
  }
  int64_t row = 0;
  for (int k = 0; k < s->n; k++) s->sh[k].row = row, row += s->sh[k].n;
}

static void balance(RtSplit *s) {
  double total = 0;
  for (int k = 0; k < s->n; k++) {
    RtShare *h = &s->sh[k];
    if (h->sum_n > 0 && h->sum_ms > 0) h->rate = h->sum_n / h->sum_ms;
    h->sum_n = h->sum_ms = 0;
    total += h->rate;
  }
  s->last_rate = s->wall_ms > 0 ? s->wall_n / s->wall_ms : 0;
  s->wall_ms = s->wall_n = 0;
  for (int k = 0; total > 0 && k < s->n; k++) s->sh[k].frac = s->sh[k].rate / total;
  s->balances++;
}

int rt_split_step(RtSplit *s, int64_t rows, double wall_ms) {
  if (!s->started) return s->started = 1, 0;
  for (int k = 0; k < s->n; k++) s->sh[k].sum_n += (double)s->sh[k].n, s->sh[k].sum_ms += s->sh[k].n ? s->sh[k].ms : 0;
  s->wall_ms += wall_ms;
  s->wall_n += (double)rows;
  if (++s->steps != BALANCE_FIRST && (s->steps < BALANCE_FIRST || (s->steps - BALANCE_FIRST) % BALANCE_EVERY)) return 0;
  balance(s);
  return s->balances == 1;
}

void rt_split_text(const RtSplit *s, char *buf, size_t len) {
  size_t k = 0;
  char who[32];
  if (len) buf[0] = 0;
  for (int i = 0; i < s->n && k < len; i++) {
    rt_split_name(s->sh[i].device, who, sizeof who);
    k += snprintf(buf + k, len - k, "%s%s %.0f%% (%.0f examples/s)", i ? ", " : "", who, 100 * s->sh[i].frac, s->sh[i].rate * 1e3);
  }
}

void rt_split_report(const RtSplit *s, char *buf, size_t len) {
  if (len) buf[0] = 0;
  if (!s->balances || !len) return;   // too few steps to have measured anything
  char who[32];
  rt_split_text(s, buf, len);
  int fastest = 0;
  for (int k = 1; k < s->n; k++) if (s->sh[k].rate > s->sh[fastest].rate) fastest = k;
  rt_split_name(s->sh[fastest].device, who, sizeof who);
  double rate = s->wall_ms > 0 ? s->wall_n / s->wall_ms : s->last_rate;
  size_t k = strlen(buf);
  if (k < len)
    snprintf(buf + k, len - k, "; the steps ran at %.0f examples/s, %.2fx %s's speed alone", rate * 1e3,
             s->sh[fastest].rate > 0 ? rate / s->sh[fastest].rate : 0, who);
}
