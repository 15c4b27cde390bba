// progress.c: the progress bar and the epoch and final summaries (report.h).
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 30
#define REDRAW_S 0.1   // at most ten redraws a second: drawing costs more than a small step

struct RtProgress {
    FILE *f;
    int tty;
    double t0;   // the first epoch's start; < 0 before it
    // The current epoch.
    int epoch, nepochs, in_epoch;   // in_epoch: begun and not yet ended
    int64_t nbatches, nexamples;
    double ep_t0, ep_t1, last_draw;   // ep_t1: training ended (rt_progress_epoch_trained), else < 0
    double data_s;   // rt_progress_data's seconds this epoch; < 0: never called
    int drawn;   // a bar is on the line
    int64_t batches, examples;
    double loss_sum;   // running mean = loss_sum / batches_seen
    int64_t nloss;
    // The run.
    int epochs_done;
    int64_t examples_done;   // in ended epochs
    char best_name[64];
    double best;
    int best_epoch;   // 0: no metric yet
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Four decimals for values of everyday size, %g for tiny and huge ones; one nan spelling.
static const char *fmt_val(char *s, size_t n, double v) {
    if (isnan(v))
        snprintf(s, n, "nan");
    else if (v == 0 || (fabs(v) >= 1e-3 && fabs(v) < 1e5))
        snprintf(s, n, "%.4f", v);
    else
        snprintf(s, n, "%.4g", v);
    return s;
}

// m:ss, or h:mm:ss from an hour up.
static const char *fmt_eta(char *s, size_t n, double sec) {
    long t = sec > 0 && sec < 1e9 ? (long)(sec + 0.5) : 0;
    if (t >= 3600)
        snprintf(s, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(s, n, "%ld:%02ld", t / 60, t % 60);
    return s;
}

static double rate(int64_t examples, double seconds) {
    return seconds > 0 ? (double)examples / seconds : 0;
}

// A line is built whole and written with one call: stderr is unbuffered, and a bar
// written piece by piece flickers.
typedef struct {
    char s[1024];
    size_t n;
} Line;

__attribute__((format(printf, 2, 3))) static void add(Line *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        l->n = l->n + (size_t)k < sizeof l->s ? l->n + (size_t)k : sizeof l->s - 1;
}

static void emit(RtProgress *p, const Line *l) {
    fputs(l->s, p->f);
    fflush(p->f);
}

static void add_epoch(Line *l, const RtProgress *p) {
    if (p->nepochs > 0)
        add(l, "epoch %d/%d", p->epoch, p->nepochs);
    else
        add(l, "epoch %d", p->epoch);
}

RtProgress *rt_progress_new(FILE *f, int tty) {
    RtProgress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->f = f;
    if (tty < 0) {
        const char *term = getenv("TERM");
        tty = isatty(fileno(f)) && !(term && !strcmp(term, "dumb"));
    }
    p->tty = tty != 0;
    p->t0 = -1;
    return p;
}

//     epoch 2/5 [=========>     ] 312/469  5832 ex/s  loss 0.4123  ETA 0:07
static void draw(RtProgress *p, double t) {
    double el = t - p->ep_t0;
    int64_t done = p->batches, total = p->nbatches;
    if (total <= 0 && p->nexamples > 0)   // batches unknown: the bar follows the examples
        done = p->examples, total = p->nexamples;
    char v[32], eta[32];
    Line l = {.n = 0};
    add(&l, "\r");
    add_epoch(&l, p);
    if (total > 0) {
        char bar[BAR_WIDTH + 1];
        int k = (int)(BAR_WIDTH * (done < total ? done : total) / total);
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < k ? '=' : i == k ? '>' : ' ';
        bar[BAR_WIDTH] = '\0';
        add(&l, " [%s] %lld/%lld", bar, (long long)done, (long long)total);
    } else {
        add(&l, "  batch %lld", (long long)done);
    }
    if (p->batches > 0)
        add(&l, "  %.0f ex/s  loss %s", rate(p->examples, el),
            fmt_val(v, sizeof v, p->loss_sum / (double)p->nloss));
    if (total > 0 && done > 0 && done < total)
        add(&l, "  ETA %s", fmt_eta(eta, sizeof eta, el / (double)done * (double)(total - done)));
    add(&l, "\033[K");
    emit(p, &l);
    p->drawn = 1;
    p->last_draw = t;
}

// Starts a line that replaces the bar, if one is drawn.
static void begin_line(RtProgress *p, Line *l) {
    if (p->tty && p->drawn)
        add(l, "\r\033[K");
    p->drawn = 0;
}

void rt_progress_epoch_begin(RtProgress *p, int epoch, int nepochs, int64_t nbatches,
                             int64_t nexamples) {
    if (!p)
        return;
    double t = now_s();
    if (p->t0 < 0)
        p->t0 = t;
    p->epoch = epoch, p->nepochs = nepochs, p->in_epoch = 1;
    p->nbatches = nbatches, p->nexamples = nexamples;
    p->ep_t0 = t;
    p->ep_t1 = -1;
    p->data_s = -1;
    p->batches = p->examples = p->nloss = 0;
    p->loss_sum = 0;
    if (p->tty)   // something to look at while the first step compiles
        draw(p, t);
}

void rt_progress_step(RtProgress *p, int64_t batches_done, int64_t examples_done, double loss) {
    if (!p)
        return;
    p->batches = batches_done, p->examples = examples_done;
    p->loss_sum += loss;   // a nan stays visible in the mean
    p->nloss++;
    if (!p->tty)
        return;
    double t = now_s();
    if (!p->drawn || t - p->last_draw >= REDRAW_S)
        draw(p, t);
}

void rt_progress_data(RtProgress *p, double seconds) {
    if (p)
        p->data_s = (p->data_s > 0 ? p->data_s : 0) + seconds;
}

static void update_best(RtProgress *p, const char *name, double v) {
    if (!name || !isfinite(v))
        return;
    int lower = strstr(name, "loss") || strstr(name, "error");
    if (p->best_epoch && (lower ? v >= p->best : v <= p->best))
        return;
    snprintf(p->best_name, sizeof p->best_name, "%s", name);
    p->best = v;
    p->best_epoch = p->epoch;
}

void rt_progress_epoch_trained(RtProgress *p) {
    if (p)
        p->ep_t1 = now_s();
}

//     epoch 2/5: loss 0.4123, 5832 ex/s, 10.3 s (data 4%), accuracy 0.9012
void rt_progress_epoch_end(RtProgress *p, double mean_loss, const char *const *names,
                           const double *vals, int nmetrics) {
    if (!p)
        return;
    double el = (p->ep_t1 >= 0 ? p->ep_t1 : now_s()) - p->ep_t0;
    char v[32];
    Line l = {.n = 0};
    begin_line(p, &l);
    add_epoch(&l, p);
    add(&l, ": loss %s, %.0f ex/s, %.1f s", fmt_val(v, sizeof v, mean_loss),
        rate(p->examples, el), el);
    if (p->data_s >= 0)
        add(&l, " (data %.0f%%)", el > 0 ? fmin(100 * p->data_s / el, 100) : 0);
    for (int i = 0; i < nmetrics; i++)
        add(&l, ", %s %s", names[i] ? names[i] : "?", fmt_val(v, sizeof v, vals[i]));
    add(&l, "\n");
    emit(p, &l);
    if (nmetrics > 0)
        update_best(p, names[0], vals[0]);
    p->epochs_done++;
    p->examples_done += p->examples;
    p->in_epoch = 0;
}

//     trained 5 epochs in 51.2 s (5832 ex/s); best accuracy 0.9012 (epoch 3)
void rt_progress_finish(RtProgress *p, int interrupted) {
    if (!p)
        return;
    double el = p->t0 < 0 ? 0 : now_s() - p->t0;
    int64_t ex = p->examples_done + (p->in_epoch ? p->examples : 0);
    Line l = {.n = 0};
    begin_line(p, &l);
    if (interrupted && p->in_epoch) {
        add(&l, "stopped at epoch %d, step %lld", p->epoch, (long long)p->batches);
        if (p->nbatches > 0)
            add(&l, "/%lld", (long long)p->nbatches);
        add(&l, " after");
    } else if (interrupted) {
        add(&l, "stopped after epoch %d in", p->epochs_done);
    } else {
        add(&l, "trained %d epoch%s in", p->epochs_done, p->epochs_done == 1 ? "" : "s");
    }
    add(&l, " %.1f s (%.0f ex/s)", el, rate(ex, el));
    char v[32];
    if (p->best_epoch)
        add(&l, "; best %s %s (epoch %d)", p->best_name, fmt_val(v, sizeof v, p->best),
            p->best_epoch);
    add(&l, "\n");
    emit(p, &l);
}

void rt_progress_free(RtProgress *p) { free(p); }
