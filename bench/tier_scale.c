/* bench/tier_scale: what the tiered manager costs as the number of tensors
   grows. 4 KiB tensors on sim; the device budget holds half of them, and
   the tensors are acquired and released in a cycle, so every acquire
   evicts one tensor and brings one in (LRU's worst case, and learned
   order's after its first step). For 10^3 .. 10^6 tensors, LRU and learned
   order, one thread and two (each on its own half of the tensors and its
   own stream, started together, with half as much device room, so that
   neither thread hits even when the other is idle): ns per acquire +
   release, the best of three passes of up to OPS pairs each (a pass that
   runs past TIME_LIMIT seconds ends early and says so), each pass ending
   when the copies it queued have (the streams synchronized); with two
   threads, the wall time of a pass over the pairs of one thread, so that
   two threads doing twice the work in the same time show the same figure
   as one. Then the same with everything fitting (hits only), and the
   host memory per tensor: all of it (the manager's record, and the
   allocator's record of the tensor's device block), and the manager's
   own (less what as many plain gm_alloc of 4 KiB cost); then LRU and
   learned order again with a disk tier beside (below).

   The sim runs with run_inline: a 4 KiB copy (the link is unlimited, so
   the model gives it no time) runs in the thread that queues it when its
   stream is idle. Handed to the sim's stream threads, every copy and
   cross-stream wait is a futex hand-off between threads, and on a small
   virtual machine those cost tens of microseconds each: the figures would
   be the simulator's. The bench prints that cost (a 4 KiB copy and its
   wait on a stream thread, beyond the modelled link time) and, for
   reference, one row's figure with the copies on the stream threads.
   The sim also runs with move_bytes off: copies keep their order and
   accounting but the CPU does not move their bytes. A device's copy
   engine moves them without the host; on sim, a 4 KiB memmove from memory
   not in the CPU's caches is about half of a miss at 10^6 tensors, and
   it grows with the tensors' total size, not with the manager's work. For
   reference the bench prints LRU with the bytes moved, at the smallest and
   the largest count.
   Before timing, two cycles: one to learn the step from and place every
   tensor, one so that every tensor has moved both ways (the sim backs its
   memory on first touch; cudaMalloc and cudaHostAlloc back theirs before
   they return).

   Prints a table; writes CSV (first argument, default
   build/bench-tier-scale.csv) and an SVG (second, default
   build/bench-tier-scale.svg): log10 ns per pair against log10 tensors.
   `build/bench-tier-scale CSV SVG MAXN` stops at MAXN tensors; a fourth
   argument names the directory of the disk tier of the last two columns
   (default /var/tmp): LRU and learned order as in the first columns, with
   a disk tier beside and a host tier that holds every tensor, so nothing
   is written and the figures are the bookkeeping a disk tier adds. Last,
   a table of its own (printed, not in the CSV): LRU and learned order
   with the host tier full (the device holds a tenth of the tensors, the
   host tier a quarter, the disk the rest), at 4,000 to 64,000 tensors
   (at most MAXN), 10,000 pairs a pass: every eviction gives up a host
   copy, so the figure is disk-bound, and what grows with the tensors is
   the choice of the host copy. */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "../examples/plot.h"
#include "bench.h"
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TSIZE 4096
#define OPS 20000
#define TIME_LIMIT 20.0 /* seconds per pass */

static pthread_barrier_t start;

typedef struct cfg {
    gm_context* ctx;
    int threads;
    gm_tensor* t;
    size_t first, n;  /* this thread's tensors */
    gm_stream s;
    size_t ops;
    size_t at;        /* where the cycle goes on: a pass starts where the last one stopped */
    double ns;        /* per pair, best pass */
    int err, partial;
} cfg;

/* One pass: ops pairs over this thread's tensors, going on with the
   cycle (a pass shorter than the cycle that started again from its first
   tensor would find the last pass's tensors on the device). */
static double pass(cfg* c, size_t* done) {
    double t0 = bench_now_ns(), limit = t0 + TIME_LIMIT * 1e9;
    size_t i;
    for (i = 0; i < c->ops; i++) {
        void* p;
        gm_tensor x = c->t[c->first + (c->at + i) % c->n];
        if (gm_tensor_acquire(c->ctx, x, c->s, &p) != GM_OK || gm_tensor_release(c->ctx, x, c->s, 1) != GM_OK) {
            c->err = 1;
            break;
        }
        if ((i & 255) == 255 && bench_now_ns() > limit) {
            i++;
            c->partial = 1;
            break;
        }
    }
    gm_device_synchronize(c->ctx); /* the pass ends when its copies have (the manager's streams too) */
    *done = i;
    c->at = (c->at + i) % c->n;
    return i ? (bench_now_ns() - t0) / (double)i : -1;
}

static void* worker(void* a) {
    cfg* c = (cfg*)a;
    int k;
    c->ns = -1;
    for (k = 0; k < 3; k++) {
        size_t done;
        double ns;
        if (c->threads > 1) pthread_barrier_wait(&start); /* the passes run side by side */
        if (c->err) continue;
        ns = pass(c, &done);
        if (ns > 0 && (c->ns < 0 || ns < c->ns)) c->ns = ns;
        if (c->partial && c->threads == 1) break; /* one pass is enough when it is this slow */
    }
    return NULL;
}

/* Host bytes in use by malloc (glibc). */
static size_t heap_used(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#else
    return 0;
#endif
}

static int g_threaded; /* the sim's copies on its stream threads (run_inline off) */
static const char* g_disk; /* a disk tier's directory (the host tier holds every tensor: none is written) */
static int g_bytes;    /* the sim's copies move their bytes (move_bytes on) */
static int g_full;     /* with g_disk: the device holds a tenth of the tensors and the host tier a quarter, so
                          that every eviction gives up a host copy (the host victims' choice) */

/* One configuration: ns per pair (the slower thread's), -1 on failure. */
static double run(size_t n, int learned, int threads, int fits, int* partial, double* meta_per_tensor) {
    gm_desc d;
    gm_context* ctx;
    cfg c[2];
    pthread_t th[2];
    size_t i, before;
    double worst = -1;
    int k, w;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    /* half of what the threads cycle over fits: with two, half of one
       thread's half, so that neither thread ever hits, together or alone */
    d.device_budget = fits ? n * TSIZE * 2 + (64u << 20) : n * TSIZE / (size_t)(2 * threads);
    d.host_budget = n * TSIZE + (64u << 20);
    if (g_full) {
        d.device_budget = n * TSIZE / 10;
        d.host_budget = n * TSIZE / 4;
    }
    d.sim.capacity = (size_t)64 << 30;
    d.sim.run_inline = g_threaded ? GM_TOGGLE_OFF : GM_TOGGLE_ON; /* the manager's cost, not the sim's hand-offs */
    d.sim.move_bytes = g_bytes || g_threaded ? GM_TOGGLE_ON : GM_TOGGLE_OFF; /* nor the CPU's moving of bytes */
    d.disk_dir = g_disk;
    if (gm_setup(&ctx, &d) != GM_OK) return -1;
    if (learned) gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 4, NULL, NULL);
    gm_tensor* t = (gm_tensor*)calloc(n, sizeof *t);
    if (!t) return -1;
    before = heap_used(); /* the caller's handles are not the manager's */
    for (i = 0; i < n; i++)
        if (gm_tensor_create(ctx, &t[i], TSIZE) != GM_OK) {
            gm_shutdown(ctx);
            free(t);
            return -1;
        }
    if (meta_per_tensor) *meta_per_tensor = before ? (double)(heap_used() - before) / (double)n : -1;
    *partial = 0;
    for (k = 0; k < threads; k++) {
        memset(&c[k], 0, sizeof c[k]);
        c[k].ctx = ctx;
        c[k].threads = threads;
        c[k].t = t;
        c[k].n = n / (size_t)threads;
        c[k].first = (size_t)k * c[k].n;
        c[k].ops = c[k].n < OPS ? OPS : c[k].n; /* at least one whole cycle */
        if (c[k].ops > OPS * 5) c[k].ops = OPS * 5;
        if (g_full) c[k].ops = OPS / 2; /* each miss waits for the disk: fewer pairs make the figure */
        if (gm_stream_create(ctx, &c[k].s) != GM_OK) c[k].err = 1;
    }
    /* a first cycle to learn the step from (and to place every tensor), and a second: every tensor
       has moved both ways, so that the sim's memory, backed on first touch, is in place (cudaMalloc
       and cudaHostAlloc back theirs before they return) */
    for (w = 0; w < 2; w++) {
        for (k = 0; k < threads; k++) {
            size_t j;
            for (j = 0; j < c[k].n && !c[k].err; j++) {
                void* p;
                gm_tensor x = t[c[k].first + j];
                if (gm_tensor_acquire(ctx, x, c[k].s, &p) != GM_OK || gm_tensor_release(ctx, x, c[k].s, 1) != GM_OK)
                    c[k].err = 1;
            }
        }
        if (learned) gm_tier_step(ctx);
    }
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (k = 0; k < threads; k++) pthread_create(&th[k], NULL, worker, &c[k]);
    for (k = 0; k < threads; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&start);
    for (k = 0; k < threads; k++) {
        if (c[k].err || c[k].ns < 0) worst = -2;
        if (worst > -2 && c[k].ns > worst) worst = c[k].ns;
        *partial |= c[k].partial;
        gm_stream_destroy(ctx, c[k].s);
    }
    if (gm_check(ctx) != 0) worst = -2;
    for (i = 0; i < n; i++) gm_tensor_destroy(ctx, t[i]);
    free(t);
    gm_shutdown(ctx);
    return worst < 0 ? -1 : worst;
}

/* The host bytes per block that n plain gm_alloc of a tensor's size
   cost (the thread caches off, as a tensor's device memory has none): the
   allocator's block record and its map entry, which a tensor on the device
   has too. The manager's own bytes per tensor are the rest. */
static double alloc_meta(size_t n) {
    gm_desc d;
    gm_context* ctx;
    void** p = (void**)calloc(n, sizeof *p);
    size_t i, before;
    double per = -1;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.device_budget = n * TSIZE * 2 + (64u << 20);
    d.sim.capacity = (size_t)64 << 30;
    d.thread_cache = GM_TOGGLE_OFF;
    if (!p || gm_setup(&ctx, &d) != GM_OK) {
        free(p);
        return -1;
    }
    before = heap_used();
    for (i = 0; i < n && gm_alloc(ctx, &p[i], TSIZE, NULL) == GM_OK; i++) {}
    if (i == n && before) per = (double)(heap_used() - before) / (double)n;
    while (i--) gm_free(ctx, p[i]);
    gm_shutdown(ctx);
    free(p);
    return per;
}

/* A 4 KiB copy and an event wait on sim (on its stream thread), minus the
   modelled link time (0 with the link unlimited): the simulator's own
   overhead per transfer, the median of 201. */
static double copy_overhead(void) {
    gm_desc d;
    gm_context* ctx;
    gm_stream s;
    void *dev, *host;
    double t[201];
    int i;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    if (gm_setup(&ctx, &d) != GM_OK) return -1;
    host = calloc(1, TSIZE);
    if (!host || gm_stream_create(ctx, &s) != GM_OK || gm_alloc(ctx, &dev, TSIZE, s) != GM_OK) {
        free(host);
        gm_shutdown(ctx);
        return -1;
    }
    for (i = 0; i < 201; i++) {
        double t0 = bench_now_ns();
        gm_memcpy_async(ctx, dev, host, TSIZE, GM_COPY_HOST_TO_DEVICE, s);
        gm_stream_synchronize(ctx, s);
        t[i] = bench_now_ns() - t0;
    }
    gm_free(ctx, dev);
    free(host);
    gm_stream_destroy(ctx, s);
    gm_shutdown(ctx);
    return bench_median(t, 201);
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-tier-scale [CSV] [SVG] [MAXN] [DISK_DIR]", NULL);
    if (args_rc >= 0) return args_rc;
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-tier-scale.csv";
    const char* svg_path = argc > 2 ? argv[2] : "build/bench-tier-scale.svg";
    size_t maxn = argc > 3 ? (size_t)atoll(argv[3]) : 1000000;
    const char* disk_dir = argc > 4 ? argv[4] : "/var/tmp";
    static const size_t ns_[] = {1000, 4000, 16000, 64000, 256000, 1000000};
    enum { NN = sizeof ns_ / sizeof ns_[0] };
    double miss[2][2][NN], hit[NN], meta[NN], own[NN], disk[2][NN];
    int part[2][2][NN];
    size_t j, nn = 0;
    int p, th;
    FILE* csv;
    double cos[5], co, cmin = 1e30, cmax = 0, thr, by0 = -1, by1 = -1;
    int partial0;
    size_t last = 0;
    for (j = 0; j < 5; j++) { /* five fresh contexts: where the scheduler puts the stream thread varies */
        cos[j] = copy_overhead();
        if (cos[j] < cmin) cmin = cos[j];
        if (cos[j] > cmax) cmax = cos[j];
    }
    co = bench_median(cos, 5);
    printf("tier_scale: 4 KiB tensors on sim, half of them fit on the device; ns per acquire + release, the\n"
           "copies run in the calling thread (sim.run_inline) and move no bytes (sim.move_bytes off), each pass\n"
           "ends when its copies have\n");
    printf("sim: one 4 KiB copy and its wait on the stream's thread cost %.1f us beyond the modelled link time\n"
           "(median of five medians of 201; %.1f .. %.1f)\n", co / 1e3, cmin / 1e3, cmax / 1e3);
    g_threaded = 1;
    thr = ns_[0] <= maxn ? run(ns_[0], 0, 1, 0, &partial0, NULL) : -1;
    g_threaded = 0;
    printf("with every copy on the sim's stream threads instead: LRU, %zu tensors, %.0f ns per pair\n", ns_[0], thr);
    for (j = 0; j < NN && ns_[j] <= maxn; j++) last = ns_[j];
    if (last) {
        g_bytes = 1;
        by0 = run(ns_[0], 0, 1, 0, &partial0, NULL);
        by1 = run(last, 0, 1, 0, &partial0, NULL);
        g_bytes = 0;
        printf("with the copies' bytes moved by the CPU: LRU, %zu tensors, %.0f ns per pair; %zu tensors, %.0f "
               "(%.2fx)\n", ns_[0], by0, last, by1, by0 > 0 ? by1 / by0 : -1);
    }
    printf("%10s %12s %12s %12s %12s %12s %14s %10s %10s %12s\n", "tensors", "LRU", "LRU 2 thr", "learned",
           "learned 2 thr", "hits only", "host B/tensor", "manager's", "LRU+disk", "learned+disk");
    csv = fopen(csv_path, "w");
    if (csv)
        fprintf(csv, "tensors,lru_ns,lru_2threads_ns,learned_ns,learned_2threads_ns,hits_ns,host_bytes_per_tensor,"
                     "partial,copy_overhead_ns,lru_threaded_sim_1000_ns,lru_bytes_moved_first_ns,"
                     "lru_bytes_moved_last_ns,manager_bytes_per_tensor,lru_disk_ns,learned_disk_ns\n");
    for (j = 0; j < NN && ns_[j] <= maxn; j++, nn++) {
        int partial = 0;
        char cell[4][32];
        for (p = 0; p < 2; p++)
            for (th = 1; th <= 2; th++) {
                miss[p][th - 1][j] = run(ns_[j], p, th, 0, &part[p][th - 1][j], NULL);
                partial |= part[p][th - 1][j];
            }
        hit[j] = run(ns_[j], 0, 1, 1, &p, &meta[j]);
        own[j] = meta[j];
        if (meta[j] >= 0) {
            double a = alloc_meta(ns_[j]);
            own[j] = a >= 0 ? meta[j] - a : -1;
        }
        g_disk = disk_dir; /* a disk tier beside: what its bookkeeping costs while nothing is written */
        for (p = 0; p < 2; p++) {
            int pd = 0;
            disk[p][j] = run(ns_[j], p, 1, 0, &pd, NULL);
            partial |= pd;
        }
        g_disk = NULL;
        for (p = 0; p < 4; p++) bench_cell(cell[p], sizeof cell[p], "%.0f", miss[p / 2][p % 2][j]);
        printf("%10zu %12s %12s %12s %12s %12.0f %14.0f %10.0f %10.0f %12.0f%s\n", ns_[j], cell[0], cell[1], cell[2],
               cell[3], hit[j], meta[j], own[j], disk[0][j], disk[1][j],
               partial ? "  (a pass stopped at the time limit)" : "");
        fflush(stdout);
        if (csv)
            fprintf(csv, "%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%.0f,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f,%.1f\n", ns_[j],
                    miss[0][0][j], miss[0][1][j], miss[1][0][j], miss[1][1][j], hit[j], meta[j], partial, co, thr, by0,
                    by1, own[j], disk[0][j], disk[1][j]);
    }
    if (csv) fclose(csv);
    {
        FILE* svg = plot_open(svg_path, 760, 420);
        if (svg && nn) {
            double xs[NN], ys[NN], ymax = 3, ymin = 1e9;
            const char* names[7] = {"LRU", "LRU, 2 threads", "learned", "learned, 2 threads", "hits only",
                                    "LRU, disk tier", "learned, disk tier"};
            const char* colors[7];
            plot pl;
            int s;
            for (j = 0; j < nn; j++)
                for (s = 0; s < 7; s++) {
                    double v = s < 4 ? miss[s / 2][s % 2][j] : s == 4 ? hit[j] : disk[s - 5][j];
                    if (v > 0 && log10(v) > ymax) ymax = log10(v);
                    if (v > 0 && log10(v) < ymin) ymin = log10(v);
                }
            pl = plot_panel(svg, 70, 40, 620, 320, 3, 6, floor(ymin), ceil(ymax),
                            "tiered manager: ns per acquire + release (log10) against tensors (log10)", "log10 tensors",
                            "log10 ns");
            for (s = 0; s < 7; s++) {
                size_t m = 0;
                for (j = 0; j < nn; j++) {
                    double v = s < 4 ? miss[s / 2][s % 2][j] : s == 4 ? hit[j] : disk[s - 5][j];
                    if (v <= 0) continue;
                    xs[m] = log10((double)ns_[j]);
                    ys[m++] = log10(v);
                }
                colors[s] = plot_colors[s];
                plot_line(&pl, xs, ys, (int)m, colors[s], 0);
            }
            plot_legend(&pl, names, colors, 7);
        }
        plot_close(svg);
    }
    printf("wrote %s and %s\n", csv_path, svg_path);
    /* the host tier full: each eviction gives up a host copy, most of them written to disk first, and each
       miss reads its tensor from disk (a disk-bound figure; what grows with the tensors is the choice) */
    printf("host tier full (device a tenth, host a quarter, the rest on disk in %s): ns per acquire + release\n",
           disk_dir);
    printf("%10s %12s %12s\n", "tensors", "LRU", "learned");
    g_disk = disk_dir;
    g_full = 1;
    for (j = 1; j < NN && ns_[j] <= maxn && ns_[j] <= 64000; j++) {
        int pf = 0, pg = 0;
        double l0 = run(ns_[j], 0, 1, 0, &pf, NULL), l1 = run(ns_[j], 1, 1, 0, &pg, NULL);
        printf("%10zu %12.0f %12.0f%s\n", ns_[j], l0, l1, pf || pg ? "  (a pass stopped at the time limit)" : "");
        fflush(stdout);
    }
    g_full = 0;
    g_disk = NULL;
    return 0;
}
