/* The rmm trace reader and a replay of what it reads (fuzz_trace.h). */
#define FUZZ_NAME "rmm"
#define FUZZ_FORMAT "rmm"
#include "fuzz_trace.h"
