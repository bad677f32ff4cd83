/* The option string (desc.conf and GPUMEM_CONF): whatever it says, the
   resolved desc holds only valid values, and a bad option is a warning. */
#define FUZZ_NAME "options"
#define GPUMEM_IMPLEMENTATION
#include "../../gpumem.h"
#include "fuzz.h"

static int warnings;
static void on_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    FUZZ_ASSERT(level >= GM_LOG_ERROR && level <= GM_LOG_DEBUG);
    FUZZ_ASSERT(strlen(msg) < 1024);
    warnings++;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char* s = fuzz_string(data, size);
    char dir[GM__PATH];
    char* cut = strchr(s, '\n'); /* before the first newline: desc.conf; after it: GPUMEM_CONF */
    gm_desc in, d;
    memset(&in, 0, sizeof in);
    if (cut) {
        *cut = 0;
        setenv("GPUMEM_CONF", cut + 1, 1);
    } else {
        unsetenv("GPUMEM_CONF");
    }
    in.conf = s;
    in.log_fn = on_log;
    d = gm__resolve_desc(&in, dir);
    FUZZ_ASSERT(d.backend == GM_BACKEND_SIM || d.backend == GM_BACKEND_CUDA);
    FUZZ_ASSERT(d.caching == GM_TOGGLE_ON || d.caching == GM_TOGGLE_OFF);
    FUZZ_ASSERT(d.expandable == GM_TOGGLE_ON || d.expandable == GM_TOGGLE_OFF);
    FUZZ_ASSERT(d.disk_checksum == GM_TOGGLE_ON || d.disk_checksum == GM_TOGGLE_OFF);
    FUZZ_ASSERT(d.fallback == GM_FALLBACK_FAIL || d.fallback == GM_FALLBACK_MANAGED);
    FUZZ_ASSERT((int)d.disk_io >= GM_DISK_IO_DEFAULT && d.disk_io <= GM_DISK_IO_PREAD);
    FUZZ_ASSERT(d.log_level >= GM_LOG_ERROR && d.log_level <= GM_LOG_DEBUG);
    FUZZ_ASSERT(d.host_budget > 0 && d.sim.capacity > 0);
    FUZZ_ASSERT(d.disk_depth >= 1 && d.disk_depth <= 1024);
    FUZZ_ASSERT(d.disk_chunk >= 4096 && d.disk_chunk <= 64 * GM__MIB);
    FUZZ_ASSERT(d.gc_threshold >= 0 && d.gc_threshold < 1);
    FUZZ_ASSERT(!d.max_split_size || d.max_split_size > 20 * GM__MIB);
    FUZZ_ASSERT(d.expandable_page <= GM__GIB);
    FUZZ_ASSERT(d.thread_cache_max <= GM__GIB);
    FUZZ_ASSERT(d.device_budget_fraction >= 0 && d.device_budget_fraction <= 1);
    FUZZ_ASSERT(d.device >= 0 && d.device <= 1024);
    FUZZ_ASSERT(d.sim.link_bytes_per_s == 0 || d.sim.link_bytes_per_s >= 1024);
    FUZZ_ASSERT(!d.disk_dir || (d.disk_dir == dir && *dir && strlen(dir) < GM__PATH));
    free(s);
    return 0;
}
