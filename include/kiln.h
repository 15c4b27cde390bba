// kiln.h: the C API of Kiln, the symbolic graph compiler. The `kiln` command
// line tool is built on it.
//
// A worked example: compile a function once, run it for two batch sizes.
//
//     #include <kiln.h>
//     kiln_ctx *k = kiln_new(NULL);                      // default options
//     // Define things in the .kiln language ...
//     if (kiln_exec(k, "model",
//                   "input X : f32[B, 3]\n"
//                   "param W : f32[3, 2] = glorot\n"
//                   "y = sum(relu(X @ W), axis=1)\n"
//                   "dW = grad(sum(y), W)\n"))
//       fprintf(stderr, "%s", kiln_error(k));            // file:line:col, source line, caret
//     // ... then compile graphs over named values; X is bound at run time.
//     const char *outs[] = {"y", "dW"}, *ins[] = {"X"};
//     kiln_graph *g = kiln_compile(k, outs, 2, ins, 1);
//     float x[4 * 3] = {0}, y[4], dw[3 * 2];
//     kiln_tensor in = {KILN_F32, 2, {4, 3}, x};        // B = 4 this call
//     kiln_tensor out[2] = {{KILN_F32, 1, {4}, y}, {KILN_F32, 2, {3, 2}, dw}};
//     if (kiln_run(g, &in, out)) fprintf(stderr, "%s", kiln_error(k));
//     in.shape[0] = 1;                                  // B = 1: same compiled code
//     out[0].shape[0] = 1;
//     kiln_run(g, &in, out);
//     kiln_graph_free(g);
//     kiln_free(k);
//
// Conventions: functions return 0 (or a pointer) on success and -1 (or NULL) on
// failure, with a message in kiln_error(). Nothing here exits the process.
// Tensors are dense, row-major, and owned by the caller.
#ifndef KILN_H
#define KILN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAXDIM 8
typedef enum { KILN_BOOL, KILN_I32, KILN_I64, KILN_F32, KILN_F64 } kiln_dtype;

typedef struct {
  kiln_dtype dtype;
  int ndim;
  int64_t shape[KILN_MAXDIM];
  void *data;              // caller's buffer; bool is one byte per element
} kiln_tensor;

typedef struct {
  int threads;             // <= 0: all cores (or $KILN_THREADS)
  uint64_t seed;           // base seed for parameters and random tensors
  FILE *out;               // where `print` writes; NULL: stdout
} kiln_options;

typedef struct kiln_ctx kiln_ctx;
typedef struct kiln_graph kiln_graph;

const char *kiln_version(void);
kiln_ctx *kiln_new(const kiln_options *opt);   // NULL opt: defaults; NULL result: see stderr
void kiln_free(kiln_ctx *k);
const char *kiln_error(kiln_ctx *k);           // the last error ("" if none)

// Run program text (statements of the .kiln language). Definitions persist in
// the context, so a program can be fed in pieces, like the REPL does.
int kiln_exec(kiln_ctx *k, const char *name, const char *text);
int kiln_exec_file(kiln_ctx *k, const char *path);

// The value of an expression with no unbound inputs, into a tensor the library
// allocates (free it with kiln_tensor_free).
int kiln_eval(kiln_ctx *k, const char *expr, kiln_tensor *out);
void kiln_tensor_free(kiln_tensor *t);
// Print a tensor as nested lists with %g numbers, like `print`.
void kiln_tensor_print(FILE *f, const kiln_tensor *t);

// Compile the named values (tensor expressions defined in the context) into
// one graph whose arguments are the named inputs. Parameters the graph uses
// are bound to their current values. Symbolic dimensions are bound at each
// run from the inputs' shapes: one compile serves every binding.
kiln_graph *kiln_compile(kiln_ctx *k, const char *const *outputs, int nout, const char *const *inputs, int nin);
void kiln_graph_free(kiln_graph *g);
int kiln_graph_nout(const kiln_graph *g);
// The shape an output has for these inputs.
int kiln_output_shape(kiln_graph *g, const kiln_tensor *inputs, int i, kiln_tensor *shape_out);
// Run on caller buffers; shapes and dtypes are checked.
int kiln_run(kiln_graph *g, const kiln_tensor *inputs, kiln_tensor *outputs);
// The IR after a pipeline stage, or the generated C ("c"), as text (free() it).
char *kiln_graph_dump(kiln_graph *g, const char *stage);

#ifdef __cplusplus
}
#endif
#endif
