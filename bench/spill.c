/* bench/spill: a training-like step (forward over L layer tensors, then
   backward in reverse, each use a "kernel" of fixed compute time on the
   stream) under device budgets from twice the working set down to a
   quarter of it, on the sim backend with a modelled link. Five ways:

     raw       every tensor from the raw backend (capacity = the budget)
     caching   every tensor from gm_alloc under the budget
     lru       tiered manager, host spill, least recently released first
     learned   tiered manager, host spill, learned order + prefetch ahead
     managed   tiered manager with the unified-memory fallback (on sim a
               managed tensor pays one host-to-device migration per use,
               with no fault overhead: a flattering model of unified memory)
     lru+disk, learned+disk
               the two tier policies with a host tier of a quarter of the
               working set and the disk tier below it (spill file in DIR):
               three tiers, real disk I/O

   For each: completes or out of memory, step time (median of the measured
   steps), its ratio to the in-memory step, bytes moved per step, and the
   achieved copy rate (bytes over the time the link was busy) as a fraction
   of the modelled link rate, and the bytes through the disk per step.
   Prints a table; writes CSV.

   usage: spill [CSV] [DIR]   (default build/bench-spill.csv, /var/tmp) */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "bench.h"
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
enum { L = 16, STEPS = 4 };               /* one to learn, one to settle, two measured */
static const size_t S = 32 * MiB;          /* one layer tensor */
static const double LINK = 8.0 * (1 << 30); /* bytes per second, each way */
static const double COMPUTE_MS = 5.0;      /* per use; a copy of S takes 3.9 ms */

static void compute(void* arg) {
    struct timespec ts;
    (void)arg;
    ts.tv_sec = 0;
    ts.tv_nsec = (long)(COMPUTE_MS * 1e6);
    nanosleep(&ts, NULL);
}

typedef struct result {
    int ok;
    double step_ms, moved_mib, rate, disk_mib;
    char why[64];
} result;

static const char* disk_dir; /* set: the tier runs get a small host tier and the disk */

static gm_context* make_ctx(size_t budget, int managed, int cap_device) {
    gm_context* ctx = NULL;
    gm_desc d;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.device_budget = budget;
    d.host_budget = disk_dir ? (size_t)L * S / 4 : (size_t)L * S + 256 * MiB;
    d.disk_dir = disk_dir;
    d.fallback = managed ? GM_FALLBACK_MANAGED : GM_FALLBACK_FAIL;
    d.sim.capacity = cap_device ? budget : (size_t)64 << 30;
    d.sim.link_bytes_per_s = LINK;
    if (gm_setup(&ctx, &d) != GM_OK) return NULL;
    return ctx;
}

static double link_moved(gm_context* ctx, double* busy_s) {
    uint64_t b0 = 0, t0 = 0, b1 = 0, t1 = 0;
    gm_sim_link_stats(ctx, 0, &b0, &t0);
    gm_sim_link_stats(ctx, 1, &b1, &t1);
    *busy_s = (double)(t0 + t1) / 1e9;
    return (double)(b0 + b1);
}

/* raw / caching: the tensors must all fit. */
static result run_flat(size_t budget, int raw) {
    result r;
    gm_context* ctx = make_ctx(budget, 0, raw);
    void* p[L];
    double times[STEPS];
    int i, k, n = 0;
    memset(&r, 0, sizeof r);
    if (!ctx) return r;
    for (i = 0; i < L; i++) {
        gm_result e = raw ? gm_raw_alloc(ctx, &p[i], S) : gm_alloc(ctx, &p[i], S, NULL);
        if (e != GM_OK) {
            snprintf(r.why, sizeof r.why, "OOM at tensor %d of %d", i + 1, L);
            break;
        }
        n++;
    }
    if (n == L) {
        for (k = 0; k < STEPS; k++) {
            double t0 = bench_now_ns();
            for (i = 0; i < 2 * L; i++) gm_launch_host(ctx, NULL, compute, NULL);
            gm_stream_synchronize(ctx, NULL);
            times[k] = (bench_now_ns() - t0) / 1e6;
        }
        r.ok = 1;
        r.step_ms = bench_median(times + 2, STEPS - 2);
    }
    for (i = 0; i < n; i++) {
        if (raw) gm_raw_free(ctx, p[i], S);
        else gm_free(ctx, p[i]);
    }
    gm_shutdown(ctx);
    return r;
}

static result run_tier(size_t budget, gm_evict_policy policy, int ahead, int managed) {
    result r;
    gm_context* ctx = make_ctx(budget, managed, 0);
    gm_tensor t[L];
    gm_stream s;
    double times[STEPS], moved0 = 0, busy0 = 0, moved1, busy1, disk0 = 0;
    gm_tier_stats ts;
    int i, k, n = 0;
    memset(&r, 0, sizeof r);
    if (!ctx) return r;
    gm_stream_create(ctx, &s);
    gm_tier_set_policy(ctx, policy, ahead, NULL, NULL);
    for (i = 0; i < L; i++) {
        if (gm_tensor_create(ctx, &t[i], S) != GM_OK) {
            snprintf(r.why, sizeof r.why, "OOM at tensor %d of %d", i + 1, L);
            break;
        }
        n++;
    }
    for (k = 0; k < STEPS && n == L; k++) {
        double t0;
        int failed = 0;
        if (k == 2) {
            moved0 = link_moved(ctx, &busy0);
            gm_tier_get_stats(ctx, &ts);
            disk0 = (double)(ts.bytes_to_disk + ts.bytes_from_disk);
        }
        t0 = bench_now_ns();
        for (i = 0; i < 2 * L && !failed; i++) {
            int j = i < L ? i : 2 * L - 1 - i;
            void* p;
            if (gm_tensor_acquire(ctx, t[j], s, &p) != GM_OK) {
                snprintf(r.why, sizeof r.why, "acquire failed");
                failed = 1;
                break;
            }
            gm_launch_host(ctx, s, compute, NULL);
            gm_tensor_release(ctx, t[j], s, 1);
        }
        gm_stream_synchronize(ctx, s);
        times[k] = (bench_now_ns() - t0) / 1e6;
        gm_tier_step(ctx);
        if (failed) n = 0;
    }
    if (n == L) {
        gm_device_synchronize(ctx);
        moved1 = link_moved(ctx, &busy1);
        r.ok = 1;
        r.step_ms = bench_median(times + 2, STEPS - 2);
        r.moved_mib = (moved1 - moved0) / (STEPS - 2) / (double)MiB;
        r.rate = busy1 > busy0 ? (moved1 - moved0) / (busy1 - busy0) / LINK : 0;
        gm_tier_get_stats(ctx, &ts);
        r.disk_mib = ((double)(ts.bytes_to_disk + ts.bytes_from_disk) - disk0) / (STEPS - 2) / (double)MiB;
    }
    for (i = 0; i < L && i < n; i++) gm_tensor_destroy(ctx, t[i]);
    gm_stream_destroy(ctx, s);
    gm_shutdown(ctx);
    return r;
}

int main(int argc, char** argv) {
    static const double ratios[] = {0.5, 1.0, 1.5, 2.0, 3.0, 4.0};
    static const char* names[] = {"raw", "caching", "lru", "learned", "managed", "lru+disk", "learned+disk"};
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-spill.csv";
    const char* dir = argc > 2 ? argv[2] : "/var/tmp";
    FILE* csv = fopen(csv_path, "w");
    double in_memory = 2 * L * COMPUTE_MS;
    size_t ws = (size_t)L * S, ri;
    int m;
    printf("sim backend; %d layer tensors of %zu MiB (working set %zu MiB); %.0f ms of compute per use; link %.0f GiB/s "
           "each way (a tensor crosses in %.1f ms)\n",
           L, S / MiB, ws / MiB, COMPUTE_MS, LINK / (1 << 30), (double)S / LINK * 1e3);
    printf("in-memory step: %.0f ms of compute (2 x %d uses)\n\n", in_memory, L);
    printf("three-tier rows: host tier %zu MiB (a quarter of the working set), spill file in %s\n\n", ws / 4 / MiB, dir);
    printf("%-12s %6s | %-26s %9s %8s %10s %8s %10s\n", "mode", "ratio", "result", "step ms", "x memory", "MiB/step",
           "link %", "disk MiB");
    if (csv) fprintf(csv, "mode,ratio,completed,step_ms,over_in_memory,moved_mib_per_step,link_fraction,disk_mib_per_step\n");
    for (m = 0; m < 7; m++) {
        disk_dir = m >= 5 ? dir : NULL;
        for (ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++) {
            size_t budget = (size_t)((double)ws / ratios[ri]);
            result r;
            budget = budget / MiB * MiB;
            if (m < 2) r = run_flat(budget, m == 0);
            else if (m == 2) r = run_tier(budget, GM_EVICT_LRU, 0, 0);
            else if (m == 3 || m == 6) r = run_tier(budget, GM_EVICT_LEARNED, 3, 0);
            else r = run_tier(budget, GM_EVICT_LRU, 0, m == 4);
            if (r.ok)
                printf("%-12s %6.1f | %-26s %9.1f %8.2f %10.0f %7.0f%% %10.0f\n", names[m], ratios[ri], "completes",
                       r.step_ms, r.step_ms / in_memory, r.moved_mib, 100 * r.rate, r.disk_mib);
            else
                printf("%-12s %6.1f | %-26s %9s %8s %10s %8s %10s\n", names[m], ratios[ri], r.why[0] ? r.why : "failed",
                       "-", "-", "-", "-", "-");
            if (csv)
                fprintf(csv, "%s,%.2f,%d,%.2f,%.3f,%.1f,%.3f,%.1f\n", names[m], ratios[ri], r.ok, r.step_ms,
                        r.step_ms / in_memory, r.moved_mib, r.rate, r.disk_mib);
        }
    }
    if (csv) {
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    return 0;
}
