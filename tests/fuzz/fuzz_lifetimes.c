/* The lifetimes trace reader and a replay of what it reads (fuzz_trace.h). */
#define FUZZ_NAME "lifetimes"
#define FUZZ_FORMAT "lifetimes"
#include "fuzz_trace.h"
