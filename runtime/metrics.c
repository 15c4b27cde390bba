// metrics.c: the metrics log, as CSV and in memory for the plot (report.h).
#include "report.h"
#include "private.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int epoch;
    int64_t step;
    double loss;
} StepRow;

typedef struct {
    int epoch;
    int64_t step;
    int name;   // index into names
    double val;
} EpochRow;

struct RtMetrics {
    FILE *f;   // NULL: memory only
    char *path;
    int werr;   // errno of the first failed write; -1 when out of memory; 0: none
    StepRow *steps;
    size_t nsteps, capsteps;
    EpochRow *rows;
    size_t nrows, caprows;
    char **names;   // the distinct per-epoch names, first seen first
    size_t nnames, capnames;
};

// The array p (n used of *cap elements of size bytes) with room for one more: p itself,
// a larger copy, or NULL when out of memory (p is then still valid).
static void *grow(void *p, size_t *cap, size_t n, size_t size) {
    if (n < *cap)
        return p;
    size_t c = *cap ? 2 * *cap : 64;
    void *q = realloc(p, c * size);
    if (q)
        *cap = c;
    return q;
}

static void out_of_memory(RtMetrics *m) {
    if (!m->werr)
        m->werr = -1;
}

RtMetrics *rt_metrics_new(const char *csv_path, char *err, size_t errlen) {
    RtMetrics *m = calloc(1, sizeof *m);
    if (!m) {
        rt_errf(err, errlen, csv_path ? csv_path : "metrics", "out of memory");
        return NULL;
    }
    if (!csv_path)
        return m;
    m->path = strdup(csv_path);
    m->f = m->path ? fopen(csv_path, "w") : NULL;
    if (!m->f) {
        rt_errf(err, errlen, csv_path, "cannot create the metrics log: %s",
                m->path ? strerror(errno) : "out of memory");
        free(m->path);
        free(m);
        return NULL;
    }
    if (fputs("epoch,step,name,value\n", m->f) < 0)
        m->werr = errno;
    return m;
}

// %.9g, with one spelling of nan.
static void put_row(RtMetrics *m, int epoch, int64_t step, const char *name, double v) {
    if (!m->f || m->werr)
        return;
    char val[32];
    if (isnan(v))
        snprintf(val, sizeof val, "nan");
    else
        snprintf(val, sizeof val, "%.9g", v);
    int rc;
    // A name with a comma, quote or line break is quoted, its quotes doubled (RFC 4180).
    if (strpbrk(name, ",\"\r\n")) {
        rc = fprintf(m->f, "%d,%lld,\"", epoch, (long long)step);
        for (const char *s = name; *s && rc >= 0; s++)
            rc = fputs(*s == '"' ? "\"\"" : (char[2]){*s, 0}, m->f);
        if (rc >= 0)
            rc = fprintf(m->f, "\",%s\n", val);
    } else {
        rc = fprintf(m->f, "%d,%lld,%s,%s\n", epoch, (long long)step, name, val);
    }
    if (rc < 0)
        m->werr = errno ? errno : EIO;
}

void rt_metrics_step(RtMetrics *m, int epoch, int64_t step, double loss, double lr) {
    if (!m)
        return;
    put_row(m, epoch, step, "loss", loss);
    if (!isnan(lr))
        put_row(m, epoch, step, "lr", lr);
    StepRow *s = grow(m->steps, &m->capsteps, m->nsteps, sizeof *s);
    if (!s) {
        out_of_memory(m);
        return;
    }
    m->steps = s;
    s[m->nsteps++] = (StepRow){epoch, step, loss};
}

static int name_index(RtMetrics *m, const char *name) {
    for (size_t i = 0; i < m->nnames; i++)
        if (!strcmp(m->names[i], name))
            return (int)i;
    char **v = grow(m->names, &m->capnames, m->nnames, sizeof *v);
    if (!v)
        return -1;
    m->names = v;
    if (!(v[m->nnames] = strdup(name)))
        return -1;
    return (int)m->nnames++;
}

void rt_metrics_epoch(RtMetrics *m, int epoch, int64_t step, const char *const *names,
                      const double *vals, int n) {
    if (!m)
        return;
    for (int i = 0; i < n; i++) {
        const char *name = names[i] ? names[i] : "?";
        put_row(m, epoch, step, name, vals[i]);
        int k = name_index(m, name);
        EpochRow *r = k < 0 ? NULL : grow(m->rows, &m->caprows, m->nrows, sizeof *r);
        if (!r) {
            out_of_memory(m);
            continue;
        }
        m->rows = r;
        r[m->nrows++] = (EpochRow){epoch, step, k, vals[i]};
    }
    if (m->f && !m->werr && fflush(m->f) != 0)
        m->werr = errno;
}

int rt_metrics_close(RtMetrics *m, char *err, size_t errlen) {
    if (!m)
        return 0;
    int e = m->werr;
    if (m->f && fclose(m->f) != 0 && !e)
        e = errno;
    int rc = 0;
    if (e)
        rc = rt_errf(err, errlen, m->path ? m->path : "metrics", "%s",
                     e < 0 ? "out of memory" : strerror(e));
    for (size_t i = 0; i < m->nnames; i++)
        free(m->names[i]);
    free(m->names);
    free(m->steps);
    free(m->rows);
    free(m->path);
    free(m);
    return rc;
}

//
// The plot
//

// A centered moving average over the finite values, the window about a 50th of the run:
// unlike an exponential average it does not lag behind a falling loss. Near the ends the
// window narrows to stay centered, down to 8 points a side (then cut at the end), so the
// last points are not raw noise. Prefix sums make it O(n); sum and cnt have n + 1 entries.
static void smooth(const double *y, double *out, size_t n, double *sum, double *cnt) {
    sum[0] = cnt[0] = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = isfinite(y[i]);
        sum[i + 1] = sum[i] + (ok ? y[i] : 0);
        cnt[i + 1] = cnt[i] + ok;
    }
    size_t half = n / 100, least = half < 8 ? half : 8;
    for (size_t i = 0; i < n; i++) {
        size_t h = half < i ? half : i;
        h = h < n - 1 - i ? h : n - 1 - i;
        h = h > least ? h : least;
        size_t lo = i > h ? i - h : 0, hi = i + h < n ? i + h + 1 : n;
        double c = cnt[hi] - cnt[lo];
        out[i] = c > 0 ? (sum[hi] - sum[lo]) / c : NAN;
    }
}

// Every per-epoch series with a name containing "loss" goes on top (against the step),
// the others below (against the epoch).
typedef struct {
    PlotSeries top[PLOT_MAXSERIES], bottom[PLOT_MAXSERIES];
    int ntop, nbottom;
    double *mem;   // every x and y array, in one allocation
} Layout;

static void build_epoch_series(const RtMetrics *m, Layout *l, double *mem) {
    for (int k = 0; k < (int)m->nnames; k++) {
        double *x = mem, *y = mem + m->nrows;
        int n = 0, loss = strstr(m->names[k], "loss") != NULL;
        for (size_t i = 0; i < m->nrows; i++)
            if (m->rows[i].name == k) {
                x[n] = loss ? (double)m->rows[i].step : m->rows[i].epoch;
                y[n++] = m->rows[i].val;
            }
        mem += 2 * m->nrows;
        PlotSeries s = {m->names[k], PLOT_MARKED, n, x, y};
        if (loss && l->ntop < PLOT_MAXSERIES)
            l->top[l->ntop++] = s;
        else if (!loss && l->nbottom < PLOT_MAXSERIES)
            l->bottom[l->nbottom++] = s;
    }
}

int rt_metrics_plot(const RtMetrics *m, const char *png_path, const char *title, char *err,
                    size_t errlen) {
    if (!m || (m->nsteps == 0 && m->nrows == 0))
        return rt_errf(err, errlen, png_path, "no metrics to plot");
    Layout l = {0};
    size_t n = m->nsteps;
    l.mem = malloc((5 * n + 2 + 2 * m->nrows * m->nnames) * sizeof(double));
    if (!l.mem)
        return rt_errf(err, errlen, png_path, "out of memory");
    double *x = l.mem, *y = x + n, *ys = y + n, *sum = ys + n, *cnt = sum + n + 1;
    for (size_t i = 0; i < n; i++)
        x[i] = (double)m->steps[i].step, y[i] = m->steps[i].loss;
    smooth(y, ys, n, sum, cnt);
    if (n > 0) {
        l.top[l.ntop++] = (PlotSeries){"loss per step", PLOT_FAINT, (int)n, x, y};
        l.top[l.ntop++] = (PlotSeries){"loss (smoothed)", PLOT_LINE, (int)n, x, ys};
    }
    build_epoch_series(m, &l, cnt + n + 1);
    PlotPanel panels[2];
    int np = 0;
    if (l.ntop)
        panels[np++] = (PlotPanel){"step", "loss", 0, l.ntop, l.top};
    if (l.nbottom)
        panels[np++] = (PlotPanel){"epoch", l.nbottom == 1 ? l.bottom[0].name : "value", 1,
                                   l.nbottom, l.bottom};
    int rc = rt_plot_png(png_path, title, panels, np, err, errlen);
    free(l.mem);
    return rc;
}
