/* A trace reader on fuzzed input, then, when the trace reads, its replay
   through a sim context with gm_check after every event, and once more as
   one recorded and planned step (the planner on the trace's lifetimes).
   FUZZ_FORMAT names the reader; the input's first byte picks the scale of
   the lifetime formats. */
#define GPUMEM_IMPLEMENTATION
#include "../../gpumem.h"
#include "../../tools/gm_trace.h"
#include "../../tools/gm_replay.h"
#include "fuzz.h"

static void quiet(gm_log_level level, const char* msg, void* user) {
    (void)level, (void)msg, (void)user;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const uint64_t scales[4] = {1, 512, 3, (uint64_t)1 << 40};
    gmt_trace t;
    FILE* f;
    int ok;
    gm_desc d;
    gm_context* ctx;
    gmr_result r;
    if (size < 1) return 0;
    f = size > 1 ? fmemopen((void*)(data + 1), size - 1, "r") : fopen("/dev/null", "r");
    if (!f) return 0;
    ok = gmt_load_file(f, FUZZ_FORMAT, scales[data[0] & 3], &t);
    fclose(f);
    if (!ok) {
        FUZZ_ASSERT(t.error[0] && strlen(t.error) < sizeof t.error);
        gmt_free(&t);
        return 0;
    }
    FUZZ_ASSERT(!t.error[0]);
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.log_fn = quiet;
    d.sim.capacity = (size_t)1 << 40; /* nothing is touched */
    d.expandable = (data[0] & 4) ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    FUZZ_ASSERT(gm_setup(&ctx, &d) == GM_OK);
    r = gmr_run(ctx, &t, 0, 1, 0, NULL, NULL);
    FUZZ_ASSERT(r.error == GM_OK && r.checks_failed == 0);
    FUZZ_ASSERT(gm_check(ctx) == 0);
    FUZZ_ASSERT(gm_shutdown(ctx) == GM_OK);
    /* one planned step: recorded (marked with the trace's times), packed, served */
    FUZZ_ASSERT(gm_setup(&ctx, &d) == GM_OK);
    FUZZ_ASSERT(gm_plan_begin(ctx) == GM_OK);
    r = gmr_run(ctx, &t, 0, 0, GMR_MARK, NULL, NULL);
    FUZZ_ASSERT(r.error == GM_OK);
    ok = gm_plan_end(ctx) == GM_OK;
    if (ok) {
        FUZZ_ASSERT(gm_plan_step(ctx) == GM_OK);
        r = gmr_run(ctx, &t, 0, 1, 0, NULL, NULL);
        FUZZ_ASSERT(r.error == GM_OK && r.checks_failed == 0);
    }
    FUZZ_ASSERT(gm_check(ctx) == 0);
    FUZZ_ASSERT(gm_shutdown(ctx) == GM_OK);
    gmt_free(&t);
    return 0;
}
