// cache.c - keys, checked entries and atomic writes for the JIT's compile cache.
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ---- hashing ----

void cache_hash_init(CacheHash *h) {
  h->a = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  h->b = 0x9e3779b97f4a7c15ull;
}

void cache_hash_add(CacheHash *h, const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t a = h->a, b = h->b;
  for (size_t i = 0; i < n; i++) {
    a = (a ^ s[i]) * 0x100000001b3ull;  // FNV-1a
    b = (b ^ s[i]) * 0xff51afd7ed558ccdull;  // murmur3's fmix constant, its own stream
    b ^= b >> 29;
  }
  h->a = a, h->b = b;
}

void cache_hash_str(CacheHash *h, const char *s) {
  uint64_t n = s ? strlen(s) : 0;
  cache_hash_add(h, &n, sizeof n);
  cache_hash_add(h, s ? s : "", n);
}

// Murmur3's finalizer: spreads the last bytes over all 64 bits.
static uint64_t fmix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

void cache_hash_hex(const CacheHash *h, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)fmix(h->a),
           (unsigned long long)fmix(h->b));
}

// ---- directory ----

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

char *cache_default_dir(void) {
  const char *e = getenv("KILN_CACHE_DIR");
  if (e) return *e ? strdup(e) : NULL;
  e = getenv("XDG_CACHE_HOME");
  if (e && *e) return join(e, "kiln");
  e = getenv("HOME");
  if (e && *e) return join(e, ".cache/kiln");
  return NULL;
}

int cache_prepare(const char *dir) {
  char p[4096];
  if (!dir || !*dir || strlen(dir) >= sizeof p) return -1;
  strcpy(p, dir);
  for (char *s = p + 1; *s; s++) {  // mkdir -p, one component at a time
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(p, 0755) && errno != EEXIST) return -1;
  struct stat st;
  if (stat(p, &st) || !S_ISDIR(st.st_mode)) return -1;
  return access(p, W_OK | X_OK) ? -1 : 0;
}

void cache_path(const char *dir, const char *key, char *out, size_t outlen) {
  snprintf(out, outlen, "%s/%s.kobj", dir, key);
}

// ---- entries ----

// On-disk header, host byte order (entries never leave the machine that made them).
typedef struct {
  char magic[8];     // "KILNJIT\0"
  uint32_t format;   // CACHE_FORMAT
  uint32_t hdrlen;   // sizeof(CacheHeader)
  uint64_t len;      // payload bytes
  uint64_t sum[2];   // CacheHash of the payload
  char key[32];      // the entry's own key, against misnamed files
} CacheHeader;

static const char magic[8] = "KILNJIT";

static void checksum(const void *p, size_t n, uint64_t sum[2]) {
  CacheHash h;
  cache_hash_init(&h);
  cache_hash_add(&h, p, n);
  sum[0] = fmix(h.a), sum[1] = fmix(h.b);
}

static int read_all(int fd, void *p, size_t n) {
  char *s = p;
  while (n) {
    ssize_t r = read(fd, s, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    s += r, n -= (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *s = p;
  while (n) {
    ssize_t r = write(fd, s, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    s += r, n -= (size_t)r;
  }
  return 0;
}

// Checks a header against the key and the file size; NULL when it is fine.
static const char *check_header(const CacheHeader *h, const char *key, uint64_t fsize) {
  if (memcmp(h->magic, magic, sizeof magic)) return "bad magic";
  if (h->format != CACHE_FORMAT || h->hdrlen != sizeof *h) return "old format";
  if (memcmp(h->key, key, 32)) return "key mismatch";
  if (h->len != fsize - sizeof *h) return "truncated or padded";
  return NULL;
}

int cache_get(const char *dir, const char *key, char **data, size_t *len, char *why, size_t whylen) {
  char path[4200];
  cache_path(dir, key, path, sizeof path);
  *data = NULL, *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CACHE_MISS;
  const char *bad = NULL;
  char *buf = NULL;
  CacheHeader h;
  struct stat st;
  if (fstat(fd, &st) || (uint64_t)st.st_size < sizeof h) {
    bad = "truncated header";
  } else if (read_all(fd, &h, sizeof h)) {
    bad = "read error";
  } else if (!(bad = check_header(&h, key, (uint64_t)st.st_size))) {
    buf = malloc(h.len ? h.len : 1);
    uint64_t sum[2];
    if (!buf) bad = "out of memory";
    else if (read_all(fd, buf, h.len)) bad = "read error";
    else if (checksum(buf, h.len, sum), sum[0] != h.sum[0] || sum[1] != h.sum[1])
      bad = "checksum mismatch";
  }
  close(fd);
  if (bad) {
    free(buf);
    snprintf(why, whylen, "%s: %s", path, bad);
    unlink(path);  // a fresh compile will replace it
    return CACHE_CORRUPT;
  }
  *data = buf, *len = h.len;
  return CACHE_HIT;
}

int cache_put(const char *dir, const char *key, const void *data, size_t len) {
  char path[4200], tmp[4300];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  // pid + clock + a stack address: unique enough among writers that race on one key
  unsigned long r = (unsigned long)ts.tv_nsec ^ ((unsigned long)(uintptr_t)&ts >> 4);
  cache_path(dir, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld.%lx", dir, key, (long)getpid(), r);

  CacheHeader h = {0};
  memcpy(h.magic, magic, sizeof magic);
  h.format = CACHE_FORMAT;
  h.hdrlen = sizeof h;
  h.len = len;
  checksum(data, len, h.sum);
  memcpy(h.key, key, 32);

  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int bad = write_all(fd, &h, sizeof h) || write_all(fd, data, len) || fsync(fd);
  bad |= close(fd) != 0;
  if (bad || rename(tmp, path)) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

// This cpu's model and feature flags, hashed (what -march=native depends on).
void cache_host_id(char out[33]) {
  CacheHash h;
  cache_hash_init(&h);
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  while (f && fgets(line, sizeof line, f) && line[0] != '\n')  // the first cpu is enough
    if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5) ||
        !strncmp(line, "Features", 8) || !strncmp(line, "CPU part", 8))
      cache_hash_str(&h, line);
  if (f) fclose(f);
  cache_hash_hex(&h, out);
}

