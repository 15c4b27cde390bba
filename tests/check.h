// The C tests' one assertion: prints "ok   what" or "FAIL what" and counts;
// each test ends with printf("%d passed, %d failed\n", npass, nfail).
#ifndef KILN_TESTS_CHECK_H
#define KILN_TESTS_CHECK_H
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int npass, nfail;

static inline void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ok ? npass++ : nfail++;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
