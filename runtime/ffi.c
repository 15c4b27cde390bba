// ffi.c: calling a compiled graph whose signature is known only at run time (the REPL).
#include "rt.h"

#include <ffi.h>
#include <stdlib.h>

#define STACK_ARGS 16   // most graphs; more arguments go to the heap

int rt_ffi_call_ptrs(void *fn, int nargs, void **args) {
    if (!fn || nargs < 0 || (nargs > 0 && !args))
        return -1;
    ffi_type *stypes[STACK_ARGS];
    void *svals[STACK_ARGS];
    ffi_type **types = stypes;
    void **vals = svals;
    if (nargs > STACK_ARGS) {
        types = malloc(sizeof(*types) * (size_t)nargs);
        vals = malloc(sizeof(*vals) * (size_t)nargs);
        if (!types || !vals) {
            free(types);
            free(vals);
            return -1;
        }
    }
    // libffi takes a pointer to each argument value; our values are the pointers in args.
    for (int i = 0; i < nargs; i++) {
        types[i] = &ffi_type_pointer;
        vals[i] = &args[i];
    }
    ffi_cif cif;
    int rc = -1;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, (unsigned)nargs, &ffi_type_void, types) == FFI_OK) {
        ffi_call(&cif, FFI_FN(fn), NULL, vals);
        rc = 0;
    }
    if (types != stypes) {
        free(types);
        free(vals);
    }
    return rc;
}
