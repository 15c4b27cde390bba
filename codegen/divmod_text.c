// Floor division and the remainder with the divisor's sign (NumPy's
// floor_divide and remainder, Python's // and %) as source text for generated
// code, one copy both emitters print after the Philox text (KILN_FN is defined
// there). The float forms follow NumPy's npy_divmod: the quotient comes from
// fmod's exact remainder, so a // b and a % b agree (a == b * (a // b) + a % b
// up to rounding) where floor(a / b) would not (1 // 0.1 is 9, as 1 % 0.1 is
// nearly 0.1). Division by zero gives a / b (inf or NaN) for floats and 0 for
// integers, as NumPy does; the integer forms never divide by 0 or -1, whose
// quotient of the most negative value overflows (it wraps instead). The op
// table picks a form by the operands' dtype ($t); passes/fold.c folds the same
// arithmetic.
#include "cgen_int.h"

#define DIVMOD_FLOAT(T, S, FMOD, FLOOR, COPYSIGN)                                                        \
  "KILN_FN " T " kiln_mod_" S "(" T " a, " T " b) {\n"                                                   \
  "  " T " m = " FMOD "(a, b);\n"                                                                        \
  "  if (b == 0) return m;\n"                                                                            \
  "  return m != 0 ? ((b < 0) != (m < 0) ? m + b : m) : " COPYSIGN "((" T ")0, b);\n"                           \
  "}\n"                                                                                                  \
  "KILN_FN " T " kiln_floordiv_" S "(" T " a, " T " b) {\n"                                              \
  "  if (b == 0) return a / b;\n"                                                                        \
  "  " T " m = " FMOD "(a, b), d = (a - m) / b;\n"                                                       \
  "  if (m != 0 && (b < 0) != (m < 0)) d -= 1;\n"                                                        \
  "  if (d == 0) return " COPYSIGN "((" T ")0, a / b);\n"                                                       \
  "  " T " f = " FLOOR "(d);\n"                                                                          \
  "  return d - f > (" T ")0.5 ? f + 1 : f;\n"                                                           \
  "}\n"

const char cg_divmod_text[] =
  DIVMOD_FLOAT("float", "f32", "fmodf", "floorf", "copysignf")
  DIVMOD_FLOAT("double", "f64", "fmod", "floor", "copysign")
  "KILN_FN int64_t kiln_floordiv_i64(int64_t a, int64_t b) {\n"
  "  if (b == 0) return 0;\n"
  "  if (b == -1) return (int64_t)(0 - (uint64_t)a);\n"
  "  int64_t q = a / b;\n"
  "  return q - (a % b != 0 && (a < 0) != (b < 0));\n"
  "}\n"
  "KILN_FN int64_t kiln_mod_i64(int64_t a, int64_t b) {\n"
  "  if (b == 0 || b == -1) return 0;\n"
  "  int64_t r = a % b;\n"
  "  return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n"
  "}\n"
  "KILN_FN int32_t kiln_floordiv_i32(int32_t a, int32_t b) { return (int32_t)kiln_floordiv_i64(a, b); }\n"
  "KILN_FN int32_t kiln_mod_i32(int32_t a, int32_t b) { return (int32_t)kiln_mod_i64(a, b); }\n";
