// report.h: what a training loop shows and records: a progress bar and epoch summaries
// (progress.c), a metrics log as CSV with a PNG plot of it (metrics.c, plot.c).
//
// A worked example: a loop over epochs and batches.
//
//     RtProgress *p = rt_progress_new(stderr, -1);      // a bar on a terminal, else lines
//     RtMetrics *m = rt_metrics_new("metrics.csv", err, sizeof err);
//     int64_t step = 0;
//     for (int e = 1; e <= nepochs; e++) {
//         rt_progress_epoch_begin(p, e, nepochs, nbatches, nexamples);
//         double sum = 0;
//         for (int64_t b = 1; b <= nbatches; b++) {
//             double loss = train_step(...);
//             sum += loss;
//             rt_progress_step(p, b, b * batch, loss);
//             rt_metrics_step(m, e, ++step, loss, lr);
//         }
//         rt_progress_epoch_trained(p);                 // the time below is training alone
//         const char *names[] = {"train_loss", "accuracy"};
//         double vals[] = {sum / nbatches, evaluate(...)};
//         rt_progress_epoch_end(p, vals[0], names + 1, vals + 1, 1);
//         rt_metrics_epoch(m, e, step, names, vals, 2);
//     }
//     rt_progress_finish(p, 0);   // "trained 5 epochs in 51.2 s (5832 ex/s); best accuracy ..."
//     rt_metrics_plot(m, "metrics.png", "mlp on Fashion-MNIST", err, sizeof err);
//     rt_metrics_close(m, err, sizeof err);
//     rt_progress_free(p);
//
// None of this is thread-safe; PLplot is not either.
#ifndef KILN_REPORT_H
#define KILN_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

//
// progress.c: the progress bar and summaries
//

typedef struct RtProgress RtProgress;

// f: usually stderr. tty: 1 draws a bar redrawn in place ("\r", "\033[K"), 0 prints plain
// lines, -1 picks 1 when f is a terminal and TERM is not "dumb". NULL when out of memory;
// every function below takes NULL as a no-op. Times come from the monotonic clock.
RtProgress *rt_progress_new(FILE *f, int tty);
// epoch is 1-based. nbatches <= 0: unknown; the bar then counts examples out of nexamples,
// and with neither known it shows the batch count alone (no bar, no ETA).
void rt_progress_epoch_begin(RtProgress *p, int epoch, int nepochs, int64_t nbatches,
                             int64_t nexamples);
// After each step: batches and examples done so far this epoch, this step's loss. On a tty it
// redraws at most 10 times a second (and at the last batch):
//     epoch 2/5 [=========>     ] 312/469  5832 ex/s  loss 0.4123  ETA 0:07
// where loss is the mean over the epoch so far (nan once any step was nan). Otherwise silent.
void rt_progress_step(RtProgress *p, int64_t batches_done, int64_t examples_done, double loss);
// Time the training loop spent this epoch waiting for its next batch (added up; the batch
// gather, or the wait for the prefetch thread). The epoch line then shows its share of the
// epoch's time, "10.3 s (data 4%)": a share near 100% says the input pipeline, not the
// model, sets the pace.
void rt_progress_data(RtProgress *p, double seconds);
// Marks the end of the epoch's training steps, before an evaluation: the epoch line's time
// and ex/s then count training alone (without the call, they run to rt_progress_epoch_end).
void rt_progress_epoch_trained(RtProgress *p);
// Replaces the bar (or, without a tty, prints) the summary line:
//     epoch 2/5: loss 0.4123, 5832 ex/s, 10.3 s (data 4%), accuracy 0.9012
// ("(data ...)" only after rt_progress_data), with ", NAME VALUE" per metric (nmetrics may
// be 0). The first metric is the one rt_progress_finish reports the best of.
void rt_progress_epoch_end(RtProgress *p, double mean_loss, const char *const *names,
                           const double *vals, int nmetrics);
// The closing line, from the first epoch's start:
//     trained 5 epochs in 51.2 s (5832 ex/s); best accuracy 0.9012 (epoch 3)
// Best is over the epochs' first metric, higher is better unless its name contains "loss" or
// "error"; without metrics the line ends after the throughput. interrupted != 0 (e.g. after
// Ctrl-C) says where training stopped instead:
//     stopped at epoch 3, step 120/469 after 25.1 s (5790 ex/s); best accuracy 0.8811 (epoch 2)
void rt_progress_finish(RtProgress *p, int interrupted);
void rt_progress_free(RtProgress *p);

//
// metrics.c: the metrics log
//

// A CSV file in long form, one value per row:
//     epoch,step,name,value
//     1,1,loss,2.30258512
//     1,1,lr,0.00999999978
//     ...
//     1,469,train_loss,0.512345
//     1,469,accuracy,0.8123
// Values print with %.9g (nan, inf as such). Rows are flushed at each epoch. Everything is
// also kept in memory for rt_metrics_plot.
typedef struct RtMetrics RtMetrics;

// csv_path NULL: in memory only. NULL with "path: why" in err when the file cannot be
// created (or when out of memory).
RtMetrics *rt_metrics_new(const char *csv_path, char *err, size_t errlen);
// step counts from 1 over the whole run (it is the plot's x axis). lr NAN: no lr row.
void rt_metrics_step(RtMetrics *m, int epoch, int64_t step, double loss, double lr);
// Per-epoch values, e.g. train_loss and accuracy; step is the last step of the epoch.
void rt_metrics_epoch(RtMetrics *m, int epoch, int64_t step, const char *const *names,
                      const double *vals, int n);
// A PNG of about 1000x700 pixels, written atomically: on top the loss per step (light) with a
// smoothed line and every per-epoch value whose name contains "loss" against the step; below,
// the other per-epoch values against the epoch. 0, or -1 with "png_path: why" in err, or
// "kiln was built without PLplot; --plot is unavailable".
int rt_metrics_plot(const RtMetrics *m, const char *png_path, const char *title, char *err,
                    size_t errlen);
// Flushes and closes the file and frees m (NULL is a no-op). 0, or -1 with "path: why" when a
// row could not be written.
int rt_metrics_close(RtMetrics *m, char *err, size_t errlen);

#endif
