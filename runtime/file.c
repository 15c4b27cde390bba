// file.c: error messages about files, and files written atomically (private.h).
#include "private.h"
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rt_errf(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || errlen == 0)
        return -1;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int rt_check_writable(const char *path, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    struct stat st;
    if (stat(dir, &st))
        return rt_errf(err, errlen, path, "cannot save here: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rt_errf(err, errlen, path, "cannot save here: %s is not a directory", dir);
    if (access(dir, W_OK))
        return rt_errf(err, errlen, path, "cannot save here: %s: %s", dir, strerror(errno));
    if (!stat(path, &st) && S_ISDIR(st.st_mode))
        return rt_errf(err, errlen, path, "cannot save here: it is a directory");
    return 0;
}

int rt_save_begin(RtSaveFile *s, const char *path, char *err, size_t errlen) {
    *s = (RtSaveFile){.fd = -1, .path = path};
    // A name private to this thread, beside the target so that rename is atomic.
    size_t n = strlen(path) + 48;
    s->tmp = malloc(n);
    if (!s->tmp)
        return rt_errf(err, errlen, path, "out of memory");
    snprintf(s->tmp, n, "%s.tmp.%d.%d", path, (int)getpid(), (int)gettid());
    s->fd = open(s->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (s->fd < 0) {
        rt_errf(err, errlen, path, "cannot create %s: %s", s->tmp, strerror(errno));
        free(s->tmp);
        s->tmp = NULL;
        return -1;
    }
    return 0;
}

void rt_save_abort(RtSaveFile *s) {
    if (s->fd >= 0) {
        close(s->fd);
        unlink(s->tmp);
    }
    s->fd = -1;
    free(s->tmp);
    s->tmp = NULL;
}

static int save_fail(RtSaveFile *s, char *err, size_t errlen, const char *what, int e) {
    rt_save_abort(s);
    return rt_errf(err, errlen, s->path, "%s failed: %s", what, strerror(e));
}

int rt_save_write(RtSaveFile *s, const void *buf, size_t n, char *err, size_t errlen) {
    if (s->fd < 0)
        return -1;
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(s->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return save_fail(s, err, errlen, "write", w < 0 ? errno : ENOSPC);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void fsync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);   // best effort: makes the rename durable
        close(fd);
    }
    free(dir);
}

int rt_save_commit(RtSaveFile *s, char *err, size_t errlen) {
    if (s->fd < 0)
        return -1;
    if (fsync(s->fd) != 0)
        return save_fail(s, err, errlen, "fsync", errno);
    int fd = s->fd;
    s->fd = -1;   // closed below whatever happens; abort must only unlink
    if (close(fd) != 0) {
        int e = errno;
        unlink(s->tmp);
        return save_fail(s, err, errlen, "close", e);
    }
    if (rename(s->tmp, s->path) != 0) {
        int e = errno;
        unlink(s->tmp);
        return save_fail(s, err, errlen, "rename", e);
    }
    rt_save_abort(s);   // frees tmp; nothing left to close or remove
    fsync_dir(s->path);
    return 0;
}
