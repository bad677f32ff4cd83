/* gm_setup with fuzzed options, then a short workload driven by the rest
   of the input: allocations, frees, tensors that spill, with gm_check
   after every step; then shutdown. Whatever the options, nothing crashes,
   every invariant holds, and a bad option is a warning and a default. */
#define FUZZ_NAME "setup"
#define GPUMEM_IMPLEMENTATION
#include "../../gpumem.h"
#include "fuzz.h"
#include <unistd.h>

static void quiet(gm_log_level level, const char* msg, void* user) {
    (void)level, (void)msg, (void)user;
}

/* One empty directory for the run's spill files (created unlinked, so it
   stays empty), removed at exit. */
static char spill[64];
static void spill_gone(void) { rmdir(spill); }
static const char* spill_dir(void) {
    if (!spill[0]) {
        snprintf(spill, sizeof spill, "/tmp/gm-fuzz-XXXXXX");
        if (mkdtemp(spill)) atexit(spill_gone);
        else snprintf(spill, sizeof spill, "/tmp");
    }
    return spill;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t cut = 0, i;
    char* conf;
    char dir[GM__PATH];
    const uint8_t* ops;
    size_t nops;
    gm_desc d, r;
    gm_context* ctx = NULL;
    void* p[8] = {0};
    gm_tensor t[4];
    gm_result res;
    while (cut < size && data[cut] != '\n') cut++;
    conf = fuzz_string(data, cut);
    ops = cut < size ? data + cut + 1 : data + size;
    nops = cut < size ? size - cut - 1 : 0;
    if (nops > 64) nops = 64;
    memset(&d, 0, sizeof d);
    memset(t, 0, sizeof t);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.conf = conf;
    d.log_fn = quiet;
    /* what the options would do that a fuzzer must not: spill into any
       directory the input names, or model a link so slow that a copy
       takes hours (the desc wins over the options) */
    r = gm__resolve_desc(&d, dir);
    if (r.disk_dir) d.disk_dir = spill_dir();
    if (r.sim.link_bytes_per_s > 0 && r.sim.link_bytes_per_s < 1e9) d.sim.link_bytes_per_s = 1e12;
    if (r.disk_budget == 0 || r.disk_budget > ((size_t)64 << 20)) d.disk_budget = (size_t)64 << 20;
    res = gm_setup(&ctx, &d);
    if (res != GM_OK) {
        FUZZ_ASSERT(!ctx);
        free(conf);
        return 0;
    }
    FUZZ_ASSERT(gm_check(ctx) == 0);
    for (i = 0; i < nops; i++) {
        uint8_t op = ops[i];
        size_t k = op & 7, sz = (size_t)1 << (6 + (op >> 4)); /* 64 B .. 2 MiB */
        switch ((op >> 3) & 7) {
        case 0: case 1:
            if (!p[k]) {
                res = gm_alloc(ctx, &p[k], sz + (op & 0x30), NULL);
                FUZZ_ASSERT(res == GM_OK || res == GM_ERR_OUT_OF_MEMORY);
            }
            break;
        case 2:
            FUZZ_ASSERT(gm_free(ctx, p[k]) == GM_OK);
            p[k] = NULL;
            break;
        case 3:
            if (!t[k & 3].id) {
                res = gm_tensor_create(ctx, &t[k & 3], sz);
                FUZZ_ASSERT(res == GM_OK || res == GM_ERR_OUT_OF_MEMORY || res == GM_ERR_HOST_OUT_OF_MEMORY ||
                            res == GM_ERR_DISK_FULL);
            }
            break;
        case 4:
            if (t[k & 3].id) {
                void* q;
                res = gm_tensor_acquire(ctx, t[k & 3], NULL, &q);
                if (res == GM_OK) FUZZ_ASSERT(gm_tensor_release(ctx, t[k & 3], NULL, op & 1) == GM_OK);
            }
            break;
        case 5:
            if (t[k & 3].id) (void)gm_tensor_evict_to(ctx, t[k & 3], (op & 1) ? GM_TIER_DISK : GM_TIER_HOST);
            break;
        case 6:
            if (t[k & 3].id) FUZZ_ASSERT(gm_tensor_destroy(ctx, t[k & 3]) == GM_OK);
            t[k & 3].id = 0;
            break;
        default:
            FUZZ_ASSERT(gm_empty_cache(ctx) == GM_OK);
            break;
        }
        FUZZ_ASSERT(gm_check(ctx) == 0);
    }
    for (i = 0; i < 8; i++) FUZZ_ASSERT(gm_free(ctx, p[i]) == GM_OK);
    for (i = 0; i < 4; i++)
        if (t[i].id) FUZZ_ASSERT(gm_tensor_destroy(ctx, t[i]) == GM_OK);
    FUZZ_ASSERT(gm_check(ctx) == 0);
    FUZZ_ASSERT(gm_shutdown(ctx) == GM_OK);
    free(conf);
    return 0;
}
