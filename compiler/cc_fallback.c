// cc_fallback.c - the cc backend: the system C compiler builds a shared library, dlopen
// loads it. Used when kiln is built without LLVM/Clang (meson -Djit=cc), or on request
// (JitOptions.backend = "cc", $KILN_JIT=cc). Runtime symbols are resolved by the dynamic
// linker from the executable, which must export them (-rdynamic); `syms` is ignored.
#include "jit_internal.h"
#include "cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *cc_name(void) {
  const char *cc = getenv("KILN_CC");
  return cc && *cc ? cc : "cc";
}

static const char *describe(void) { return "cc+dlopen (system cc, $KILN_CC to change)"; }

// ---- configuration ----

// The compiler's identity without running it: its resolved path, size and mtime, hashed.
static void cc_identity(const char *cc, char out[33]) {
  char path[PATH_MAX], real[PATH_MAX];
  const char *p = getenv("PATH");
  struct stat st;
  if (strchr(cc, '/')) {
    snprintf(path, sizeof path, "%s", cc);
  } else {
    for (path[0] = 0; p && *p; p += strcspn(p, ":") + (p[strcspn(p, ":")] == ':')) {
      snprintf(path, sizeof path, "%.*s/%s", (int)strcspn(p, ":"), p, cc);
      if (!access(path, X_OK)) break;
      path[0] = 0;
    }
  }
  CacheHash h;
  cache_hash_init(&h);
  cache_hash_str(&h, cc);
  if (path[0] && realpath(path, real) && !stat(real, &st)) {
    long long v[2] = {(long long)st.st_size, (long long)st.st_mtime};
    cache_hash_str(&h, real);
    cache_hash_add(&h, v, sizeof v);
  }
  cache_hash_hex(&h, out);
}

static int configure(JitConf *c, char *err, size_t errlen) {
  char opt[8], march[80], id[33], host[33] = "";
  snprintf(opt, sizeof opt, "-O%d", c->opt_level);
  snprintf(march, sizeof march, "-march=%s", c->target_cpu);
  c->vector_math = 0;  // gcc only vectorizes libm calls under -ffast-math
  // -fno-semantic-interposition: inside a -fPIC library, still inline and call directly.
  // gcc knows only fp-contract off and fast; fast is its default outside ISO C.
  const char *flags[] = {"-std=c99", opt, march, "-fno-math-errno", "-ffp-contract=fast",
                         "-fPIC", "-fno-semantic-interposition",
                         "-Werror=implicit-function-declaration"};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    if (jit_addflag(c, flags[i])) return jit_seterr(err, errlen, "jit: flags too long"), -1;
  cc_identity(cc_name(), id);
  if (!strcmp(c->target_cpu, "native")) cache_host_id(host);
  snprintf(c->fingerprint, sizeof c->fingerprint, "%s %s|host %s", cc_name(), id, host);
  return 0;
}

// ---- compile ----

static int write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = fwrite(p, 1, n, f) != n;
  return (fclose(f) != 0) | bad ? -1 : 0;
}

static char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *p = NULL;
  long len = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
  if (len >= 0 && !fseek(f, 0, SEEK_SET) && (p = malloc(len + 1))) {
    if (fread(p, 1, len, f) != (size_t)len) {
      free(p);
      p = NULL;
    } else {
      p[len] = 0;
      *n = (size_t)len;
    }
  }
  fclose(f);
  return p;
}

// Drops every "<dir>/" from the compiler's messages, so they say kernel.c:3:5.
static void strip_dir(char *s, const char *dir) {
  size_t n = strlen(dir);
  char *r = s, *w = s;
  while (*r) {
    if (!strncmp(r, dir, n) && r[n] == '/') r += n + 1;
    else *w++ = *r++;
  }
  *w = 0;
}

// cc <flags> -shared|-c -o out kernel.c, output to diag; returns the exit status or -1.
static int run_cc(const JitConf *c, int object, const char *in, const char *out,
                  const char *diag) {
  const char *argv[80];
  int argc = 0;
  argv[argc++] = cc_name();
  argc += jit_getflags(c, argv + argc, 64);
  argv[argc++] = object ? "-c" : "-shared";
  argv[argc++] = "-o";
  argv[argc++] = out;
  argv[argc++] = in;
  if (!object) argv[argc++] = "-lm";  // so the library names what it needs
  argv[argc] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, diag, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r) return -1;
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int compile(const JitConf *c, const char *src, int object, JitBuf *out, char *err,
                   size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX], in[PATH_MAX + 16], obj[PATH_MAX + 16], diag[PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/kiln-cc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return jit_seterr(err, errlen, "jit: cannot make a temp dir in %s", dir), -1;
  snprintf(in, sizeof in, "%s/kernel.c", dir);
  snprintf(obj, sizeof obj, "%s/kernel.%s", dir, object ? "o" : "so");
  snprintf(diag, sizeof diag, "%s/diag.txt", dir);

  int r = -1;
  if (write_file(in, src, strlen(src))) {
    jit_seterr(err, errlen, "jit: cannot write %s", in);
  } else {
    int status = run_cc(c, object, in, obj, diag);
    size_t n = 0;
    char *msg = read_file(diag, &n);
    if (msg) strip_dir(msg, dir);
    if (status < 0)
      jit_seterr(err, errlen, "jit: cannot run %s (set $KILN_CC)", cc_name());
    else if (status)
      jit_seterr(err, errlen, "jit: generated C does not compile (%s):\n%s", cc_name(),
                 msg ? msg : "");
    else if (!(out->p = read_file(obj, &out->n)))
      jit_seterr(err, errlen, "jit: %s wrote no output", cc_name());
    else
      r = 0;
    if (!r && c->keep_diag) out->diag = msg, msg = NULL;
    free(msg);
  }
  unlink(in), unlink(obj), unlink(diag), rmdir(dir);
  return r;
}

// ---- loading ----

typedef struct { void *h; int fd; } Unit;
typedef struct { Unit *u; int n, cap; } CC;

static void *open_cc(const JitConf *c, const JitSymbol *syms, int nsyms, char *err,
                     size_t errlen) {
  CC *s = calloc(1, sizeof *s);
  if (!s) jit_seterr(err, errlen, "jit: out of memory");
  return s;
}

static void close_cc(void *state) {
  CC *s = state;
  for (int i = s->n - 1; i >= 0; i--) {
    dlclose(s->u[i].h);
    close(s->u[i].fd);
  }
  free(s->u);
  free(s);
}

// The library comes from memory (the cache entry's payload): write it to a memfd and
// dlopen /proc/self/fd/N. The fd stays open while the library is loaded, so no later
// library gets the same name, which dlopen would take for the one already loaded.
static int load(void *state, const JitBuf *b, void **unit, char *err, size_t errlen) {
  CC *s = state;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    Unit *u = realloc(s->u, cap * sizeof *u);
    if (!u) return jit_seterr(err, errlen, "jit: out of memory"), -1;
    s->u = u, s->cap = cap;
  }
  int fd = memfd_create("kiln-kernel", MFD_CLOEXEC);
  if (fd < 0) return jit_seterr(err, errlen, "jit: memfd_create: %s", strerror(errno)), -1;
  size_t off = 0;
  while (off < b->n) {
    ssize_t w = write(fd, b->p + off, b->n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      return jit_seterr(err, errlen, "jit: writing memfd: %s", strerror(errno)), -1;
    }
    off += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    jit_seterr(err, errlen, "jit: dlopen: %s", dlerror());
    close(fd);
    return -1;
  }
  s->u[s->n++] = (Unit){h, fd};
  *unit = h;
  return 0;
}

static int lookup(void *state, void *unit, const char *name, void **addr, char *err,
                  size_t errlen) {
  dlerror();
  void *p = dlsym(unit, name);
  const char *e = dlerror();
  if (e || !p) return jit_seterr(err, errlen, "jit: looking up %s: %s", name, e ? e : "null"), -1;
  *addr = p;
  return 0;
}

const JitBackend jit_cc_backend = {
  .name = "cc",
  .describe = describe,
  .load_is_object = 0,
  .configure = configure,
  .compile = compile,
  .open = open_cc,
  .close = close_cc,
  .load = load,
  .lookup = lookup,
};
