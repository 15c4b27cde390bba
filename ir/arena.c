// Bump allocator: many small allocations, one free (QBE pools, ggml contexts).
#include "ir.h"
#include <stdlib.h>
#include <string.h>

typedef struct Block { struct Block *next; size_t used, cap; _Alignas(16) unsigned char mem[]; } Block;
struct Arena { Block *head; };

Arena *arena_new(void) {
  Arena *a = calloc(1, sizeof *a);
  if (!a) abort();
  return a;
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Block *b = a->head;
  if (!b || b->used + n > b->cap) {
    size_t cap = n > 65536 ? n : 65536;
    b = malloc(sizeof *b + cap);
    if (!b) abort();  // out of memory is an internal failure here
    b->next = a->head; b->used = 0; b->cap = cap;
    a->head = b;
  }
  void *p = b->mem + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

char *arena_strdup(Arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(a, n);
  memcpy(p, s, n);
  return p;
}

void arena_free(Arena *a) {
  if (!a) return;
  for (Block *b = a->head, *next; b; b = next) { next = b->next; free(b); }
  free(a);
}
