// cache.h - the on-disk compile cache: 128-bit keys, checked entries, atomic writes.
//
// An entry <dir>/<key>.kobj is a CacheHeader followed by the payload (an object file or a
// shared library, whatever the backend loads). Readers verify magic, format version, key,
// length and a 128-bit checksum; a bad entry is removed and reported as CACHE_CORRUPT so
// the caller rebuilds it. Writers write <key>.tmp.<pid>.<rand>, fsync and rename, so
// readers never see a partial entry and concurrent writers of one key are harmless.
// The cache is best effort: every failure to write is silent, the caller just compiled.
#ifndef KILN_COMPILER_CACHE_H
#define KILN_COMPILER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define CACHE_FORMAT 1

// Two independent 64-bit hashes over the same bytes (FNV-1a and a murmur-style mix).
typedef struct { uint64_t a, b; } CacheHash;

void cache_hash_init(CacheHash *h);
void cache_hash_add(CacheHash *h, const void *p, size_t n);
// A length-prefixed string, so that ("ab","c") and ("a","bc") hash differently.
void cache_hash_str(CacheHash *h, const char *s);
void cache_hash_hex(const CacheHash *h, char out[33]);
// This cpu's model and feature flags, hashed: what -march=native code and
// measurements made here depend on.
void cache_host_id(char out[33]);

enum { CACHE_MISS = 0, CACHE_HIT = 1, CACHE_CORRUPT = -1 };

// The default directory: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
// A variable set to "" disables the cache. Returns a malloc'd path or NULL.
char *cache_default_dir(void);
// mkdir -p and check that we may write there. 0: usable, -1: not.
int cache_prepare(const char *dir);
// CACHE_HIT fills *data (malloc'd) and *len. CACHE_CORRUPT puts the reason in why and
// removes the entry. CACHE_MISS: no entry.
int cache_get(const char *dir, const char *key, char **data, size_t *len, char *why, size_t whylen);
// 0 on success, -1 if the entry could not be written (no partial file is left behind).
int cache_put(const char *dir, const char *key, const void *data, size_t len);
// The entry's path, for tests and messages.
void cache_path(const char *dir, const char *key, char *out, size_t outlen);

#endif
