/* planned.c -- planned mode on a training loop: one step recorded, the rest
   served from a plan. `make planned` builds and runs it; it checks its own
   result and exits non-zero when a check fails.

   The step is transformer-shaped: per layer, activations kept for the
   backward pass and attention temporaries freed at once; the backward pass
   frees the activations in reverse while gradients come and go. The op
   index within the step marks the recording (gm_plan_mark), so the packer
   measures lifetimes in operations, not in allocator calls.

     1. the caching allocator alone, for reference (peak reserved over
        steps 1..9 at sequence 256 and over steps 12..15 at 320);
     2. step 0 recorded, packed by gm_plan_end; steps 1..9 from the plan;
     3. from step 10 the sequence grows (another size in every layer): the
        step departs from the plan, the next one is recorded again, and
        the one after it is served from the new plan.
   A step that departs pays twice: the plan's region stays reserved while
   the online allocator serves the step beside it.
   No kernel runs and no byte is touched (sim backend unless a GPU is
   there); only the allocator is measured. */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include "pick_backend.h"

#include <stdio.h>
#include <string.h>

#define KIB ((size_t)1 << 10)
enum { LAYERS = 16, STEPS = 16 };

static void* act[LAYERS][3]; /* kept for the backward pass */
static int failed;

static void check(int ok, const char* what) {
    if (!ok) {
        printf("FAILED: %s\n", what);
        failed = 1;
    }
}

/* One step with sequence length seq; op counts the step's operations. */
static void step(gm_context* ctx, size_t seq) {
    uint64_t op = 0;
    int l, k;
    void *scores, *tmp, *grad;
    for (l = 0; l < LAYERS; l++) { /* forward */
        gm_plan_mark(ctx, op++);
        for (k = 0; k < 3; k++) check(gm_alloc(ctx, &act[l][k], seq * (k == 1 ? 16 : 4) * KIB, NULL) == GM_OK, "alloc");
        gm_plan_mark(ctx, op++); /* attention: scores, then a temporary */
        check(gm_alloc(ctx, &scores, seq * seq / 4 * KIB, NULL) == GM_OK, "alloc");
        check(gm_alloc(ctx, &tmp, seq * 8 * KIB, NULL) == GM_OK, "alloc");
        gm_free(ctx, scores);
        gm_plan_mark(ctx, op++);
        gm_free(ctx, tmp);
    }
    for (l = LAYERS - 1; l >= 0; l--) { /* backward */
        gm_plan_mark(ctx, op++);
        check(gm_alloc(ctx, &grad, seq * 12 * KIB, NULL) == GM_OK, "alloc");
        check(gm_alloc(ctx, &scores, seq * seq / 4 * KIB, NULL) == GM_OK, "alloc");
        gm_free(ctx, scores);
        gm_plan_mark(ctx, op++);
        for (k = 2; k >= 0; k--) gm_free(ctx, act[l][k]);
        gm_free(ctx, grad);
    }
}

static int64_t peak_reserved(gm_context* ctx) {
    gm_stats st;
    memset(&st, 0, sizeof st);
    gm_get_stats(ctx, &st);
    return st.reserved_bytes[GM_STAT_ALL].peak;
}

static size_t seq_of(int s) { return s < 10 ? 256 : 320; }

int main(void) {
    gm_context *ctx, *ref;
    gm_desc d;
    gm_plan_stats ps;
    int64_t online[3], planned[3], hits = 0; /* peak reserved: steps 1..9, 10..11, 12..15 */
    int s;
    memset(&d, 0, sizeof d);
    d.backend = pick_backend();
    d.ignore_env = 1;
    d.sim.capacity = (size_t)4 << 30;
    if (gm_setup(&ref, &d) != GM_OK || gm_setup(&ctx, &d) != GM_OK) {
        printf("setup failed\n");
        return 1;
    }
    /* 1. the caching allocator alone */
    for (s = 0; s < STEPS; s++) {
        if (s == 1 || s == 10 || s == 12) gm_reset_peak_stats(ref);
        step(ref, seq_of(s));
        if (s == 9 || s == 11 || s == 15) online[s == 9 ? 0 : s == 11 ? 1 : 2] = peak_reserved(ref);
    }
    /* 2. and 3. */
    gm_plan_begin(ctx);
    step(ctx, 256);
    check(gm_plan_end(ctx) == GM_OK, "gm_plan_end");
    gm_plan_get_stats(ctx, &ps);
    printf("plan: %lld requests in a region of %.1f MiB, peak live %.1f MiB (%.4fx)\n", (long long)ps.requests,
           (double)ps.region / (1 << 20), (double)ps.peak_live / (1 << 20), (double)ps.region / (double)ps.peak_live);
    printf("%4s %6s %6s %10s %7s\n", "step", "seq", "hits", "departures", "replans");
    for (s = 1; s < STEPS; s++) {
        int64_t h0 = ps.hits, d0 = ps.departures;
        gm_plan_step(ctx); /* (at step 12 it builds the new plan) */
        if (s == 1 || s == 10 || s == 12) gm_reset_peak_stats(ctx);
        step(ctx, seq_of(s));
        if (s == 9 || s == 11 || s == 15) planned[s == 9 ? 0 : s == 11 ? 1 : 2] = peak_reserved(ctx);
        check(gm_check(ctx) == 0, "gm_check");
        gm_plan_get_stats(ctx, &ps);
        printf("%4d %6zu %6lld %10lld %7lld\n", s, seq_of(s), (long long)(ps.hits - h0),
               (long long)(ps.departures - d0), (long long)ps.replans);
        if (s < 10 || s >= 12) check(ps.hits - h0 == ps.requests, "every request a hit");
        hits += ps.hits - h0;
    }
    printf("%lld hits, %lld departures, %lld re-plans\n", (long long)hits, (long long)ps.departures,
           (long long)ps.replans);
    printf("peak reserved, MiB     caching allocator   planned\n");
    for (s = 0; s < 3; s++)
        printf("  %-20s %17.1f %9.1f (%.2fx)\n", s == 0 ? "steps 1..9 (256)" : s == 1 ? "steps 10..11 (320)" : "steps 12..15 (320)",
               (double)online[s] / (1 << 20), (double)planned[s] / (1 << 20), (double)planned[s] / (double)online[s]);
    check(ps.replans == 1, "one re-plan after the sequence grows");
    check(planned[0] <= online[0] && planned[2] <= online[2], "a plan reserves no more than the caching allocator");
    gm_shutdown(ctx);
    gm_shutdown(ref);
    printf(failed ? "planned: FAILED\n" : "planned: ok\n");
    return failed;
}
