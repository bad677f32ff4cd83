/* The packing trace reader and a replay of what it reads (fuzz_trace.h). */
#define FUZZ_NAME "packing"
#define FUZZ_FORMAT "packing"
#include "fuzz_trace.h"
