/* bench/alloc: the cost of a cached gm_alloc + gm_free pair on one thread
   and on two threads sharing a context, against the backend's own
   allocation (sim: mmap/munmap; CUDA: cudaMalloc/cudaFree and
   cudaMallocAsync/cudaFreeAsync from a pool that never releases), and
   against glibc malloc/free and jemalloc's (the program runs itself again
   under LD_PRELOAD for that column) for the same sizes; then the cost of a
   miss that creates a segment. Median over batches, nanoseconds per pair.
   The ratio to jemalloc comes from that second process, which times
   jemalloc's pairs and gpumem's (a sim context: a cached pair makes no
   backend call) in alternating batches: on a machine whose speed drifts,
   as a shared virtual machine's does, two columns timed seconds apart can
   differ by half for no reason of theirs.
   Last, three lines: gm_empty_cache's cost per segment given back,
   with expandable segments (sim) the cost of an allocation or free of
   blocks of a few MiB and of blocks of up to 5 GiB (2,560 pages), and
   blocks freed on other threads than the allocating one (a cached pair
   before and after the first, and blocks handed from one thread to
   another).
   Prints a table; writes CSV to the path given as the first argument
   (default build/bench-alloc.csv). */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

#define BATCHES 31

#define now_ns bench_now_ns
#define median bench_median

typedef int (*pair_fn)(void* env, size_t size, int reps);

static double measure(pair_fn fn, void* env, size_t size, int reps) {
    double t[BATCHES];
    int b;
    if (fn(env, size, reps)) return -1; /* warm: the cache holds the block */
    for (b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        if (fn(env, size, reps)) return -1;
        t[b] = (now_ns() - t0) / reps;
    }
    return median(t, BATCHES);
}

static int pair_gm(void* env, size_t size, int reps) {
    gm_context* ctx = (gm_context*)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (gm_alloc(ctx, &p, size, NULL) != GM_OK) return 1;
        if (gm_free(ctx, p) != GM_OK) return 1;
    }
    return 0;
}

static int pair_raw(void* env, size_t size, int reps) {
    gm_context* ctx = (gm_context*)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (gm_raw_alloc(ctx, &p, size) != GM_OK) return 1;
        if (gm_raw_free(ctx, p, size) != GM_OK) return 1;
    }
    return 0;
}

static int pair_malloc(void* env, size_t size, int reps) {
    int i;
    (void)env;
    for (i = 0; i < reps; i++) {
        void* volatile p = malloc(size);
        if (!p) return 1;
        free(p);
    }
    return 0;
}

#ifdef GPUMEM_CUDA
static int pair_cuda_async(void* env, size_t size, int reps) {
    cudaStream_t s = (cudaStream_t)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (cudaMallocAsync(&p, size, s) != cudaSuccess) return 1;
        if (cudaFreeAsync(p, s) != cudaSuccess) return 1;
    }
    return cudaStreamSynchronize(s) != cudaSuccess;
}
#endif

static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 8 << 20, 64 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Two pairs' medians from alternating batches: out[0] fn0's, out[1] fn1's. */
static void measure_beside(pair_fn fn0, void* env0, pair_fn fn1, void* env1, size_t size, int reps, double out[2]) {
    double t[2][BATCHES];
    int b, k;
    out[0] = out[1] = -1;
    if (fn0(env0, size, reps) || fn1(env1, size, reps)) return;
    for (b = 0; b < BATCHES; b++)
        for (k = 0; k < 2; k++) {
            double t0 = now_ns();
            if ((k ? fn1(env1, size, reps) : fn0(env0, size, reps)) != 0) return;
            t[k][b] = (now_ns() - t0) / reps;
        }
    out[0] = median(t[0], BATCHES);
    out[1] = median(t[1], BATCHES);
}

/* Two threads on one context, each timing its own pairs; the slower one's
   median. Batches alternate: thread 0 alone, thread 1 alone, then both
   together, so that each thread's figure together has its own figure alone
   beside it, on the same CPU and in the same state of the machine (the
   CPUs of a virtual machine can differ in speed, and drift). *ratio: the
   larger of the two threads' together / alone. */
typedef struct two_arg {
    gm_context* ctx;
    size_t size;
    int* go; /* a barrier that spins: a sleeping thread's CPU wakes slowly on a virtual machine */
    int idx, err;
    double solo[BATCHES], both[BATCHES];
} two_arg;
static void spin_barrier(int* go, int* phase) { /* two threads; *phase counts this thread's crossings */
    int target = 2 * ++*phase;
    __atomic_add_fetch(go, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(go, __ATOMIC_ACQUIRE) < target) {}
}
static void two_batch(two_arg* t, double* out) {
    double t0 = now_ns();
    if (!t->err) t->err = pair_gm(t->ctx, t->size, 10000);
    *out = (now_ns() - t0) / 10000;
}
static void* two_worker(void* a) {
    two_arg* t = (two_arg*)a;
    int b, k, phase = 0;
    t->err = pair_gm(t->ctx, t->size, 100); /* warm: this thread's cache holds the block */
    for (b = 0; b < BATCHES; b++) { /* every barrier is met, error or not */
        for (k = 0; k < 2; k++) {
            spin_barrier(t->go, &phase);
            if (t->idx == k) two_batch(t, &t->solo[b]);
        }
        spin_barrier(t->go, &phase);
        two_batch(t, &t->both[b]);
    }
    return NULL;
}
static double measure_two(gm_context* ctx, size_t size, double* ratio) {
    pthread_t th[2];
    int go = 0;
    two_arg a[2];
    double m[2], r = 0;
    int i;
    for (i = 0; i < 2; i++) {
        a[i].ctx = ctx;
        a[i].size = size;
        a[i].go = &go;
        a[i].idx = i;
        pthread_create(&th[i], NULL, two_worker, &a[i]);
    }
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    if (ratio) *ratio = -1;
    if (a[0].err || a[1].err) return -1;
    for (i = 0; i < 2; i++) {
        double one = median(a[i].solo, BATCHES);
        m[i] = median(a[i].both, BATCHES);
        if (m[i] / one > r) r = m[i] / one;
    }
    if (ratio) *ratio = r;
    return m[0] > m[1] ? m[0] : m[1];
}

/* A miss: gm_alloc that has to create a segment (the cache is emptied
   before each, untimed). */
static double measure_miss(gm_context* ctx, size_t size) {
    double t[BATCHES];
    int b;
    for (b = 0; b < BATCHES; b++) {
        void* p;
        double t0;
        gm_empty_cache(ctx);
        t0 = now_ns();
        if (gm_alloc(ctx, &p, size, NULL) != GM_OK) return -1;
        t[b] = now_ns() - t0;
        gm_free(ctx, p);
    }
    return median(t, BATCHES);
}

/* gm_empty_cache giving back n cached segments of the small pool (each
   2 MiB, freed in turn): its cost per segment, in microseconds, which
   should not grow with n. The segments are made on a context of the same
   backend as `like`. */
static double measure_release(const gm_context* like, int n) {
    gm_desc d = gm_query_desc(like);
    gm_context* ctx;
    void** p = (void**)malloc(sizeof *p * 2 * (size_t)n);
    double t0, t = -1;
    int i, made = 0;
    d.device_budget = (size_t)n * (4u << 20);
    d.device_budget_fraction = 0;
    d.thread_cache = GM_TOGGLE_OFF;
    d.sim.capacity = (size_t)64 << 30;
    d.log_fn = NULL;
    if (!p || gm_setup(&ctx, &d) != GM_OK) {
        free(p);
        return -1;
    }
    for (i = 0; i < 2 * n && gm_alloc(ctx, &p[i], 1u << 20, NULL) == GM_OK; i++) made++; /* two per segment */
    for (i = 0; i < made; i++) gm_free(ctx, p[i]);
    if (made == 2 * n) {
        t0 = now_ns();
        gm_empty_cache(ctx);
        t = (now_ns() - t0) / 1e3 / n;
    }
    gm_shutdown(ctx);
    free(p);
    return t;
}

/* Expandable segments (sim): ns per gm_alloc or gm_free of blocks of
   `lo` to `hi` bytes, eight live at a time and freed in another order
   (best of five passes of 4,000 rounds): what a block's page bookkeeping
   costs as blocks span more pages. */
static double measure_wide(size_t lo, size_t hi) {
    gm_desc d;
    gm_context* ctx;
    void* p[8];
    double best = -1;
    int r, i, k;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.expandable = GM_TOGGLE_ON;
    d.sim.capacity = (size_t)1 << 40;
    if (gm_setup(&ctx, &d) != GM_OK) return -1;
    for (r = 0; r < 5; r++) {
        double t0 = now_ns(), t;
        for (i = 0; i < 4000; i++) {
            for (k = 0; k < 8; k++) {
                size_t n = lo + (hi - lo) / 7 * (size_t)((k * 5 + i) % 8) + (size_t)(i % 7) * 4096;
                if (gm_alloc(ctx, &p[k], n, NULL) != GM_OK) {
                    gm_shutdown(ctx);
                    return -1;
                }
            }
            for (k = 0; k < 8; k++) gm_free(ctx, p[(k * 3) % 8]);
        }
        t = (now_ns() - t0) / (4000.0 * 16);
        if (best < 0 || t < best) best = t;
    }
    gm_shutdown(ctx);
    return best;
}

/* Blocks freed on other threads than the allocating one (sim). A cached
   512 B pair before and after the first such free, which switches the
   context's fast frees to a compare-and-swap each (*plain, *cas); and 4 KiB
   blocks a producer hands to a consumer through a ring of 64, ns a block
   (*handed; median of five passes of 20,000). */
typedef struct crossed {
    gm_context* ctx;
    void* volatile slot[64];
    void* one;
    int n;
} crossed;
static void* crossed_free_one(void* a) {
    crossed* x = (crossed*)a;
    gm_free(x->ctx, x->one);
    return NULL;
}
static void* crossed_consumer(void* a) {
    crossed* x = (crossed*)a;
    int got = 0, k = 0;
    while (got < x->n) {
        void* p = __atomic_exchange_n(&x->slot[k], NULL, __ATOMIC_ACQ_REL);
        if (!p) continue;
        k = (k + 1) % 64;
        if (p != (void*)x) gm_free(x->ctx, p);
        got++;
    }
    return NULL;
}
static void measure_crossed(double* plain, double* cas, double* handed) {
    gm_desc d;
    crossed x;
    pthread_t th;
    double t[5];
    int r, i, k, failed;
    *plain = *cas = *handed = -1;
    memset(&d, 0, sizeof d);
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    memset(&x, 0, sizeof x);
    if (gm_setup(&x.ctx, &d) != GM_OK) return;
    *plain = measure(pair_gm, x.ctx, 512, 10000);
    if (gm_alloc(x.ctx, &x.one, 512, NULL) == GM_OK && gm_free(x.ctx, x.one) == GM_OK &&
        gm_alloc(x.ctx, &x.one, 512, NULL) == GM_OK && /* from this thread's cache */
        pthread_create(&th, NULL, crossed_free_one, &x) == 0) {
        pthread_join(th, NULL);
        *cas = measure(pair_gm, x.ctx, 512, 10000);
    }
    gm_shutdown(x.ctx);
    if (gm_setup(&x.ctx, &d) != GM_OK) return;
    x.n = 20000;
    for (r = 0, failed = 0; r < 5 && !failed; r++) {
        double t0 = now_ns();
        if (pthread_create(&th, NULL, crossed_consumer, &x) != 0) break;
        for (i = 0, k = 0; i < x.n; i++) {
            void* p = NULL;
            if (!failed && gm_alloc(x.ctx, &p, 4096, NULL) != GM_OK) failed = 1;
            if (failed) p = &x; /* the consumer still takes n: a marker it does not free */
            while (__atomic_load_n(&x.slot[k], __ATOMIC_ACQUIRE)) {}
            __atomic_store_n(&x.slot[k], p, __ATOMIC_RELEASE);
            k = (k + 1) % 64;
        }
        pthread_join(th, NULL);
        t[r] = (now_ns() - t0) / x.n;
    }
    if (r == 5 && !failed) *handed = median(t, 5);
    gm_shutdown(x.ctx);
}

/* jemalloc's pairs, and gpumem's timed beside them (out[2 * i], out[2 * i + 1]). */
static void jemalloc_column(const char* self, double* out) {
    const char* jp = bench_jemalloc();
    char cmd[2048];
    size_t i;
    for (i = 0; i < 2 * NSIZES; i++) out[i] = -1;
    if (!jp) return;
    snprintf(cmd, sizeof cmd, "LD_PRELOAD='%s' '%s' --host", jp, self);
    bench_read_numbers(cmd, out, 2 * NSIZES);
}

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-alloc [CSV]", "--host");
    if (args_rc >= 0) return args_rc;
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-alloc.csv";
    double child[2 * NSIZES]; /* jemalloc's pair and gpumem's beside it, by size */
    gm_context* ctx = NULL;
    gm_context* big = NULL; /* thread caches that also keep large blocks */
    gm_context* two = NULL; /* the two threads' (its caches widen when they contend: a context of its own, so
                               that ctx's figures stay one thread's) */
    gm_desc d;
    FILE* csv;
    size_t i;
    if (argc > 1 && !strcmp(argv[1], "--host")) { /* the host allocator's pairs and gpumem's, for the parent */
        memset(&d, 0, sizeof d);
        d.backend = GM_BACKEND_SIM;
        if (gm_setup(&ctx, &d) != GM_OK) ctx = NULL;
        for (i = 0; i < NSIZES; i++) {
            double m[2] = {-1, -1};
            if (ctx) measure_beside(pair_malloc, NULL, pair_gm, ctx, sizes[i], 10000, m);
            else m[0] = measure(pair_malloc, NULL, sizes[i], 10000);
            printf("%.1f\n%.1f\n", m[0], m[1]);
        }
        if (ctx) gm_shutdown(ctx);
        return 0;
    }
    jemalloc_column(argv[0], child);
    if (!bench_jemalloc())
        printf("jemalloc is not installed (Debian: apt-get install libjemalloc2): no jemalloc column, and no gm / jem "
               "ratio\n");
    memset(&d, 0, sizeof d);
    d.log_fn = gm_log_stderr;
    if (gm_setup(&ctx, &d) != GM_OK) {
        d.backend = GM_BACKEND_SIM;
        printf("no CUDA device: measuring the sim backend\n");
        if (gm_setup(&ctx, &d) != GM_OK) return 1;
    }
    d = gm_query_desc(ctx);
    d.thread_cache_max = (size_t)64 << 20;
    d.log_fn = NULL;
    if (gm_setup(&big, &d) != GM_OK) big = NULL;
    d.thread_cache_max = 0; /* the default, which may widen */
    if (gm_setup(&two, &d) != GM_OK) two = NULL;
    csv = fopen(csv_path, "w");
    if (csv)
        fprintf(csv, "backend,size,gm_pair_ns,gm_pair_2threads_ns,gm_miss_ns,backend_pair_ns,malloc_pair_ns,"
                     "jemalloc_pair_ns,cuda_async_pair_ns,gm_tc64m_pair_ns,gm_tc64m_pair_2threads_ns,gm_pair_beside_jemalloc_ns,gm_pair_2threads_over_alone\n");
    printf("backend %s; median ns per alloc+free pair (two threads: each thread's pair, both running, the\n"
           "slower; 2 / 1: each thread's pair with both running over its pair alone, in alternating batches, the larger;\n"
           "tc 64M: thread_cache_max:64M, large blocks in the thread caches too; beside jem: gm's pair timed\n"
           "in batches alternating with jemalloc's, in jemalloc's process, and gm / jem is their ratio)\n",
           gm_backend_name(ctx));
    printf("%10s %9s %9s %6s %10s %10s %8s %9s %9s %10s %9s %9s %9s\n", "size", "gm", "gm 2 thr", "2 / 1", "gm miss", "raw", "glibc", "jemalloc", "cudaAsync", "beside jem", "gm / jem", "tc 64M", "64M 2 thr");
#ifdef GPUMEM_CUDA
    cudaStream_t s = NULL;
    int have_async = strcmp(gm_backend_name(ctx), "cuda") == 0;
    if (have_async) {
        cudaMemPool_t pool;
        unsigned long long thr = ~0ull;
        int dev = gm_query_desc(ctx).device;
        have_async = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                     cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess &&
                     cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr) == cudaSuccess;
    }
#endif
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        double g = measure(pair_gm, ctx, n, 10000);
        double g1 = -1, g2 = two ? measure_two(two, n, &g1) : -1;
        double miss = measure_miss(ctx, n);
        double r = measure(pair_raw, ctx, n, n >= (8u << 20) ? 20 : 200);
        double m = measure(pair_malloc, NULL, n, 10000);
        double a = -1, b1 = big ? measure(pair_gm, big, n, 10000) : -1, b2 = big ? measure_two(big, n, NULL) : -1;
#ifdef GPUMEM_CUDA
        if (have_async) a = measure(pair_cuda_async, s, n, 10000);
#endif
        {
            char c1[32], c2[32], c3[32], c4[32], c5[32], c6[32], c8[32], f1[32], f2[32], f3[32], f4[32], f5[32],
                f6[32];
            double je = child[2 * i], gj = child[2 * i + 1];
            printf("%10zu %9.1f %9.1f %6s %10.1f %10.1f %8.1f %9s %9s %10s %9s %9s %9s\n", n, g, g2,
                   bench_cell(c8, sizeof c8, "%.2f", g1), miss, r, m,
                   bench_cell(c1, sizeof c1, "%.1f", je), bench_cell(c2, sizeof c2, "%.1f", a),
                   bench_cell(c6, sizeof c6, "%.1f", gj), bench_cell(c3, sizeof c3, "%.2fx", je > 0 && gj > 0 ? gj / je : -1),
                   bench_cell(c4, sizeof c4, "%.1f", b1), bench_cell(c5, sizeof c5, "%.1f", b2));
            if (csv)
                fprintf(csv, "%s,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%s,%s,%s,%s,%s,%s\n", gm_backend_name(ctx), n, g, g2,
                        miss, r, m, bench_field(f1, sizeof f1, "%.1f", je), bench_field(f2, sizeof f2, "%.1f", a),
                        bench_field(f3, sizeof f3, "%.1f", b1), bench_field(f4, sizeof f4, "%.1f", b2),
                        bench_field(f5, sizeof f5, "%.1f", gj), bench_field(f6, sizeof f6, "%.2f", g1));
        }
    }
    {
        static const int ns[] = {1000, 4000, 16000};
        printf("gm_empty_cache, us per cached 2 MiB segment given back:");
        for (i = 0; i < sizeof ns / sizeof ns[0]; i++) printf(" %.2f (%d)", measure_release(ctx, ns[i]), ns[i]);
        printf("\n");
    }
    printf("expandable segments (sim), ns per gm_alloc or gm_free, blocks of 2-9 MiB: %.0f; of 100 MiB-5 GiB: %.0f\n",
           measure_wide((size_t)2 << 20, (size_t)9 << 20), measure_wide((size_t)100 << 20, (size_t)5 << 30));
    {
        double plain, cas, handed;
        measure_crossed(&plain, &cas, &handed);
        printf("blocks freed on other threads (sim): a cached 512 B pair %.1f ns before the first, %.1f after (the\n"
               "context's frees take a compare-and-swap from then on); 4 KiB blocks handed to another thread through a\n"
               "ring of 64: %.0f ns a block\n", plain, cas, handed);
    }
    if (csv) {
        fclose(csv);
        printf("wrote %s\n", csv_path);
    }
    if (two) {
        printf("the two threads' context: thread caches keep blocks of up to %zu bytes (the default, 1 MiB, widens "
               "when threads contend for large blocks)\n", two->tc_max);
        gm_shutdown(two);
    }
    if (big) gm_shutdown(big);
    gm_shutdown(ctx);
    return 0;
}
