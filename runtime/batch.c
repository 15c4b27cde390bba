// batch.c: mini-batches over a data set, optionally assembled by a background thread.
// A batch is gathered one example at a time: examples are contiguous rows, so a row is one
// memcpy (or one conversion loop when the caller wants another dtype).
//
// Prefetch is double buffering: batch k lives in buf[k % 2]. When the caller takes batch k
// the worker starts on k + 1 in the other buffer, which held batch k - 1: the caller gave
// that up by calling rt_batcher_next again. One job is in flight at most; the caller waits
// for it before touching perm or handing out its buffer. Without the thread the
// buffers alternate too, so that a peek at batch k + 1 leaves batch k alone.
#include "data.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SHUF 0x53485546u   // "SHUF": keeps shuffle counters apart from rt_rand_*'s (see data.h)

struct RtBatcher {
    RtDataset ds;   // a copy of the caller's; the tensors are theirs
    int64_t batch, nbatches;
    int64_t row_elems[RT_DATA_MAXCOL];
    RtDType want[RT_DATA_MAXCOL];
    int shuffle, have_perm;
    uint64_t seed;
    int64_t *perm;   // the order of perm_epoch; NULL without shuffle
    int64_t perm_epoch;
    int64_t next;    // the batch rt_batcher_next hands out next
    int64_t ready;   // the batch in (or being put in) buf[ready % 2], not yet handed out; -1
    RtTensor buf[2][RT_DATA_MAXCOL];

    int prefetch;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int64_t job;   // the batch the worker is assembling, -1 when idle
    int quit;
};

// Writes "rt_batcher_new: " and the message into err; returns -1.
static int bad(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        int n = snprintf(err, errlen, "rt_batcher_new: ");
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < errlen)
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

//
// Gathering
//

static int64_t batch_size(const RtBatcher *b, int64_t k) {
    int64_t lo = k * b->batch;
    return b->ds.n - lo < b->batch ? b->ds.n - lo : b->batch;
}

// Rows ahead whose memory a batch's gather asks for while it copies the
// current one: shuffled rows are scattered over the data set, so each row's
// first lines would otherwise wait on memory one row at a time.
#define AHEAD 4

// Fills dst (one tensor per column) with batch k of the current order.
static void assemble(const RtBatcher *b, int64_t k, RtTensor *dst) {
    int64_t lo = k * b->batch, m = batch_size(b, k);
    for (int c = 0; c < b->ds.ncol; c++) {
        const RtTensor *src = &b->ds.col[c].t;
        size_t in = (size_t)b->row_elems[c] * rt_dtype_size(src->dtype);
        size_t out = (size_t)b->row_elems[c] * rt_dtype_size(b->want[c]);
        for (int64_t i = 0; i < m; i++) {
            int64_t e = b->perm ? b->perm[lo + i] : lo + i;
            const char *s = (const char *)src->data + (size_t)e * in;
            if (b->perm && i + AHEAD < m) {   // shuffled rows are far apart: ask for one AHEAD rows on now
                const char *f = (const char *)src->data + (size_t)b->perm[lo + i + AHEAD] * in;
                for (size_t o = 0; o < in; o += 64) __builtin_prefetch(f + o, 0, 3);
            }
            char *d = (char *)dst[c].data + (size_t)i * out;
            if (src->dtype == b->want[c])
                memcpy(d, s, in);
            else
                rt_convert(d, b->want[c], s, src->dtype, b->row_elems[c]);
        }
    }
}

// The Fisher-Yates shuffle specified in data.h. The modulo's bias is below n / 2^64.
static void make_perm(RtBatcher *b, int64_t epoch) {
    uint32_t key[2] = {(uint32_t)b->seed, (uint32_t)(b->seed >> 32)};
    uint64_t e = (uint64_t)epoch;
    for (int64_t i = 0; i < b->ds.n; i++)
        b->perm[i] = i;
    for (int64_t i = b->ds.n - 1; i > 0; i--) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), (uint32_t)e,
                           SHUF ^ (uint32_t)(e >> 32)};
        uint32_t o[4];
        rt_philox4x32(ctr, key, o);
        int64_t j = (int64_t)((((uint64_t)o[0] << 32) | o[1]) % (uint64_t)(i + 1));
        int64_t t = b->perm[i];
        b->perm[i] = b->perm[j];
        b->perm[j] = t;
    }
    b->perm_epoch = epoch;
    b->have_perm = 1;
}

//
// The prefetch thread
//

static void *worker(void *arg) {
    RtBatcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (b->job < 0 && !b->quit)
            pthread_cond_wait(&b->work, &b->mu);
        if (b->quit)
            break;
        int64_t k = b->job;
        pthread_mutex_unlock(&b->mu);
        assemble(b, k, b->buf[k % 2]);
        pthread_mutex_lock(&b->mu);
        b->job = -1;
        pthread_cond_signal(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void post(RtBatcher *b, int64_t k) {
    pthread_mutex_lock(&b->mu);
    b->job = k;
    pthread_cond_signal(&b->work);
    pthread_mutex_unlock(&b->mu);
    b->ready = k;
}

static void wait_idle(RtBatcher *b) {
    if (!b->prefetch)
        return;
    pthread_mutex_lock(&b->mu);
    while (b->job >= 0)
        pthread_cond_wait(&b->done, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

//
// The API
//

// A float column read into an integer input (class labels from an .npy of floats)
// must hold whole numbers in the integer type's range: rt_convert would turn 2.5
// into 2 and NaN into 0 without a word. The first that is not, with its row.
static int inexact_ints(const RtTensor *t, RtDType to, char *err, size_t errlen, const RtDataset *ds, int c) {
    int64_t i = rt_first_inexact(t->data, t->dtype, to, rt_tensor_numel(t)), per = ds->n ? rt_tensor_numel(t) / ds->n : 1;
    if (i < 0)
        return 0;
    double v = t->dtype == RT_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
    return bad(err, errlen, "column %d '%.31s' feeds an %s input but holds %g at row %lld: not a whole number in its "
               "range", c + 1, ds->col[c].name, rt_dtype_name(to), v, (long long)(per ? i / per : i));
}

static int bad_args(const RtDataset *ds, int64_t batch, const RtDType *want, char *err,
                    size_t errlen) {
    if (!ds)
        return bad(err, errlen, "no data set");
    if (batch < 1)
        return bad(err, errlen, "batch must be at least 1, got %lld", (long long)batch);
    if (ds->n < 0 || ds->ncol < 1 || ds->ncol > RT_DATA_MAXCOL)
        return bad(err, errlen, "bad data set (%lld examples, %d columns)", (long long)ds->n,
                   ds->ncol);
    for (int c = 0; c < ds->ncol; c++) {
        const RtTensor *t = &ds->col[c].t;
        if (rt_dtype_size(t->dtype) == 0 || t->ndim < 1 || t->ndim > RT_MAXDIM ||
            t->shape[0] != ds->n || (!t->data && rt_tensor_nbytes(t) > 0))
            return bad(err, errlen, "column %d '%.31s' is not a tensor of shape [%lld, ...]", c,
                       ds->col[c].name, (long long)ds->n);
        if (want && rt_dtype_size(want[c]) == 0)
            return bad(err, errlen, "column %d '%.31s': bad dtype %d wanted", c, ds->col[c].name,
                       (int)want[c]);
        if (want && (want[c] == RT_I32 || want[c] == RT_I64) && inexact_ints(t, want[c], err, errlen, ds, c))
            return -1;
    }
    return 0;
}

// Sets up everything but the thread: buffers of [min(batch, n), ...] per column.
static int init(RtBatcher *b, const RtDataset *ds, int64_t batch, const RtDType *want) {
    b->ds = *ds;
    b->batch = batch;
    b->nbatches = ds->n / batch + (ds->n % batch != 0);
    b->job = b->ready = -1;
    for (int c = 0; c < ds->ncol; c++) {
        const RtTensor *t = &ds->col[c].t;
        b->want[c] = want ? want[c] : t->dtype;
        b->row_elems[c] = 1;
        for (int d = 1; d < t->ndim; d++)
            b->row_elems[c] *= t->shape[d];
        int64_t shape[RT_MAXDIM];
        memcpy(shape, t->shape, sizeof shape);
        shape[0] = ds->n < batch ? ds->n : batch;
        for (int s = 0; s < 2; s++)
            if (!(b->buf[s][c] = rt_tensor_new(b->want[c], t->ndim, shape)).data)
                return -1;
    }
    if (b->shuffle && !(b->perm = malloc((size_t)(ds->n ? ds->n : 1) * sizeof *b->perm)))
        return -1;
    return 0;
}

RtBatcher *rt_batcher_new(const RtDataset *ds, int64_t batch, int shuffle, uint64_t seed,
                          const RtDType *want, int prefetch, char *err, size_t errlen) {
    if (bad_args(ds, batch, want, err, errlen))
        return NULL;
    RtBatcher *b = calloc(1, sizeof *b);
    if (!b) {
        bad(err, errlen, "out of memory");
        return NULL;
    }
    b->shuffle = shuffle != 0;
    b->seed = seed;
    b->prefetch = prefetch != 0;
    if (init(b, ds, batch, want)) {
        bad(err, errlen, "out of memory for batches of %lld", (long long)batch);
        rt_batcher_free(b);
        return NULL;
    }
    if (b->prefetch) {
        pthread_mutex_init(&b->mu, NULL);
        pthread_cond_init(&b->work, NULL);
        pthread_cond_init(&b->done, NULL);
        int e = pthread_create(&b->thread, NULL, worker, b);
        if (e) {
            bad(err, errlen, "cannot start the prefetch thread: %s", strerror(e));
            b->prefetch = 0;   // nothing to join
            rt_batcher_free(b);
            return NULL;
        }
    }
    rt_batcher_start(b, 0);
    return b;
}

int64_t rt_batcher_nbatches(const RtBatcher *b) { return b ? b->nbatches : 0; }

void rt_batcher_start(RtBatcher *b, int64_t epoch) {
    if (!b)
        return;
    wait_idle(b);
    if (b->shuffle && (!b->have_perm || b->perm_epoch != epoch)) {
        make_perm(b, epoch);
        b->ready = -1;
    }
    b->next = 0;
    // Starting the epoch the batcher already stands at the start of costs nothing.
    if (b->prefetch && b->nbatches > 0 && b->ready != 0)
        post(b, 0);
}

// Views of batch k's buffer in out; its size.
static int64_t hand_out(const RtBatcher *b, int64_t k, RtTensor *out) {
    int64_t m = batch_size(b, k);
    for (int c = 0; c < b->ds.ncol; c++) {
        out[c] = b->buf[k % 2][c];
        out[c].shape[0] = m;
        out[c].owns = 0;
    }
    return m;
}

int64_t rt_batcher_next(RtBatcher *b, RtTensor *out) {
    if (!b || b->next >= b->nbatches)
        return 0;
    int64_t k = b->next++;
    if (b->prefetch) {
        wait_idle(b);   // the job posted for batch k
        b->ready = -1;
        if (k + 1 < b->nbatches)
            post(b, k + 1);
    } else {
        if (b->ready != k)   // not peeked at
            assemble(b, k, b->buf[k % 2]);
        b->ready = -1;
    }
    return hand_out(b, k, out);
}

int64_t rt_batcher_peek(RtBatcher *b, RtTensor *out) {
    if (!b || b->next >= b->nbatches)
        return 0;
    int64_t k = b->next;
    if (b->prefetch) {
        wait_idle(b);   // rt_batcher_next posted it
    } else if (b->ready != k) {
        assemble(b, k, b->buf[k % 2]);
        b->ready = k;
    }
    return hand_out(b, k, out);
}

void rt_batcher_free(RtBatcher *b) {
    if (!b)
        return;
    if (b->prefetch) {
        wait_idle(b);
        pthread_mutex_lock(&b->mu);
        b->quit = 1;
        pthread_cond_signal(&b->work);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->work);
        pthread_cond_destroy(&b->done);
    }
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < RT_DATA_MAXCOL; c++)
            rt_tensor_free(&b->buf[s][c]);
    free(b->perm);
    free(b);
}
