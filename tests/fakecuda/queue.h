// queue.h - how fake_cublas.c, fake_cublaslt.c and fake_nccl.c put their work on
// fake_cuda.c's streams, which run it later and in order (fake_cuda.c says when).
// The fake driver is found as Kiln loads it, through KILN_LIBCUDA; without it the
// work runs at once (a test that loads a fake library alone).
#ifndef KILN_FAKE_QUEUE_H
#define KILN_FAKE_QUEUE_H
#include <dlfcn.h>
#include <stdlib.h>

__attribute__((unused)) static void *fake_driver(const char *sym) {
  const char *path = getenv("KILN_LIBCUDA");
  void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  return h ? dlsym(h, sym) : NULL;
}

// fn(arg) after the work queued on stream so far; arg (malloc'd) is freed after.
__attribute__((unused)) static int fake_enqueue(void *stream, void (*fn)(void *), void *arg) {
  int (*enq)(void *, void (*)(void *), void *);
  *(void **)&enq = fake_driver("kiln_fake_enqueue");
  if (enq) return enq(stream, fn, arg);
  fn(arg);
  free(arg);
  return 0;
}

// Everything queued on stream done now.
__attribute__((unused)) static void fake_flush(void *stream) {
  void (*flush)(void *);
  *(void **)&flush = fake_driver("kiln_fake_flush");
  if (flush) flush(stream);
}
#endif
