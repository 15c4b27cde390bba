// The compiler's one bump arena. It is implemented in ir/arena.c and declared
// in ir/ir.h too; this header repeats those four prototypes so that the front
// end can allocate without seeing the IR. tests/test_parser.c includes both
// headers, so the two declarations cannot drift apart unnoticed.
#ifndef KILN_FRONTEND_ARENA_H
#define KILN_FRONTEND_ARENA_H
#include <stddef.h>

typedef struct Arena Arena;
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);      // zeroed, 16-byte aligned
char *arena_strdup(Arena *a, const char *s);
void arena_free(Arena *a);

#endif
