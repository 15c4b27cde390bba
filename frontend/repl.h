#ifndef KILN_REPL_H
#define KILN_REPL_H
#include <stdint.h>
// The interactive loop on standard input. A terminal gets a prompt, line
// editing and history; a pipe gets statements read line by line and their
// results printed, so sessions can be scripted. Returns the exit status.
int repl_main(int threads, uint64_t seed);
#endif
