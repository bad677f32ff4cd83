/* bench/plan: what a request costs when served from a plan, against the
   online caching allocator, on the same step in the same run. The step is
   training-shaped: L layers, each allocating an activation kept for the
   backward pass and two temporaries freed at once; the backward pass frees
   the activations in reverse while allocating and freeing gradients. The
   step is recorded once (gm_plan_begin / gm_plan_end), then run STEPS times
   from the plan and STEPS times online; per-request cost is a step's time
   over its requests (allocations and frees), and the figure is the median
   over steps. Sim backend, nothing touched. Then the time gm_plan_pack
   takes on 10,000-request steps: the training shape (layers as above) and
   a hard one (random lifetimes and sizes from a fixed seed, the kind that
   brings in the exact search), with the region against the peak live;
   and the time gm_plan_end takes on a recorded step of 10,000 requests
   (this step's shape, 2,500 layers): the packing, the conflict lists and
   the region's allocation.

   usage: plan [CSV]   (default build/bench-plan.csv) */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "bench.h"
#include <string.h>

enum { L = 400, STEPS = 201, LBIG = 2500, SLOTS = 2 * LBIG + 8 };
static void* p[SLOTS];

/* One step of `layers` layers; returns the operations done (allocations + frees). */
static int step_n(gm_context* ctx, int layers) {
    int l, ops = 0;
    for (l = 0; l < layers; l++) {
        gm_alloc(ctx, &p[l], (size_t)(256 + 64 * (l % 7)) << 10, NULL);
        gm_alloc(ctx, &p[SLOTS - 1], (size_t)(128 + 32 * (l % 3)) << 10, NULL);
        gm_alloc(ctx, &p[SLOTS - 2], 4096, NULL);
        gm_free(ctx, p[SLOTS - 2]);
        gm_free(ctx, p[SLOTS - 1]);
        ops += 5;
    }
    for (l = layers - 1; l >= 0; l--) {
        gm_alloc(ctx, &p[layers + l], (size_t)(64 + 16 * (l % 5)) << 10, NULL);
        gm_free(ctx, p[l]);
        gm_free(ctx, p[layers + l]);
        ops += 3;
    }
    return ops;
}
static int step(gm_context* ctx) { return step_n(ctx, L); }

/* gm_plan_end on a recorded step of LBIG layers (4 requests a layer). */
static void end_time(const gm_desc* d) {
    gm_context* ctx;
    gm_plan_stats ps;
    double t0, ms;
    if (gm_setup(&ctx, d) != GM_OK) return;
    gm_plan_begin(ctx);
    step_n(ctx, LBIG);
    t0 = bench_now_ns();
    gm_plan_end(ctx);
    ms = (bench_now_ns() - t0) / 1e6;
    gm_plan_get_stats(ctx, &ps);
    printf("gm_plan_end, %lld recorded requests:  %8.1f ms   region %.4fx peak live\n", (long long)ps.requests, ms,
           ps.peak_live ? (double)ps.region / (double)ps.peak_live : 0);
    gm_shutdown(ctx);
}

/* gm_plan_pack on n requests: training-shaped (hard = 0) or random; prints
   the build time and the region against the peak live. */
static void pack_time(size_t n, int hard) {
    gm_plan_req* q = (gm_plan_req*)calloc(n, sizeof *q);
    uint64_t region = 0, rng = 0x2545F4914F6CDD1Dull, live;
    size_t i, t = 0;
    double t0, ms;
    if (!q) return;
    for (i = 0; i < n; i++) {
        rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
        if (hard) { /* starts uniform over 4n ticks, lifetimes about 4n/150, sizes 512 B x 1..2048 */
            q[i].start = (rng >> 11) % (4 * n);
            q[i].end = q[i].start + 1 + (rng >> 40) % (8 * n / 150);
            q[i].size = 512 * (1 + (rng >> 20) % 2048);
        } else { /* per layer: an activation to the mirrored backward point, a temporary */
            size_t l = i / 2, layers = n / 2;
            q[i].start = t++;
            q[i].end = i % 2 ? t : 4 * layers - 2 * l;
            q[i].size = (size_t)(i % 2 ? 128 + 32 * (l % 3) : 256 + 64 * (l % 7)) << 10;
        }
    }
    live = gm_plan_peak_live(q, n);
    t0 = bench_now_ns();
    gm_plan_pack(q, n, 0, &region);
    ms = (bench_now_ns() - t0) / 1e6;
    printf("gm_plan_pack, %zu requests, %-15s %8.1f ms   region %.4fx peak live, checker %lld\n", n,
           hard ? "random:" : "training-shaped:", ms, (double)region / (double)live, gm_plan_check(q, n, region));
    free(q);
}

static double run(gm_context* ctx, int planned, double* per_op) {
    double t[STEPS];
    int k, ops = 0;
    for (k = 0; k < STEPS; k++) {
        double t0;
        if (planned) gm_plan_step(ctx);
        t0 = bench_now_ns();
        ops = step(ctx);
        t[k] = (bench_now_ns() - t0) / ops;
    }
    *per_op = bench_median(t, STEPS);
    return (double)ops;
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-plan [CSV]", NULL);
    if (args_rc >= 0) return args_rc;
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-plan.csv";
    gm_context* ctx;
    gm_desc d;
    gm_plan_stats ps;
    gm_stats st;
    double online, planned, ops;
    FILE* csv;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.sim.capacity = (size_t)64 << 30;
    if (gm_setup(&ctx, &d) != GM_OK) return 1;
    run(ctx, 0, &online); /* warm the cache, then measure online */
    ops = run(ctx, 0, &online);
    gm_plan_begin(ctx);
    step(ctx);
    gm_plan_end(ctx);
    run(ctx, 1, &planned);
    gm_plan_get_stats(ctx, &ps);
    gm_get_stats(ctx, &st);
    printf("sim backend; a step of %.0f requests (%d layers), median over %d steps of the step's time per request\n",
           ops, L, STEPS);
    printf("%-28s %10s\n", "way", "ns/request");
    printf("%-28s %10.1f\n", "online (caching allocator)", online);
    printf("%-28s %10.1f  (%.2fx)\n", "planned", planned, planned / online);
    printf("plan: %lld requests, %lld hits, %lld departures; region %.1f MiB for a peak live of %.1f MiB (%.4fx)\n",
           (long long)ps.requests, (long long)ps.hits, (long long)ps.departures, (double)ps.region / 1048576.0,
           (double)ps.peak_live / 1048576.0, ps.peak_live ? (double)ps.region / (double)ps.peak_live : 0);
    pack_time(10000, 0);
    pack_time(10000, 1);
    end_time(&d);
    csv = fopen(csv_path, "w");
    if (csv) {
        fprintf(csv, "way,ns_per_request\nonline,%.2f\nplanned,%.2f\n", online, planned);
        fclose(csv);
    }
    gm_shutdown(ctx);
    return ps.departures == 0 ? 0 : 1;
}
