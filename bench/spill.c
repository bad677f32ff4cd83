/* bench/spill: training-like steps under device budgets from twice the
   working set down to a quarter of it, on the sim backend with a modelled
   link, each against the lower bound no eviction order can beat.

   Workloads (each use: acquire one tensor, a "kernel" of compute time
   proportional to its size on the stream, release, written or not):
     layers       16 layer tensors of 32 MiB, forward 0..15 then backward
                  15..0, every use written (5 ms of compute per use; a
                  tensor crosses the 8 GiB/s link in 3.9 ms)
     transformer  6 blocks, each with weights (24 MiB), activations kept
                  from the forward pass for the backward pass (32 MiB),
                  gradients (24 MiB) and optimizer moments (48 MiB):
                  forward W(read) A(write), backward in reverse A(read)
                  W(read) G(write), optimizer G(read) M(write) W(write)

   Modes:
     raw       every tensor from the raw backend (capacity = the budget)
     caching   every tensor from gm_alloc under the budget
     lru       tiered manager, host spill, least recently released first
     learned   tiered manager, host spill, learned order + prefetch ahead
     managed   tiered manager with no host tier and the unified-memory
               fallback: what does not fit the device lives in managed
               memory, on a device the size of the budget (on sim,
               the UVM driver's model: 2 MiB chunks migrated by prefetch,
               evicted least recently migrated first, faulted back in
               batches when they could not stay)
     lru+disk, learned+disk
               the two tier policies with a host tier of a quarter of the
               working set and the disk tier below it (spill file in DIR)

   The bound of a row is the largest of: the compute time; the bytes each
   way over the link over its rate, where the bytes are those Belady's
   order (evict the tensor used farthest ahead; a written one costs a copy
   out) moves in a steady-state step with the device budget; and for the
   disk rows, the bytes Belady's order moves to and from the disk with the
   device and host tiers together as the cache, over the disk's bandwidth
   measured the way the disk tier drives it (in DIR, O_DIRECT, 1 MiB
   chunks, 32 in flight through io_uring): writes alone, reads alone, and
   both at once, whichever bounds it most. The disk is measured at the
   start (the best of three passes, printed) and again just before and
   just after each disk row (one pass each): a shared machine's disk drifts
   by 2x and more within minutes, both ways, so that one measurement makes
   a row's ratio a lottery (the same build's row read 1.2x and 2.9x its
   bound on two runs). The table printed as the rows run uses the faster of
   the two passes beside each row; the final table and the CSV use the
   fastest of each kind the whole run saw, what the disk showed it can do.
   Belady's order is optimal
   for tensors of one size and a strong heuristic for mixed sizes.

   Per row: completes or not, step time (median of the measured steps), its
   ratio to the in-memory step and to the bound, bytes moved per step, the
   achieved link rate as a fraction of the modelled one, bytes through the
   disk per step, the mean I/O queue depth (of disk_depth 32, weighted by
   time) while the disk is busy and while chunks wait for a free slot (the
   disk-bound phases: "full" there is 32) with the share of busy time that
   is disk-bound, and the host
   time per step spent inside gm_tensor_acquire (blocked there, the thread
   cannot queue the next kernel), and for learned+disk the MiB of the device
   and host tiers its plan counts on once tuned (gm_tier_stats.
   plan_cache_bytes; the measured steps come after the tuning), and for
   the disk rows the read rate beside the row. Then the
   learned rows again at 25 and 50 GB/s (PCIe 4 and 5). Prints tables
   (then the disk rows against the run's fastest disk, and the tier rows'
   MiB a step over the link and through the disk beside Belady's order's);
   writes CSV at the end (with Belady's MiB a step, belady_link_mib_per_step
   and belady_disk_mib_per_step).

   usage: spill [CSV] [DIR] [ROWS] [DISK_MBS]   (default build/bench-spill.csv,
   /var/tmp; ROWS, e.g. "transformer learned+disk 2.0": only the rows whose
   workload, mode and ratio are those given, any left out matching all, ""
   all; DISK_MBS, e.g. 2000: a modelled disk, the spill file's I/O paced to
   that many MB/s (desc.sim.disk_bytes_per_s), which the bounds use instead
   of measuring the disk: rows that mostly repeat to within a few percent
   (an occasional run 10% slower while the machine is busy), where
   a shared machine's disk makes the same build's row differ by 1.5x from
   one run to the next; the model must be slower than the real disk).
   With SPILL_TIMELINE set in the environment, each tier row is preceded
   by its last step's timeline: the uses whose kernel found the stream
   idle for more than 0.5 ms, and how long (the host runs ahead of the
   stream, so its own timings do not say where the device waits). */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include "bench.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef GPUMEM_URING
#include <liburing.h>
#endif

#define MiB ((size_t)1 << 20)
/* steps: one to learn, one to settle, two measured; learned order with the disk tier tunes its plan's
   room over 12 more (three for each of four rooms: gpumem.h, >>tier: plan room), then one settles */
enum { STEPS = 4, TUNED_STEPS = 16, MAXT = 64, MAXU = 128, DEPTH = 32 };
static const double MS_PER_MIB = 5.0 / 32;               /* compute: 5 ms per 32 MiB touched */

typedef struct use { int t, write; } use;
typedef struct workload {
    const char* name;
    int n, nseq;
    size_t size[MAXT];
    use seq[MAXU];
    double ms[MAXU]; /* compute per use */
} workload;

static workload wl_layers(void) {
    workload w;
    int i;
    memset(&w, 0, sizeof w);
    w.name = "layers";
    w.n = 16;
    for (i = 0; i < 16; i++) w.size[i] = 32 * MiB;
    for (i = 0; i < 32; i++) {
        w.seq[i].t = i < 16 ? i : 31 - i;
        w.seq[i].write = 1;
    }
    w.nseq = 32;
    return w;
}

static void add(workload* w, int t, int write) {
    w->seq[w->nseq].t = t;
    w->seq[w->nseq].write = write;
    w->nseq++;
}

static workload wl_transformer(void) {
    enum { B = 6 };
    workload w;
    int b;
    memset(&w, 0, sizeof w);
    w.name = "transformer";
    w.n = 4 * B; /* W_b = 4b, A_b = 4b+1, G_b = 4b+2, M_b = 4b+3 */
    for (b = 0; b < B; b++) {
        w.size[4 * b] = 24 * MiB;
        w.size[4 * b + 1] = 32 * MiB;
        w.size[4 * b + 2] = 24 * MiB;
        w.size[4 * b + 3] = 48 * MiB;
    }
    for (b = 0; b < B; b++) add(&w, 4 * b, 0), add(&w, 4 * b + 1, 1);
    for (b = B - 1; b >= 0; b--) add(&w, 4 * b + 1, 0), add(&w, 4 * b, 0), add(&w, 4 * b + 2, 1);
    for (b = 0; b < B; b++) add(&w, 4 * b + 2, 0), add(&w, 4 * b + 3, 1), add(&w, 4 * b, 1);
    return w;
}

static void set_compute(workload* w) {
    int u;
    for (u = 0; u < w->nseq; u++) w->ms[u] = (double)(w->size[w->seq[u].t] / MiB) * MS_PER_MIB;
}

static size_t ws_of(const workload* w) {
    size_t s = 0;
    int i;
    for (i = 0; i < w->n; i++) s += w->size[i];
    return s;
}

static double compute_ms(const workload* w) {
    double s = 0;
    int u;
    for (u = 0; u < w->nseq; u++) s += w->ms[u];
    return s;
}

/* Belady's order over three repetitions of the step with `cap` bytes of
   cache; the traffic of the third (steady state): bytes brought in, and
   bytes of written tensors evicted. */
static void belady(const workload* w, size_t cap, double* in, double* out) {
    enum { WARM = 8, MEASURED = 8 }; /* the schedule repeats with a period of a few steps (two for the
                                        transformer at 2x): the mean over 8 steps after 8 to settle */
    int res[MAXT] = {0}, dirty[MAXT] = {0};
    size_t used = 0;
    int rep, u, i;
    *in = *out = 0;
    for (rep = 0; rep < WARM + MEASURED; rep++) {
        for (u = 0; u < w->nseq; u++) {
            int t = w->seq[u].t;
            if (!res[t]) {
                if (rep >= WARM) *in += (double)w->size[t] / MEASURED;
                while (used + w->size[t] > cap) {
                    int v = -1, k;
                    long best = -1;
                    for (i = 0; i < w->n; i++) {
                        long d = 1L << 30;
                        if (!res[i] || i == t) continue;
                        for (k = 1; k <= w->nseq; k++)
                            if (w->seq[(u + k) % w->nseq].t == i) {
                                d = k;
                                break;
                            }
                        if (d > best) best = d, v = i;
                    }
                    if (v < 0) break; /* t alone does not fit: counted as moved, nothing to evict */
                    if (dirty[v] && rep >= WARM) *out += (double)w->size[v] / MEASURED;
                    res[v] = dirty[v] = 0;
                    used -= w->size[v];
                }
                res[t] = 1;
                used += w->size[t];
            }
            if (w->seq[u].write) dirty[t] = 1;
        }
    }
}

/* The disk in dir, driven the way the disk tier drives it: a file
   reserved with fallocate, O_DIRECT, 1 MiB chunks, DEPTH of them in flight
   through io_uring (one at a time through pread/pwrite without it); the
   bandwidth of sequential writes, of sequential reads, and of both at once
   (reads of one half while the other half is written), in bytes per
   second, each the best of DISK_TRIES passes (one pass swung by 2x from
   one run to the next on a shared machine, and with it every disk row's
   bound); negative when it cannot be measured. */
#define DISK_FILE ((size_t)512 << 20)
#define DISK_TRIES 3
static double disk_pass(int fd, char* buf, size_t from, size_t to, size_t rfrom, size_t rto) {
    size_t wat = from, rat = rfrom, done = 0, total = (to - from) + (rto - rfrom);
    double t0 = bench_now_ns();
#ifdef GPUMEM_URING
    struct io_uring ring;
    int inflight = 0, turn = 0;
    if (io_uring_queue_init(2 * DEPTH, &ring, 0) != 0) return -1;
    while (done < total) {
        while (inflight < DEPTH && (wat < to || rat < rto)) {
            struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
            int write = wat < to && (rat >= rto || (turn++ & 1));
            char* b = buf + (size_t)(inflight % DEPTH) * MiB; /* the contents do not matter */
            if (!sqe) break;
            if (write) io_uring_prep_write(sqe, fd, b, (unsigned)MiB, (uint64_t)wat), wat += MiB;
            else io_uring_prep_read(sqe, fd, b, (unsigned)MiB, (uint64_t)rat), rat += MiB;
            inflight++;
        }
        io_uring_submit(&ring);
        {
            struct io_uring_cqe* cqe;
            if (io_uring_wait_cqe(&ring, &cqe) != 0 || cqe->res != (int)MiB) {
                io_uring_queue_exit(&ring);
                return -1;
            }
            io_uring_cqe_seen(&ring, cqe);
            inflight--;
            done += MiB;
        }
    }
    io_uring_queue_exit(&ring);
#else
    for (; wat < to || rat < rto; done += MiB) {
        int write = wat < to;
        if ((write ? pwrite(fd, buf, MiB, (off_t)wat) : pread(fd, buf, MiB, (off_t)rat)) != (ssize_t)MiB) return -1;
        *(write ? &wat : &rat) += MiB;
    }
#endif
    return (double)total / ((bench_now_ns() - t0) / 1e9);
}

/* The measuring file (DISK_FILE bytes, kept beside the spill file for the
   whole run), made and written once (as the tier reuses its extents), and
   its buffer: a measurement beside a row then costs its passes alone. */
static int g_dfd = -1;
static char* g_dbuf;

static void disk_open(const char* dir) {
    void* buf = NULL;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) fd = open(dir, O_TMPFILE | O_RDWR, 0600); /* no O_DIRECT here: as gpumem does */
    if (fd < 0 || posix_memalign(&buf, 4096, DEPTH * MiB) != 0 || fallocate(fd, 0, 0, (off_t)DISK_FILE) != 0) {
        if (fd >= 0) close(fd);
        free(buf);
        return;
    }
    memset(buf, 0x5a, DEPTH * MiB);
    (void)disk_pass(fd, (char*)buf, 0, DISK_FILE, 0, 0); /* the extents written once */
    g_dfd = fd;
    g_dbuf = (char*)buf;
}

/* The disk's rates, the best of `tries` passes of each kind: bw[0] writes,
   bw[1] reads, bw[2] both at once (-1 each when it cannot be measured). */
static double g_model; /* the modelled disk's bytes per second (desc.sim.disk_bytes_per_s), 0: none */
static void disk_bw(int tries, double bw[3]) {
    int k, i;
    bw[0] = bw[1] = bw[2] = g_model > 0 ? g_model : -1;
    if (g_model > 0) return; /* the model's rate, both ways and together: nothing to measure */
    for (k = 0; k < tries && g_dfd >= 0; k++) {
        double p[3];
        p[0] = disk_pass(g_dfd, g_dbuf, 0, DISK_FILE, 0, 0);
        p[1] = disk_pass(g_dfd, g_dbuf, 0, 0, 0, DISK_FILE);
        p[2] = disk_pass(g_dfd, g_dbuf, DISK_FILE / 2, DISK_FILE, 0, DISK_FILE / 2);
        if (p[0] < 0 || p[1] < 0 || p[2] < 0) {
            bw[0] = bw[1] = bw[2] = -1;
            break;
        }
        for (i = 0; i < 3; i++)
            if (p[i] > bw[i]) bw[i] = p[i];
    }
}

static double g_link;        /* bytes per second, each way */
static const char* disk_dir; /* set: the tier runs get a small host tier and the disk */
static double g_disk[3] = {-1, -1, -1}; /* at the start of the run */
/* The disk's rates (write, read, both at once), bytes per second. The disk
   of a shared machine drifts by 2x and more within minutes, both ways, so
   no single measurement bounds a row: the disk is measured at the start,
   then again just before and just after every disk row (one pass of each
   kind each time), and the bounds in the CSV and the final table use the
   fastest of each kind the run saw (g_best): what the disk showed it can
   do. The table printed as the rows run uses each row's own (the faster of
   the two beside it), which swings with the drift. */
static double g_best[3] = {-1, -1, -1};

typedef struct result {
    int ok;
    double step_ms, moved_mib, rate, disk_mib, depth, full, bound_share, acq_ms;
    double plan_mib; /* learned order with the disk tier: the fast tiers' MiB its plan counts on */
    char why[64];
} result;

/* SPILL_TIMELINE set: each use's kernel start and end on the stream, by
   use (arg points into the running workload's ms[], g_ms0), and after each
   tier row the last step's uses that waited, so that where the device
   stalls can be seen (the host runs ahead of the stream: its own timings
   say little). */
static const double* g_ms0;
static double g_kstart[MAXU], g_kend[MAXU];
static int g_timeline;

static void compute(void* arg) {
    double ms = *(const double*)arg;
    struct timespec ts;
    long u = g_ms0 ? (long)((const double*)arg - g_ms0) : -1;
    if (g_timeline && u >= 0 && u < MAXU) g_kstart[u] = bench_now_ns();
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    nanosleep(&ts, NULL);
    if (g_timeline && u >= 0 && u < MAXU) g_kend[u] = bench_now_ns();
}

/* The uses of the step that began at t0 whose kernel waited more than
   0.5 ms after the one before it (the first: after the step began). */
static void timeline(const workload* w, double t0, double step_ms) {
    double prev = t0, sum = 0;
    int u;
    printf("  the row below, its last step (%.1f ms): use, tensor, the stream idle before its kernel, its start\n", step_ms);
    for (u = 0; u < w->nseq; u++) {
        double idle = (g_kstart[u] - prev) / 1e6;
        if (idle > 0.5) printf("    use %2d tensor %2d: %6.1f ms idle, starts at %6.1f ms\n", u, w->seq[u].t, idle,
                               (g_kstart[u] - t0) / 1e6);
        if (idle > 0) sum += idle;
        prev = g_kend[u];
    }
    printf("    idle in all: %.1f ms\n", sum);
}

static gm_context* make_ctx(const workload* w, size_t budget, int managed, int cap_device) {
    gm_context* ctx = NULL;
    gm_desc d;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.device_budget = budget;
    /* unified memory: no room below the device (a host tier smaller than any tensor), as in the demo */
    d.host_budget = managed ? 4096 : disk_dir ? ws_of(w) / 4 : ws_of(w) + 256 * MiB;
    d.disk_dir = disk_dir;
    d.disk_depth = DEPTH;
    d.fallback = managed ? GM_FALLBACK_MANAGED : GM_FALLBACK_FAIL;
    d.sim.capacity = cap_device ? budget : (size_t)64 << 30;
    d.sim.link_bytes_per_s = g_link;
    d.sim.disk_bytes_per_s = g_model;
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
static result run_flat(workload* w, size_t budget, int raw) {
    result r;
    gm_context* ctx = make_ctx(w, budget, 0, raw);
    void* p[MAXT];
    double times[STEPS];
    int i, k, n = 0;
    memset(&r, 0, sizeof r);
    if (!ctx) return r;
    for (i = 0; i < w->n; i++) {
        gm_result e = raw ? gm_raw_alloc(ctx, &p[i], w->size[i]) : gm_alloc(ctx, &p[i], w->size[i], NULL);
        if (e != GM_OK) {
            snprintf(r.why, sizeof r.why, "OOM at tensor %d of %d", i + 1, w->n);
            break;
        }
        n++;
    }
    if (n == w->n) {
        for (k = 0; k < STEPS; k++) {
            double t0 = bench_now_ns();
            for (i = 0; i < w->nseq; i++) gm_launch_host(ctx, NULL, compute, &w->ms[i]);
            gm_stream_synchronize(ctx, NULL);
            times[k] = (bench_now_ns() - t0) / 1e6;
        }
        r.ok = 1;
        r.step_ms = bench_median(times + 2, STEPS - 2);
    }
    for (i = 0; i < n; i++) {
        if (raw) gm_raw_free(ctx, p[i], w->size[i]);
        else gm_free(ctx, p[i]);
    }
    gm_shutdown(ctx);
    return r;
}

static result run_tier(workload* w, size_t budget, gm_evict_policy policy, int ahead, int managed) {
    result r;
    gm_context* ctx = make_ctx(w, budget, managed, managed); /* unified memory: the device is the budget */
    gm_tensor t[MAXT];
    gm_stream s;
    double times[TUNED_STEPS], moved0 = 0, busy0 = 0, moved1, busy1, disk0 = 0, ios0 = 0, depth0 = 0, acq0 = 0, bl0 = 0,
                               bld0 = 0;
    gm_tier_stats ts;
    int i, k, n = 0, steps = policy == GM_EVICT_LEARNED && disk_dir ? TUNED_STEPS : STEPS;
    memset(&r, 0, sizeof r);
    if (!ctx) return r;
    g_ms0 = w->ms;
    gm_stream_create(ctx, &s);
    gm_tier_set_policy(ctx, policy, ahead, NULL, NULL);
    for (i = 0; i < w->n; i++) {
        if (gm_tensor_create(ctx, &t[i], w->size[i]) != GM_OK) {
            snprintf(r.why, sizeof r.why, "OOM at tensor %d of %d", i + 1, w->n);
            break;
        }
        n++;
    }
    for (k = 0; k < steps && n == w->n; k++) {
        double t0;
        int failed = 0;
        if (k == steps - 2) {
            moved0 = link_moved(ctx, &busy0);
            gm_tier_get_stats(ctx, &ts);
            disk0 = (double)(ts.bytes_to_disk + ts.bytes_from_disk);
            ios0 = (double)ts.disk_busy_ns;
            depth0 = (double)ts.disk_depth_ns;
            bl0 = (double)ts.disk_backlog_ns;
            bld0 = (double)ts.disk_backlog_depth_ns;
            acq0 = (double)ts.acquire_ns;
        }
        t0 = bench_now_ns();
        for (i = 0; i < w->nseq && !failed; i++) {
            int j = w->seq[i].t;
            void* p;
            if (gm_tensor_acquire(ctx, t[j], s, &p) != GM_OK) {
                snprintf(r.why, sizeof r.why, "acquire failed");
                failed = 1;
                break;
            }
            gm_launch_host(ctx, s, compute, &w->ms[i]);
            gm_tensor_release(ctx, t[j], s, w->seq[i].write);
        }
        gm_stream_synchronize(ctx, s);
        times[k] = (bench_now_ns() - t0) / 1e6;
        gm_tier_step(ctx);
        if (failed) n = 0;
        if (g_timeline && n == w->n && k == steps - 1) timeline(w, t0, times[k]);
    }
    g_ms0 = NULL;
    if (n == w->n) {
        gm_device_synchronize(ctx);
        moved1 = link_moved(ctx, &busy1);
        r.ok = 1;
        r.step_ms = bench_median(times + steps - 2, 2);
        r.moved_mib = (moved1 - moved0) / 2 / (double)MiB;
        r.rate = busy1 > busy0 ? (moved1 - moved0) / (busy1 - busy0) / g_link : 0;
        gm_tier_get_stats(ctx, &ts);
        r.disk_mib = ((double)(ts.bytes_to_disk + ts.bytes_from_disk) - disk0) / 2 / (double)MiB;
        r.acq_ms = ((double)ts.acquire_ns - acq0) / 2 / 1e6;
        r.plan_mib = (double)ts.plan_cache_bytes / (double)MiB;
        r.depth = (double)ts.disk_busy_ns > ios0 ? ((double)ts.disk_depth_ns - depth0) / ((double)ts.disk_busy_ns - ios0) : -1;
        r.full = (double)ts.disk_backlog_ns > bl0 ? ((double)ts.disk_backlog_depth_ns - bld0) / ((double)ts.disk_backlog_ns - bl0) : -1;
        r.bound_share = (double)ts.disk_busy_ns > ios0 ? ((double)ts.disk_backlog_ns - bl0) / ((double)ts.disk_busy_ns - ios0) : -1;
    }
    for (i = 0; i < w->n && i < n; i++) gm_tensor_destroy(ctx, t[i]);
    gm_stream_destroy(ctx, s);
    gm_shutdown(ctx);
    return r;
}

/* The row's lower bound in ms over a link of `link` bytes per second and
   with the disk's rates `bw` (write, read, both; negative: no disk figure
   for a disk row). */
static double bound_ms(const workload* w, size_t budget, double link, int disk, const double bw[3]) {
    double in, out, b = compute_ms(w), l;
    belady(w, budget, &in, &out);
    l = (in > out ? in : out) / link * 1e3;
    if (l > b) b = l;
    if (disk) {
        double d;
        double m;
        if (bw[0] <= 0 || bw[1] <= 0 || bw[2] <= 0) return -1;
        belady(w, budget + ws_of(w) / 4, &in, &out);
        d = out / bw[0] * 1e3; /* each way alone, and both at once */
        if (in / bw[1] * 1e3 > d) d = in / bw[1] * 1e3;
        m = (in + out) / bw[2] * 1e3;
        if (m > d) d = m;
        if (d > b) b = d;
    }
    return b;
}

/* Belady's traffic in MiB a step (both ways) for a row: over the link with
   the device budget, or through the disk with the device and host tiers. */
static double belady_mib(const workload* w, size_t budget, int disk) {
    double in, out;
    belady(w, disk ? budget + ws_of(w) / 4 : budget, &in, &out);
    return (in + out) / (double)MiB;
}

static const char* names[] = {"raw", "caching", "lru", "learned", "managed", "lru+disk", "learned+disk"};

static const char* g_rows; /* "workload mode ratio" filter, or NULL */

static int wanted(const workload* w, int m, double ratio) {
    char a[64], b[64];
    double q = 0;
    int n;
    if (!g_rows) return 1;
    n = sscanf(g_rows, "%63s %63s %lf", a, b, &q);
    return (n < 1 || !strcmp(a, w->name)) && (n < 2 || !strcmp(b, names[m])) && (n < 3 || (q > ratio - 1e-9 && q < ratio + 1e-9));
}

/* A row run: kept for the CSV and the final table, whose disk bounds wait
   for the run's fastest disk. */
typedef struct rowrec {
    const workload* w;
    double link, ratio;
    int m;
    size_t budget;
    result r;
    double beside[3]; /* the disk beside the row: the faster of the passes before and after it */
} rowrec;
#define MAXROWS 128
static rowrec g_recs[MAXROWS];
static int g_nrec;

static void best_of(const double bw[3]) {
    int k;
    for (k = 0; k < 3; k++)
        if (bw[k] > g_best[k]) g_best[k] = bw[k];
}

static void row(workload* w, int m, double ratio, const char* dir) {
    size_t budget = (size_t)((double)ws_of(w) / ratio) / MiB * MiB;
    double in_memory = compute_ms(w), bound;
    char c1[32], c2[32], c3[32], c4[32], c5[32], c6[32], c7[32], f1[32];
    result r;
    double bw[3] = {-1, -1, -1}, aw[3] = {-1, -1, -1};
    int k;
    if (!wanted(w, m, ratio)) return;
    disk_dir = m >= 5 ? dir : NULL;
    if (disk_dir) disk_bw(1, bw);
    if (m < 2) r = run_flat(w, budget, m == 0);
    else if (m == 2 || m == 5) r = run_tier(w, budget, GM_EVICT_LRU, 0, 0);
    else if (m == 3 || m == 6) r = run_tier(w, budget, GM_EVICT_LEARNED, 3, 0);
    else r = run_tier(w, budget, GM_EVICT_LRU, 0, 1);
    if (disk_dir) disk_bw(1, aw);
    for (k = 0; k < 3; k++) /* either pass failing leaves no figure */
        if (bw[k] <= 0 || aw[k] <= 0) bw[k] = -1;
        else if (aw[k] > bw[k]) bw[k] = aw[k];
    best_of(bw);
    bound = bound_ms(w, budget, g_link, m >= 5, bw);
    if (r.ok)
        printf("%-12s %6.1f | %-22s %9.1f %8.2f %9s %8s %9.0f %6.0f%% %9.0f %6s %6s %6s %7s %5s %6s\n", names[m], ratio, "completes",
               r.step_ms, r.step_ms / in_memory, bench_cell(c1, sizeof c1, "%.1f", bound),
               bench_cell(c2, sizeof c2, "%.2f", bound > 0 ? r.step_ms / bound : -1), r.moved_mib, 100 * r.rate,
               r.disk_mib, bench_cell(c3, sizeof c3, "%.1f", m >= 5 ? r.depth : -1),
               bench_cell(c5, sizeof c5, "%.1f", m >= 5 ? r.full : -1),
               bench_cell(c6, sizeof c6, "%.0f%%", m >= 5 && r.bound_share >= 0 ? 100 * r.bound_share : -1),
               bench_cell(c4, sizeof c4, "%.1f", m >= 2 ? r.acq_ms : -1),
               bench_cell(f1, sizeof f1, "%.0f", m == 6 && r.plan_mib > 0 ? r.plan_mib : -1),
               bench_cell(c7, sizeof c7, "%.0f", bw[1] > 0 && m >= 5 ? bw[1] / 1e6 : -1));
    else
        printf("%-12s %6.1f | %-22s %9s %8s %9s %8s %9s %7s %9s %6s %6s %6s %7s %5s %6s\n", names[m], ratio,
               r.why[0] ? r.why : "failed", "-", "-", bench_cell(c1, sizeof c1, "%.1f", bound), "-", "-", "-", "-", "-", "-",
               "-", "-", "-", bench_cell(c7, sizeof c7, "%.0f", bw[1] > 0 && m >= 5 ? bw[1] / 1e6 : -1));
    fflush(stdout);
    if (g_nrec < MAXROWS) {
        rowrec* rr = &g_recs[g_nrec++];
        rr->w = w, rr->link = g_link, rr->ratio = ratio, rr->m = m, rr->budget = budget, rr->r = r;
        for (k = 0; k < 3; k++) rr->beside[k] = m >= 5 ? bw[k] : -1;
    }
}

/* Every row into the CSV, the disk rows' bounds with the run's fastest disk. */
static void write_csv(FILE* csv) {
    int i, k;
    fprintf(csv, "workload,link_gbs,mode,ratio,completed,step_ms,over_in_memory,bound_ms,over_bound,"
                 "moved_mib_per_step,link_fraction,disk_mib_per_step,queue_depth,queue_depth_disk_bound,disk_bound_share,"
                 "acquire_ms_per_step,plan_cache_mib,disk_write_mbs,disk_read_mbs,disk_both_mbs,bound_beside_ms,"
                 "beside_read_mbs,belady_link_mib_per_step,belady_disk_mib_per_step\n");
    for (i = 0; i < g_nrec; i++) {
        const rowrec* rr = &g_recs[i];
        const workload* w = rr->w;
        result r = rr->r;
        int m = rr->m;
        double in_memory = compute_ms(w), bound, beside;
        char c1[32], c3[32], c4[32], c5[32], c6[32], f1[32], f2[32], d[3][32], b1[32], b2[32], l1[32], l2[32];
        bound = bound_ms(w, rr->budget, rr->link, m >= 5, g_best);
        beside = m >= 5 ? bound_ms(w, rr->budget, rr->link, 1, rr->beside) : -1;
        for (k = 0; k < 3; k++) bench_field(d[k], sizeof d[k], "%.0f", m >= 5 && g_best[k] > 0 ? g_best[k] / 1e6 : -1);
        bench_field(b1, sizeof b1, "%.2f", beside);
        bench_field(b2, sizeof b2, "%.0f", m >= 5 && rr->beside[1] > 0 ? rr->beside[1] / 1e6 : -1);
        bench_field(l1, sizeof l1, "%.1f", m >= 2 && m != 4 ? belady_mib(w, rr->budget, 0) : -1);
        bench_field(l2, sizeof l2, "%.1f", m >= 5 ? belady_mib(w, rr->budget, 1) : -1);
        fprintf(csv, "%s,%.1f,%s,%.2f,%d,%.2f,%.3f,%s,%s,%.1f,%.3f,%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", w->name, rr->link / 1e9,
                names[m], rr->ratio,
                r.ok, r.step_ms, r.step_ms / in_memory, bench_field(f1, sizeof f1, "%.2f", bound),
                bench_field(f2, sizeof f2, "%.3f", r.ok && bound > 0 ? r.step_ms / bound : -1), r.moved_mib, r.rate,
                r.disk_mib, bench_field(c3, sizeof c3, "%.2f", r.ok && m >= 5 ? r.depth : -1),
                bench_field(c5, sizeof c5, "%.2f", r.ok && m >= 5 ? r.full : -1),
                bench_field(c6, sizeof c6, "%.3f", r.ok && m >= 5 ? r.bound_share : -1),
                bench_field(c4, sizeof c4, "%.2f", r.ok && m >= 2 ? r.acq_ms : -1),
                bench_field(c1, sizeof c1, "%.0f", r.ok && m == 6 && r.plan_mib > 0 ? r.plan_mib : -1), d[0], d[1], d[2],
                b1, b2, l1, l2);
    }
}

/* The disk rows again, against the run's fastest disk. */
static void final_table(void) {
    int i, any = 0;
    for (i = 0; i < g_nrec; i++) {
        const rowrec* rr = &g_recs[i];
        double bound;
        char c1[32], c2[32], c3[32];
        if (rr->m < 5) continue;
        if (!any++)
            printf("\ndisk rows against the fastest disk of the run (write %s, read %s, both at once %s MB/s):\n"
                   "%-12s %5s %6s %-12s | %9s %9s %8s\n",
                   bench_cell(c1, sizeof c1, "%.0f", g_best[0] > 0 ? g_best[0] / 1e6 : -1),
                   bench_cell(c2, sizeof c2, "%.0f", g_best[1] > 0 ? g_best[1] / 1e6 : -1),
                   bench_cell(c3, sizeof c3, "%.0f", g_best[2] > 0 ? g_best[2] / 1e6 : -1), "workload", "link", "ratio",
                   "mode", "step ms", "bound ms", "x bound");
        bound = bound_ms(rr->w, rr->budget, rr->link, 1, g_best);
        printf("%-12s %5.1f %6.1f %-12s | %9s %9s %8s\n", rr->w->name, rr->link / 1e9, rr->ratio, names[rr->m],
               bench_cell(c1, sizeof c1, "%.1f", rr->r.ok ? rr->r.step_ms : -1), bench_cell(c2, sizeof c2, "%.1f", bound),
               bench_cell(c3, sizeof c3, "%.2f", rr->r.ok && bound > 0 ? rr->r.step_ms / bound : -1));
    }
}

/* The tier rows' traffic against Belady's (the least any order moves). */
static void traffic_table(void) {
    int i, any = 0;
    for (i = 0; i < g_nrec; i++) {
        const rowrec* rr = &g_recs[i];
        char c1[32], c2[32];
        if (rr->m < 2 || rr->m == 4 || !rr->r.ok) continue;
        if (!any++)
            printf("\nMiB a step, both ways, against Belady's order (link: the device budget as the cache; disk: the "
                   "device and host tiers):\n%-12s %5s %6s %-12s | %9s %9s %9s %9s\n",
                   "workload", "link", "ratio", "mode", "link", "Belady", "disk", "Belady");
        printf("%-12s %5.1f %6.1f %-12s | %9.0f %9.0f %9s %9s\n", rr->w->name, rr->link / 1e9, rr->ratio, names[rr->m],
               rr->r.moved_mib, belady_mib(rr->w, rr->budget, 0),
               bench_cell(c1, sizeof c1, "%.0f", rr->m >= 5 ? rr->r.disk_mib : -1),
               bench_cell(c2, sizeof c2, "%.0f", rr->m >= 5 ? belady_mib(rr->w, rr->budget, 1) : -1));
    }
}

static void header(const workload* w) {
    printf("\n%s: %d tensors, working set %zu MiB, %d uses, in-memory step %.0f ms of compute; link %.1f GB/s each way\n",
           w->name, w->n, ws_of(w) / MiB, w->nseq, compute_ms(w), g_link / 1e9);
    printf("%-12s %6s | %-22s %9s %8s %9s %8s %9s %7s %9s %6s %6s %6s %7s %5s %6s\n", "mode", "ratio", "result", "step ms", "x memory",
           "bound ms", "x bound", "MiB/step", "link", "disk MiB", "depth", "full", "bound", "acq ms", "plan", "read");
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-spill [CSV] [DIR] [ROWS] [DISK_MBS]", NULL);
    if (args_rc >= 0) return args_rc;
    static const double ratios[] = {0.5, 1.0, 1.5, 2.0, 3.0, 4.0};
    static const double links[] = {25e9, 50e9};
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-spill.csv";
    const char* dir = argc > 2 ? argv[2] : "/var/tmp";
    FILE* csv;
    workload wls[2];
    size_t ri, li;
    int m, k;
    char c1[32], c2[32], c3[32];
    g_rows = argc > 3 && argv[3][0] ? argv[3] : NULL;
    g_model = argc > 4 ? atof(argv[4]) * 1e6 : 0;
    g_timeline = getenv("SPILL_TIMELINE") != NULL;
    if (argc > 4 && g_model < 1024) {
        fprintf(stderr, "spill: DISK_MBS is a rate in MB/s, as 2000\n");
        return 2;
    }
    csv = fopen(csv_path, "w");
    wls[0] = wl_layers();
    wls[1] = wl_transformer();
    for (k = 0; k < 2; k++) set_compute(&wls[k]);
    disk_open(dir);
    disk_bw(DISK_TRIES, g_disk);
    best_of(g_disk);
    printf("sim backend; compute %.2f ms per MiB a use touches; disk tier rows: host tier a quarter of the working set, "
           "spill file in %s, I/O depth %d\n",
           MS_PER_MIB, dir, DEPTH);
    if (g_model > 0)
        printf("disk modelled (desc.sim.disk_bytes_per_s): the spill file's I/O in %s paced to %.0f MB/s, reads and "
               "writes together; the bounds use that rate\n", dir, g_model / 1e6);
    else printf("disk measured in %s (O_DIRECT, 1 MiB chunks, %s; best of %d passes): write %s MB/s, read %s MB/s, both at "
           "once %s MB/s\n",
           dir,
#ifdef GPUMEM_URING
           "32 in flight through io_uring",
#else
           "one at a time: built without liburing",
#endif
           DISK_TRIES, bench_cell(c1, sizeof c1, "%.0f", g_disk[0] > 0 ? g_disk[0] / 1e6 : -1),
           bench_cell(c2, sizeof c2, "%.0f", g_disk[1] > 0 ? g_disk[1] / 1e6 : -1),
           bench_cell(c3, sizeof c3, "%.0f", g_disk[2] > 0 ? g_disk[2] / 1e6 : -1));
    printf("bound: the largest of compute, Belady's link traffic each way over the link, and (disk rows) Belady's disk "
           "traffic over the disk: below as the rows run, the disk measured again just before and just after the row "
           "(one pass of each kind each time, the faster of the two; read: its read MB/s); at the end, and in the CSV, "
           "the fastest disk of the whole run\n");
    g_link = 8.0 * (1 << 30);
    for (k = 0; k < 2; k++) {
        header(&wls[k]);
        for (m = 0; m < 7; m++)
            for (ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++) row(&wls[k], m, ratios[ri], dir);
    }
    for (li = 0; li < sizeof links / sizeof links[0]; li++) {
        g_link = links[li];
        for (k = 0; k < 2; k++) {
            header(&wls[k]);
            for (m = 3; m < 7; m += 3) row(&wls[k], m, 2.0, dir);
        }
    }
    final_table();
    traffic_table();
    if (g_dfd >= 0) close(g_dfd);
    free(g_dbuf);
    if (csv) {
        write_csv(csv);
        fclose(csv);
        printf("\nwrote %s\n", csv_path);
    }
    return 0;
}
