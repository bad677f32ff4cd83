/* The thread caches (>>tcache): gm_alloc and gm_free of small blocks
   without the lock. What the user sees must not change: the statistics
   match a context without caches step for step, misuse is still caught,
   blocks freed on other threads than the allocating one come back whole,
   an idle thread's cache gives its blocks up when another thread needs the
   memory, a thread's exit and a context's shutdown leave nothing behind,
   and a destroyed stream's blocks are never handed out for it again;
   with expandable segments too. */
#include "gm_test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static gm_context* make_max(int tcache, size_t budget, size_t tc_max) {
    gm_desc d = t_desc();
    d.thread_cache = tcache ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    d.thread_cache_max = tc_max;
    if (budget) d.device_budget = budget;
    return t_setup(d);
}

static gm_context* make(int tcache, size_t budget) { return make_max(tcache, budget, 0); }


/* Same-size pairs reuse the block: the thread cache serves them. */
static void test_reuse(void) {
    gm_context* ctx = make(1, 0);
    void *p, *q;
    size_t n;
    int i;
    T_OK(gm_alloc(ctx, &p, 4096, NULL));
    T_OK(gm_free(ctx, p));
    for (i = 0; i < 1000; i++) {
        T_OK(gm_alloc(ctx, &q, 4000, NULL)); /* the same rounded size */
        T_CHECK(q == p);
        T_OK(gm_block_size(ctx, q, &n));
        T_EQ(n, 4096);
        T_OK(gm_free(ctx, q));
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A peak reached only through the cache is counted. */
static void test_peak(void) {
    gm_context* ctx = make(1, 0);
    gm_stats st;
    void* p;
    T_OK(gm_alloc(ctx, &p, 4000, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &p, 4096, NULL)); /* the cache: 96 requested bytes above the last peak */
    T_OK(gm_free(ctx, p));
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.requested_bytes[GM_STAT_ALL].current, 0);
    T_EQ(st.requested_bytes[GM_STAT_ALL].peak, 4096);
    T_EQ(st.requested_bytes[GM_STAT_SMALL_POOL].peak, 4096);
    T_EQ(st.allocation[GM_STAT_ALL].allocated, 2);
    T_EQ(st.allocation[GM_STAT_ALL].freed, 2);
    T_OK(gm_reset_peak_stats(ctx));
    T_OK(gm_alloc(ctx, &p, 4000, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.requested_bytes[GM_STAT_ALL].peak, 4000);
    T_OK(gm_shutdown(ctx));
}

/* A random single-thread walk on two contexts, one with thread caches and
   one without: after every step the counts, requested bytes and their
   peaks and running totals agree exactly, for all pools and each, and the
   allocated bytes are the sizes of the blocks held (where blocks lie, and
   so their sizes, may differ between the two). The statistics are read
   by another thread, so that this thread's bins stay full across the
   reads (a read by this thread gives them back): the high-water marks
   then see fast allocations and frees of every kind between two reads.
   With tc_max (thread_cache_max), large blocks go through the caches too,
   mixed with small ones. */
typedef struct stats_read {
    gm_context* ctx;
    int reset; /* gm_reset_peak_stats first */
    gm_stats st;
    gm_result r;
} stats_read;
static void* stats_reader(void* a) {
    stats_read* q = (stats_read*)a;
    q->r = q->reset ? gm_reset_peak_stats(q->ctx) : GM_OK;
    if (q->r == GM_OK) q->r = gm_get_stats(q->ctx, &q->st);
    return NULL;
}
static gm_result stats_elsewhere_r(gm_context* ctx, gm_stats* st, int reset) {
    pthread_t th;
    stats_read q;
    q.ctx = ctx;
    q.reset = reset;
    q.r = GM_ERR_INVALID_ARGUMENT;
    if (pthread_create(&th, NULL, stats_reader, &q) != 0) return GM_ERR_HOST_OUT_OF_MEMORY;
    pthread_join(th, NULL);
    *st = q.st;
    return q.r;
}
static gm_result stats_elsewhere(gm_context* ctx, gm_stats* st) { return stats_elsewhere_r(ctx, st, 0); }

static void test_stats_match(size_t tc_max) {
    gm_context* on = make_max(1, 0, tc_max);
    gm_context* off = make(0, 0);
    void* pa[64];
    void* pb[64];
    size_t sa[64];
    int n = 0, step, bad = 0, j;
    unsigned long long s = 0x1234567ull + tc_max;
    static const size_t sizes[] = {512, 700, 4096, 4000, 65536, 3 * KiB, 2900, 3 * MiB,
                                   2 * MiB, 5 * MiB + 512, 8 * MiB, 3 * MiB - 100, 20 * MiB, 1 * MiB + 1};
    const unsigned nsizes = tc_max ? 14 : 8;
    if (tc_max && gm_query_desc(on).device_budget / 32 >= tc_max) T_EQ(gm_query_desc(on).thread_cache_max, tc_max);
    for (step = 0; step < 20000 && !bad; step++) {
        unsigned long long r = t_rand_r(&s);
        gm_stats x, y;
        if (n < 64 && (r % 5) < 3) {
            size_t size = sizes[(r >> 8) % nsizes];
            if (gm_alloc(on, &pa[n], size, NULL) != GM_OK || gm_alloc(off, &pb[n], size, NULL) != GM_OK) {
                printf("step %d: gm_alloc of %zu fails\n", step, size);
                bad++;
            }
            sa[n] = size;
            n++;
        } else if (n) {
            int k = (int)((r >> 8) % (unsigned)n);
            if (gm_free(on, pa[k]) != GM_OK || gm_free(off, pb[k]) != GM_OK) bad++;
            pa[k] = pa[n - 1];
            pb[k] = pb[n - 1];
            sa[k] = sa[n - 1];
            n--;
        }
        if (step % 7 == 0 || step > 19900) {
            int64_t held[GM_STAT_POOLS] = {0, 0, 0};
            int i;
            T_OK(stats_elsewhere(on, &x));
            T_OK(gm_get_stats(off, &y));
#define SAME(f)                                                                                       \
    if (x.f[j].current != y.f[j].current || x.f[j].peak != y.f[j].peak ||                           \
        x.f[j].allocated != y.f[j].allocated || x.f[j].freed != y.f[j].freed) {                     \
        printf("step %d: %s[%d] differs: %lld/%lld/%lld/%lld against %lld/%lld/%lld/%lld\n", step, #f, \
               j, (long long)x.f[j].current, (long long)x.f[j].peak, (long long)x.f[j].allocated,   \
               (long long)x.f[j].freed, (long long)y.f[j].current, (long long)y.f[j].peak,           \
               (long long)y.f[j].allocated, (long long)y.f[j].freed);                                \
        bad++;                                                                                      \
    }
            for (j = 0; j < GM_STAT_POOLS; j++) {
                SAME(allocation)
                SAME(requested_bytes)
                SAME(active)
            }
            for (i = 0; i < n; i++) {
                size_t bs = 0;
                T_OK(gm_block_size(on, pa[i], &bs));
                held[0] += (int64_t)bs;
                held[sa[i] > MiB ? GM_STAT_LARGE_POOL : GM_STAT_SMALL_POOL] += (int64_t)bs;
            }
            for (j = 0; j < GM_STAT_POOLS; j++)
                if (x.allocated_bytes[j].current != held[j]) {
                    printf("step %d: allocated_bytes[%d] %lld, blocks held %lld\n", step, j,
                           (long long)x.allocated_bytes[j].current, (long long)held[j]);
                    bad++;
                }
#undef SAME
        }
        if (step % 1000 == 0 && (gm_check(on) != 0 || gm_check(off) != 0)) {
            printf("step %d: gm_check fails\n", step);
            bad++;
        }
    }
    T_EQ(bad, 0);
    while (n--) {
        T_OK(gm_free(on, pa[n]));
        T_OK(gm_free(off, pb[n]));
    }
    T_EQ(gm_check(on), 0);
    T_OK(gm_shutdown(on));
    T_OK(gm_shutdown(off));
}

/* One thread on two contexts with caches, in turn: the fast paths know
   only the context used last, so most calls here find the other's and go
   the slow way, which still serves and takes blocks through this thread's
   cache of the context named (the same block each time, counted by the
   cache), and the statistics, read by another thread, count every pair
   exactly. */
static void test_two_contexts(void) {
    gm_context* a = make(1, 0);
    gm_context* b = make(1, 0);
    void *p, *q, *p0 = NULL, *q0 = NULL;
    gm_stats st;
    int i, moved = 0;
    for (i = 0; i < 5000; i++) {
        T_OK(gm_alloc(a, &p, 4096, NULL));
        T_OK(gm_alloc(b, &q, 700, NULL));
        if (!i) p0 = p, q0 = q;
        moved += p != p0 || q != q0;
        T_OK(gm_free(a, p)); /* this thread used b last */
        T_OK(gm_alloc(a, &p, 4000, NULL));
        T_OK(gm_free(b, q)); /* and a last */
        T_OK(gm_free(a, p));
    }
    T_EQ(moved, 0);
    /* every pair but the first of each context was the cache's, counted there (through the lock
       each would be counted by the context, and the cache's count would stay 0) */
    T_CHECK(!GM__TC || (a->tcs && a->tcs->cnt[GM__TCN_A] >= 9999 && a->tcs->cnt[GM__TCN_F] >= 9999));
    T_CHECK(!GM__TC || (b->tcs && b->tcs->cnt[GM__TCN_A] >= 4999 && b->tcs->cnt[GM__TCN_F] >= 4999));
    T_OK(stats_elsewhere(a, &st));
    T_EQ(st.allocation[GM_STAT_ALL].allocated, 10000);
    T_EQ(st.allocation[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_ALL].peak, 1);
    T_EQ(st.requested_bytes[GM_STAT_ALL].allocated, 5000 * 4096 + 5000 * 4000);
    T_EQ(st.requested_bytes[GM_STAT_ALL].peak, 4096);
    T_OK(stats_elsewhere(b, &st));
    T_EQ(st.allocation[GM_STAT_ALL].allocated, 5000);
    T_EQ(st.requested_bytes[GM_STAT_ALL].freed, 5000 * 700);
    T_EQ(st.allocated_bytes[GM_STAT_ALL].peak, 1024);
    T_EQ(gm_check(a), 0);
    T_EQ(gm_check(b), 0);
    T_OK(gm_shutdown(a));
    T_OK(gm_shutdown(b));
}

/* With large blocks in the cache (thread_cache_max), each pool's peak of
   an interval between two folds is its own: large blocks come and go,
   then a small one, all through the cache; the peaks read by another
   thread (this thread's bins stay) are the large pair's for all pools and
   the large pool, the small block's for the small pool. */
static void test_big_marks(void) {
    gm_context* ctx = make_max(1, 0, 64 * MiB);
    void *l1, *l2, *s1, *s2, *p;
    gm_stats st;
    int i;
    T_OK(gm_alloc(ctx, &l1, 8 * MiB, NULL));
    T_OK(gm_alloc(ctx, &l2, 8 * MiB, NULL));
    T_OK(gm_alloc(ctx, &s1, 64 * KiB, NULL));
    T_OK(gm_alloc(ctx, &s2, 64 * KiB, NULL));
    T_OK(gm_free(ctx, l1)); /* all four to this thread's bins */
    T_OK(gm_free(ctx, l2));
    T_OK(gm_free(ctx, s1));
    T_OK(gm_free(ctx, s2));
    T_OK(stats_elsewhere_r(ctx, &st, 1)); /* peaks start again at 0 */
    for (i = 0; i < GM_STAT_POOLS; i++) {
        T_EQ(st.requested_bytes[i].current, 0);
        T_EQ(st.requested_bytes[i].peak, 0);
    }
    T_OK(gm_alloc(ctx, &l1, 8 * MiB, NULL)); /* from the bins */
    T_OK(gm_alloc(ctx, &l2, 8 * MiB, NULL));
    T_OK(gm_free(ctx, l1));
    T_OK(gm_free(ctx, l2));
    T_OK(gm_alloc(ctx, &s1, 64 * KiB, NULL));
    T_OK(gm_free(ctx, s1));
    T_OK(stats_elsewhere(ctx, &st));
    T_EQ(st.requested_bytes[GM_STAT_ALL].peak, 16 * MiB);
    T_EQ(st.requested_bytes[GM_STAT_LARGE_POOL].peak, 16 * MiB);
    T_EQ(st.requested_bytes[GM_STAT_SMALL_POOL].peak, 64 * KiB);
    T_EQ(st.allocation[GM_STAT_ALL].peak, 2);
    T_EQ(st.allocation[GM_STAT_LARGE_POOL].peak, 2);
    T_EQ(st.allocation[GM_STAT_SMALL_POOL].peak, 1);
    T_EQ(st.allocated_bytes[GM_STAT_SMALL_POOL].peak, 64 * KiB);
    T_EQ(st.allocation[GM_STAT_LARGE_POOL].allocated, 4);
    T_EQ(st.allocation[GM_STAT_SMALL_POOL].allocated, 3);
    for (i = 0; i < GM_STAT_POOLS; i++) T_EQ(st.requested_bytes[i].current, 0);
    /* a small peak above the large one's small share, then the large pair on top */
    T_OK(gm_alloc(ctx, &s1, 64 * KiB, NULL));
    T_OK(gm_alloc(ctx, &s2, 64 * KiB, NULL));
    T_OK(gm_alloc(ctx, &l1, 8 * MiB, NULL));
    T_OK(gm_free(ctx, s1));
    T_OK(gm_free(ctx, s2));
    T_OK(gm_alloc(ctx, &l2, 8 * MiB, NULL));
    T_OK(stats_elsewhere(ctx, &st));
    T_EQ(st.requested_bytes[GM_STAT_ALL].peak, 16 * MiB);
    T_EQ(st.requested_bytes[GM_STAT_SMALL_POOL].peak, 128 * KiB);
    T_EQ(st.requested_bytes[GM_STAT_LARGE_POOL].current, 16 * MiB);
    T_EQ(st.requested_bytes[GM_STAT_SMALL_POOL].current, 0);
    T_OK(gm_free(ctx, l1));
    T_OK(gm_free(ctx, l2));
    T_EQ(gm_check(ctx), 0);
    /* a request past thread_cache_max goes through the lock, and the
       thread's cached blocks go back to the pool first */
    T_OK(gm_alloc(ctx, &p, 100 * MiB, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.requested_bytes[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_ALL].allocated, st.allocation[GM_STAT_ALL].freed);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* thread_cache_max: from desc and conf, rounded, bounded by the budget,
   1 MiB with expandable segments, and a bad value is the default. */
static void test_cache_max_option(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    d.conf = "thread_cache_max:8M";
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, 8 * MiB);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.thread_cache_max = 3 * MiB + 1; /* rounded up to the allocator's 512 B */
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, 3 * MiB + 512);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.conf = "thread_cache_max:0,thread_cache_max:2G"; /* both bad: the default */
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, MiB);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.thread_cache_max = (size_t)-1; /* a warning and the default */
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, MiB);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.device_budget = 64 * MiB;
    d.thread_cache_max = 8 * MiB; /* over 1/32 of the budget */
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, 2 * MiB);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.expandable = GM_TOGGLE_ON;
    d.thread_cache_max = 8 * MiB;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).thread_cache_max, MiB);
    T_OK(gm_shutdown(ctx));
}

/* Misuse of blocks a thread cache holds is caught as before. */
static void test_misuse(void) {
    gm_context* ctx = make(1, 0);
    void *p, *q;
    size_t n;
    gm_stream s;
    T_OK(gm_alloc(ctx, &p, 512, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &p, 512, NULL)); /* from the cache */
    T_OK(gm_free(ctx, p));              /* into it */
    T_EQ(gm_free(ctx, p), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_record_stream(ctx, p, NULL), GM_ERR_DOUBLE_FREE);
    T_CHECK(gm_block_size(ctx, p, &n) != GM_OK);
    T_EQ(gm_free(ctx, (char*)p + 512), GM_ERR_FOREIGN_POINTER);
    /* a block recorded on another stream leaves the cache: its free waits */
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &q, 512, NULL));
    T_OK(gm_record_stream(ctx, q, s));
    T_OK(gm_free(ctx, q));
    T_EQ(gm_free(ctx, q), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    /* a destroyed stream's cached blocks are not handed out for it again */
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &q, 4096, s));
    T_OK(gm_free(ctx, q));
    T_OK(gm_alloc(ctx, &q, 4096, s)); /* the cache */
    T_OK(gm_free(ctx, q));
    T_OK(gm_stream_destroy(ctx, s));
    if (!t_sim) { /* CUDA hands the handle out again: only the sim's stays invalid */
        T_OK(gm_shutdown(ctx));
        return;
    }
    T_EQ(gm_alloc(ctx, &q, 4096, s), GM_ERR_INVALID_STREAM);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Threads that allocate, free their own and free each other's, with a
   checker beside them running gm_check and reading statistics. */
#define XTHREADS 4
#define XOPS 40000
typedef struct xbox {
    pthread_mutex_t mu;
    void* p[1024];
    unsigned long long tag[1024];
    size_t size[1024];
    int n;
} xbox;
static xbox box = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, {0}, 0};
static gm_context* xctx;
static int xerr, xstop, xexpand; /* xexpand: expandable segments, and a large request now and then */
static int xlarge;                /* thread_cache_max past the small pool: large blocks, cached, often */
static pthread_mutex_t xmu = PTHREAD_MUTEX_INITIALIZER;

static void xbad(void) {
    pthread_mutex_lock(&xmu);
    xerr++;
    pthread_mutex_unlock(&xmu);
}

static void* xworker(void* arg) {
    unsigned long long s = 0x9E3779B97F4A7C15ull * (unsigned long long)(intptr_t)arg + 1;
    void* p[32];
    size_t sz[32];
    unsigned long long tg[32];
    int n = 0, i;
    for (i = 0; i < XOPS; i++) {
        unsigned long long r = t_rand_r(&s);
        if (n < 32 && (r % 3)) {
            size_t size = (size_t)512 << ((r >> 8) % 6); /* 512 B .. 16 KiB: the caches' sizes */
            if (xlarge && (r >> 40) % 4 == 0) size = (1 + (r >> 44) % 6) * MiB + 512 * ((r >> 50) % 2);
            if (gm_alloc(xctx, &p[n], size, NULL) != GM_OK) {
                xbad();
                continue;
            }
            sz[n] = size;
            tg[n] = r | 1;
            t_tag_put(p[n], size, tg[n]);
            n++;
        } else if (n) {
            int k = (int)((r >> 8) % (unsigned)n);
            if (!t_tag_ok(p[k], sz[k], tg[k])) xbad();
            if ((r >> 16) % 4 == 0) { /* another thread frees it */
                pthread_mutex_lock(&box.mu);
                if (box.n < 1024) {
                    box.p[box.n] = p[k];
                    box.tag[box.n] = tg[k];
                    box.size[box.n] = sz[k];
                    box.n++;
                    p[k] = NULL;
                }
                pthread_mutex_unlock(&box.mu);
            }
            if (p[k] && gm_free(xctx, p[k]) != GM_OK) xbad();
            p[k] = p[n - 1];
            sz[k] = sz[n - 1];
            tg[k] = tg[n - 1];
            n--;
        }
        if (xexpand && (r >> 32) % 64 == 0) { /* through the lock: this thread's cached blocks go back first */
            void* big;
            if (gm_alloc(xctx, &big, 3 * MiB, NULL) != GM_OK) xbad();
            else {
                t_tag_put(big, 3 * MiB, r);
                if (!t_tag_ok(big, 3 * MiB, r) || gm_free(xctx, big) != GM_OK) xbad();
            }
        }
        if ((r >> 24) % 4 == 0) {
            void* q = NULL;
            unsigned long long t = 0;
            size_t qs = 0;
            pthread_mutex_lock(&box.mu);
            if (box.n) {
                box.n--;
                q = box.p[box.n];
                t = box.tag[box.n];
                qs = box.size[box.n];
            }
            pthread_mutex_unlock(&box.mu);
            if (q && !t_tag_ok(q, qs, t)) xbad();
            if (q && gm_free(xctx, q) != GM_OK) xbad();
        }
    }
    while (n--) {
        if (!t_tag_ok(p[n], sz[n], tg[n])) xbad();
        if (gm_free(xctx, p[n]) != GM_OK) xbad();
    }
    return NULL;
}

static void* xchecker(void* arg) {
    int checks = 0, stop = 0;
    (void)arg;
    while (!stop) {
        gm_stats st;
        if (gm_check(xctx) != 0) xbad();
        if (gm_get_stats(xctx, &st) != GM_OK || st.allocation[0].current < 0) xbad();
        checks++;
        pthread_mutex_lock(&xmu);
        stop = xstop;
        pthread_mutex_unlock(&xmu);
    }
    return (void*)(intptr_t)checks;
}

static void test_cross_thread(int expandable, int large) {
    pthread_t th[XTHREADS], ck;
    gm_stats st;
    void* ret;
    intptr_t i;
    gm_desc d = t_desc();
    d.thread_cache = GM_TOGGLE_ON;
    d.device_budget = large ? 2048 * MiB : 1024 * MiB;
    d.thread_cache_max = large ? 32 * MiB : 0;
    d.expandable = expandable ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    xexpand = expandable;
    xlarge = large;
    xstop = 0;
    xctx = t_setup(d);
    pthread_create(&ck, NULL, xchecker, NULL);
    for (i = 0; i < XTHREADS; i++) pthread_create(&th[i], NULL, xworker, (void*)i);
    for (i = 0; i < XTHREADS; i++) pthread_join(th[i], NULL);
    pthread_mutex_lock(&xmu);
    xstop = 1;
    pthread_mutex_unlock(&xmu);
    pthread_join(ck, &ret);
    T_CHECK((intptr_t)ret > 0);
    while (box.n) { /* the main thread frees what is left: blocks of threads that have exited */
        box.n--;
        T_CHECK(t_tag_ok(box.p[box.n], box.size[box.n], box.tag[box.n]));
        T_OK(gm_free(xctx, box.p[box.n]));
    }
    T_EQ(xerr, 0);
    T_EQ(gm_check(xctx), 0);
    T_OK(gm_get_stats(xctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 0);
    T_EQ(st.allocated_bytes[GM_STAT_ALL].current, 0);
    T_EQ(st.requested_bytes[GM_STAT_ALL].current, 0);
    T_EQ(st.active[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_ALL].allocated, st.allocation[GM_STAT_ALL].freed);
    T_OK(gm_shutdown(xctx));
}

/* An idle thread's cache holds blocks another thread needs: they are taken
   from it (under a budget that has room for nothing else). */
typedef struct idle_arg {
    gm_context* ctx;
    size_t size;
    int n; /* blocks of size, at most 4 */
    t_gate filled, done;
} idle_arg;

/* n blocks of size into this thread's cache (allocated and freed twice:
   the second time from the cache), then idle until told. */
static void* idle_holder(void* a) {
    idle_arg* x = (idle_arg*)a;
    void* p[4];
    int i, k;
    for (k = 0; k < 2; k++) {
        for (i = 0; i < x->n; i++)
            if (gm_alloc(x->ctx, &p[i], x->size, NULL) != GM_OK) p[i] = NULL;
        for (i = 0; i < x->n; i++)
            if (p[i]) gm_free(x->ctx, p[i]); /* into this thread's cache */
    }
    t_gate_open(&x->filled);
    t_gate_wait(&x->done); /* idle, its cache full */
    return NULL;
}

static void test_idle_steal(void) {
    idle_arg x;
    pthread_t th;
    void* big;
    gm_stats st;
    x.ctx = make(1, 64 * MiB);
    x.size = 256 * KiB;
    x.n = 4;
    t_gate_init(&x.filled);
    t_gate_init(&x.done);
    pthread_create(&th, NULL, idle_holder, &x);
    t_gate_wait(&x.filled);
    T_OK(gm_alloc(x.ctx, &big, 63 * MiB, NULL)); /* needs the idle thread's small segment back */
    T_OK(gm_get_stats(x.ctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 1);
    T_EQ(gm_check(x.ctx), 0);
    T_OK(gm_free(x.ctx, big));
    t_gate_open(&x.done);
    pthread_join(th, NULL);
    T_EQ(gm_check(x.ctx), 0);
    T_OK(gm_shutdown(x.ctx));
}

/* A thread's exit gives its cache back; blocks it left live are freed by
   another; a context shut down while a thread still has a cache for it,
   and a new context (maybe at the same address) afterwards, are told
   apart. */
static void* exiter(void* a) {
    gm_context* ctx = (gm_context*)a;
    void *p, *q;
    if (gm_alloc(ctx, &p, 2048, NULL) == GM_OK) gm_free(ctx, p);
    if (gm_alloc(ctx, &p, 2048, NULL) != GM_OK) return NULL;
    if (gm_alloc(ctx, &q, 2048, NULL) == GM_OK) gm_free(ctx, q); /* in its cache at exit */
    return p;                                                    /* live: the main thread frees it */
}

static void test_exit_and_shutdown(void) {
    gm_context* ctx = make(1, 0);
    pthread_t th;
    void *p, *q;
    gm_stats st;
    int i;
    pthread_create(&th, NULL, exiter, ctx);
    pthread_join(th, &p);
    T_CHECK(p != NULL);
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 1);
    T_EQ(st.allocated_bytes[GM_STAT_ALL].current, 2048);
    T_OK(gm_free(ctx, p));
    T_EQ(gm_free(ctx, p), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 0);
    for (i = 0; i < 6; i++) { /* contexts come and go under one thread's caches */
        T_OK(gm_alloc(ctx, &q, 1024, NULL));
        T_OK(gm_free(ctx, q));
        T_OK(gm_shutdown(ctx));
        ctx = make(1, 0);
        T_OK(gm_alloc(ctx, &q, 1024, NULL));
        T_OK(gm_free(ctx, q));
        T_OK(gm_alloc(ctx, &q, 1024, NULL));
        T_OK(gm_get_stats(ctx, &st));
        T_EQ(st.allocation[GM_STAT_ALL].current, 1);
        T_OK(gm_free(ctx, q));
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_shutdown(ctx));
}

/* Regression: the owner's free and another thread's free of the same block
   at the same moment (a double free): exactly one succeeds, the other
   reports the double free, and the block is never handed out twice. */
static gm_context* rctx;
static void* volatile rptr;
static int rgo, rdone;
static gm_result rres;
static void* racer(void* a) {
    (void)a;
    for (;;) {
        int g;
        while (!(g = __atomic_load_n(&rgo, __ATOMIC_ACQUIRE))) {}
        if (g < 0) return NULL;
        rres = gm_free(rctx, rptr);
        __atomic_store_n(&rgo, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&rdone, 1, __ATOMIC_RELEASE);
    }
}

static void test_double_free_race(void) {
    pthread_t th;
    int i, both = 0, neither = 0;
    void *x, *y;
    rctx = make(1, 0);
    pthread_create(&th, NULL, racer, NULL);
    for (i = 0; i < 200000 && !both && !neither; i++) {
        void* p;
        gm_result ra;
        if (gm_alloc(rctx, &p, 4096, NULL) != GM_OK) break;
        rptr = p;
        __atomic_store_n(&rdone, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&rgo, 1, __ATOMIC_RELEASE);
        ra = gm_free(rctx, p);
        while (!__atomic_load_n(&rdone, __ATOMIC_ACQUIRE)) {}
        both += ra == GM_OK && rres == GM_OK;
        neither += ra != GM_OK && rres != GM_OK;
    }
    __atomic_store_n(&rgo, -1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    T_EQ(i, 200000);
    T_EQ(both, 0);
    T_EQ(neither, 0);
    T_OK(gm_alloc(rctx, &x, 4096, NULL));
    T_OK(gm_alloc(rctx, &y, 4096, NULL));
    T_CHECK(x != y);
    T_OK(gm_free(rctx, x));
    T_OK(gm_free(rctx, y));
    T_EQ(gm_check(rctx), 0);
    T_OK(gm_shutdown(rctx));
}

/* The same race on a context whose caches' frees take no locked
   instruction: a fresh context each round (the first free of a cached
   block on another thread switches a context's fast frees to a
   compare-and-swap, the race above). The other thread's free freezes the
   caches, switches, then takes the block. The owner's free starts after a delay that moves
   to where either may come first (longer after the owner won, shorter
   after it lost), so the two meet at the block's word. Exactly one
   succeeds, and the block is handed out once. */
static void test_double_free_race_cached(void) {
    pthread_t th;
    int i, both = 0, neither = 0, cached = 0, mine = 0;
    long spin, delay = 0;
    __atomic_store_n(&rgo, 0, __ATOMIC_RELEASE); /* the last test told its racer to end */
    pthread_create(&th, NULL, racer, NULL);
    for (i = 0; i < 1500 && !both && !neither; i++) {
        void *p, *x, *y;
        gm_result ra;
        rctx = make(1, 0);
        if (gm_alloc(rctx, &p, 4096, NULL) != GM_OK || gm_free(rctx, p) != GM_OK ||
            gm_alloc(rctx, &p, 4096, NULL) != GM_OK) /* from this thread's bin: handed out by its cache */
            break;
        cached += gm__tc_get(rctx, 0) && gm__tc_handed(gm__tc_find(gm__tc_get(rctx, 0), (uintptr_t)p));
        rptr = p;
        __atomic_store_n(&rdone, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&rgo, 1, __ATOMIC_RELEASE);
        for (spin = delay / 2 + (long)(t_rand() % (unsigned long long)(delay + 1)); spin > 0; spin--)
            __asm__ __volatile__("" ::: "memory"); /* either may come first */
        ra = gm_free(rctx, p);
        while (!__atomic_load_n(&rdone, __ATOMIC_ACQUIRE)) {}
        both += ra == GM_OK && rres == GM_OK;
        neither += ra != GM_OK && rres != GM_OK;
        mine += ra == GM_OK;
        delay = ra == GM_OK ? delay + delay / 4 + 16 : delay - delay / 4; /* to where either wins */
        if (delay > 10000000) delay = 10000000;
        if (gm_alloc(rctx, &x, 4096, NULL) != GM_OK || gm_alloc(rctx, &y, 4096, NULL) != GM_OK || x == y) both++;
        else if (gm_free(rctx, x) != GM_OK || gm_free(rctx, y) != GM_OK) neither++;
        if (gm_check(rctx) != 0) neither++;
        gm_shutdown(rctx);
    }
    __atomic_store_n(&rgo, -1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    T_EQ(i, 1500);
    T_EQ(cached, 1500);
    printf("a cached block freed on two threads at once: the owner's free won %d of %d times\n", mine, i);
    T_CHECK(mine > 0 && mine < i); /* both sides won some */
    T_EQ(both, 0);
    T_EQ(neither, 0);
}

/* Blocks one thread allocates and another frees (a producer and a
   consumer): a context whose blocks were all freed by their own threads
   frees without a locked instruction; the first block freed on the other
   thread switches it, once, and every block comes back whole with the
   statistics exact. */
typedef struct pc_arg {
    gm_context* ctx;
    void* volatile slot[64];
    int n, err;
} pc_arg;
static void* pc_consumer(void* a) {
    pc_arg* x = (pc_arg*)a;
    int got = 0, k = 0;
    while (got < x->n) {
        void* p = __atomic_exchange_n(&x->slot[k], NULL, __ATOMIC_ACQ_REL);
        if (!p) continue;
        k = (k + 1) % 64;
        if (!t_tag_ok(p, 4096, (unsigned long long)got)) x->err++; /* in order: the slots are a ring */
        if (gm_free(x->ctx, p) != GM_OK) x->err++;
        got++;
    }
    return NULL;
}
static void test_producer_consumer(void) {
    pc_arg x;
    pthread_t th;
    gm_stats st;
    int i, k = 0;
    memset(&x, 0, sizeof x);
    x.ctx = make(1, 0);
    x.n = 20000;
    for (i = 0; i < 100; i++) { /* this thread's own frees keep the plain way */
        void* p;
        T_OK(gm_alloc(x.ctx, &p, 4096, NULL));
        T_OK(gm_free(x.ctx, p));
    }
    T_EQ(x.ctx->tc_cas, 0);
    pthread_create(&th, NULL, pc_consumer, &x);
    for (i = 0; i < x.n; i++) {
        void* p;
        if (gm_alloc(x.ctx, &p, 4096, NULL) != GM_OK) {
            x.err++;
            break;
        }
        t_tag_put(p, 4096, (unsigned long long)i);
        while (__atomic_load_n(&x.slot[k], __ATOMIC_ACQUIRE)) {}
        __atomic_store_n(&x.slot[k], p, __ATOMIC_RELEASE);
        k = (k + 1) % 64;
    }
    pthread_join(th, NULL);
    T_EQ(x.err, 0);
    T_EQ(x.ctx->tc_cas, 1);
    T_EQ(gm_check(x.ctx), 0);
    T_OK(gm_get_stats(x.ctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_ALL].allocated, x.n + 100);
    T_EQ(st.allocation[GM_STAT_ALL].freed, x.n + 100);
    T_EQ(st.requested_bytes[GM_STAT_ALL].current, 0);
    T_OK(gm_shutdown(x.ctx));
}

/* Regression: statistics changed under the lock by the tiered manager and
   by retired pending frees see what the thread cache did before them. */
static void stats_of(int tcache, gm_stats* tier_st, gm_stats* pend_st) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a, t;
    gm_stream s2;
    void *p, *q, *r1, *r2;
    d.thread_cache = tcache ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
    d.device_budget = 64 * MiB;
    d.host_budget = 256 * MiB;
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &a, 4 * MiB));
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_reset_peak_stats(ctx));
    T_OK(gm_alloc(ctx, &p, MiB, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &p, MiB, NULL)); /* with caches: through the cache, not yet folded */
    T_OK(gm_free(ctx, p));
    T_OK(gm_tensor_create(ctx, &t, 4 * MiB));
    T_OK(gm_get_stats(ctx, tier_st));
    T_OK(gm_tensor_destroy(ctx, t));
    T_OK(gm_stream_create(ctx, &s2));
    T_OK(gm_alloc(ctx, &p, 4096, NULL));
    T_OK(gm_alloc(ctx, &q, 4096, NULL));
    T_OK(gm_free(ctx, p));
    T_OK(gm_free(ctx, q));
    T_OK(gm_reset_peak_stats(ctx));
    T_OK(gm_alloc(ctx, &r1, 4096, NULL));
    T_OK(gm_record_stream(ctx, r1, s2));
    T_OK(gm_free(ctx, r1)); /* pending on s2 */
    T_OK(gm_alloc(ctx, &r2, 4096, NULL));
    T_OK(gm_get_stats(ctx, pend_st));
    T_OK(gm_free(ctx, r2));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s2));
    T_OK(gm_shutdown(ctx));
}

static void test_locked_changes_fold(void) {
    gm_stats a, b, c, d;
    stats_of(0, &a, &b);
    stats_of(1, &c, &d);
    T_EQ(c.allocated_bytes[0].peak, a.allocated_bytes[0].peak);
    T_EQ(c.allocation[0].peak, a.allocation[0].peak);
    T_EQ(d.active[0].current, b.active[0].current);
    T_EQ(d.active[0].peak, b.active[0].peak);
    T_EQ(d.active_bytes[0].peak, b.active_bytes[0].peak);
}

/* A block's entry in its cache's table stays while the block is handed
   out or binned, and goes stale when the block leaves (given back to the
   pool, freed through the lock): the same address handed out again
   through the lock is a new entry, freed at once by the cache, and a
   second free of it is still a double free. Many blocks at once grow the
   table, stale entries and all, with gm_check after every step. */
static void test_table_entries(void) {
    gm_context* ctx = make(1, 0);
    gm_stats st;
    void *p, *q, *v[300];
    int i, round;
    T_OK(gm_alloc(ctx, &p, 512, NULL));
    T_OK(gm_free(ctx, p));                /* binned; its entry stays */
    T_OK(gm_empty_cache(ctx));            /* given back: the entry is stale */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_alloc(ctx, &q, 512, NULL));   /* through the lock, adopted anew */
    T_OK(gm_free(ctx, q));
    T_EQ(gm_free(ctx, q), GM_ERR_DOUBLE_FREE);
    T_OK(gm_alloc(ctx, &p, 512, NULL));   /* from the bin: the same block */
    T_CHECK(p == q);
    T_OK(gm_free(ctx, p));
    T_EQ(gm_check(ctx), 0);
    for (round = 0; round < 6; round++) {
        for (i = 0; i < 300; i++) {
            T_OK(gm_alloc(ctx, &v[i], (size_t)512 * (size_t)(1 + (i + round) % 7), NULL));
            if (i % 37 == 0) T_EQ(gm_check(ctx), 0);
        }
        if (round % 2) T_OK(gm_empty_cache(ctx)); /* nothing cached to give: entries stay valid */
        for (i = 0; i < 300; i++) {
            T_OK(gm_free(ctx, v[(i * 7) % 300]));
            if (i % 41 == 0) T_EQ(gm_check(ctx), 0);
        }
        T_EQ(gm_free(ctx, v[5]), GM_ERR_DOUBLE_FREE);
        if (round % 3 == 2) T_OK(gm_empty_cache(ctx)); /* the binned go back: their entries go stale */
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.allocation[0].current, 0);
    T_EQ(st.allocated_bytes[0].current, 0);
    T_EQ(st.requested_bytes[0].current, 0);
    T_OK(gm_shutdown(ctx));
}

/* gm_check sees a cache whose records disagree: a table entry naming
   another bin or size than its block's (the fast free trusts both without
   reading the block). */
/* p freed into its bin again (gm_check gives the bins back): its entry. */
static gm__tclive* rebin(gm_context* ctx, void** p) {
    gm__tclive* e;
    T_OK(gm_alloc(ctx, p, 4096, NULL));
    T_OK(gm_free(ctx, *p));
    e = gm__tls_tc ? gm__tc_find(gm__tls_tc, (uintptr_t)*p) : NULL;
    T_CHECK(e != NULL && gm__tls_tc->bins[e->bin].n == 1 && gm__tls_tc->bins[e->bin].e[0]->addr == (uintptr_t)*p);
    return e && gm__tls_tc->bins[e->bin].n == 1 ? e : NULL;
}

static void test_check_records(void) {
    gm_context* ctx = make(1, 0);
    void *p, *q;
    gm__tclive* e;
    uint32_t keep;
    T_OK(gm_alloc(ctx, &q, 1024, NULL));
    if ((e = rebin(ctx, &p)) != NULL) {
        keep = e->bin;
        e->bin = (keep + 1) % GM__TC_BINS;
        T_CHECK(gm_check(ctx) != 0);
        e->bin = keep;
    }
    if ((e = rebin(ctx, &p)) != NULL) {
        e->units++;
        T_CHECK(gm_check(ctx) != 0);
        e->units--;
    }
    e = gm__tls_tc ? gm__tc_find(gm__tls_tc, (uintptr_t)q) : NULL; /* handed out */
    T_CHECK(e != NULL);
    if (e) {
        keep = e->bin;
        e->bin = (keep + 1) % GM__TC_BINS;
        T_CHECK(gm_check(ctx) != 0);
        e->bin = keep;
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, q));
    if (rebin(ctx, &p)) {
        T_OK(gm_alloc(ctx, &q, 4096, NULL)); /* the binned block, at the bin's address */
        T_CHECK(q == p);
        T_OK(gm_free(ctx, q));
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* One thread holding more small blocks than its table takes (65,536 of
   131,072 slots): the blocks past it are served through the lock, and
   everything stays exact (gm_check, statistics, frees of every block,
   some through the cache and some through the lock). */
static void test_table_limit(void) {
    enum { N = 70000 };
    gm_context* ctx = make(1, 0);
    gm_stats st;
    void** v = (void**)calloc(N, sizeof *v);
    int i;
    T_CHECK(v != NULL);
    for (i = 0; i < N && v; i++)
        if (gm_alloc(ctx, &v[i], 512, NULL) != GM_OK) break;
    T_EQ(i, N);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < N && v; i += 2) T_OK(gm_free(ctx, v[i]));
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < N && v; i += 2) T_OK(gm_alloc(ctx, &v[i], 512, NULL));
    for (i = 0; i < N && v; i++) T_OK(gm_free(ctx, v[i]));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.allocation[0].current, 0);
    T_EQ(st.allocation[0].peak, N);
    free(v);
    T_OK(gm_shutdown(ctx));
}

/* Widening (gm__tc_widen): two threads allocating large blocks on one
   context wait on each other for the lock, so a context whose
   thread_cache_max was not set lets its caches keep blocks of up to
   tc_wide once that happened GM__TC_WIDEN_AFTER times. Statistics and
   gm_check stay exact across it. A thread_cache_max asked for stays, and
   a lone thread that waits for another holder of the lock (the tiered
   manager's threads) widens nothing. */
typedef struct wide_arg {
    gm_context* ctx;
    int* go;
    double until; /* t_now() */
    long pairs, after; /* pairs run; pairs run once the caches were wide */
    int err;
} wide_arg;
static void* wide_worker(void* a) {
    wide_arg* w = (wide_arg*)a;
    __atomic_add_fetch(w->go, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(w->go, __ATOMIC_ACQUIRE) < 2) {}
    while (w->after < 2000 && t_now() < w->until) {
        void* p;
        int k;
        for (k = 0; k < 100; k++) {
            size_t n = (k & 1 ? 8 : 12) * MiB;
            if (gm_alloc(w->ctx, &p, n, NULL) != GM_OK || gm_free(w->ctx, p) != GM_OK) w->err++;
            w->pairs++;
            if (__atomic_load_n(&w->ctx->tc_max, __ATOMIC_RELAXED) > MiB) w->after++;
        }
    }
    return NULL;
}
static void wide_run(gm_context* ctx, double seconds, wide_arg* w) {
    pthread_t th[2];
    int go = 0, i;
    for (i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].ctx = ctx;
        w[i].go = &go;
        w[i].until = t_now() + seconds;
        pthread_create(&th[i], NULL, wide_worker, &w[i]);
    }
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    T_EQ(w[0].err + w[1].err, 0);
}
static void* lock_holder(void* a) {
    gm_context* ctx = (gm_context*)a;
    int i;
    for (i = 0; i < 400; i++) {
        pthread_mutex_lock(&ctx->mu);
        usleep(500);
        pthread_mutex_unlock(&ctx->mu);
        usleep(100);
    }
    return NULL;
}
static void test_widen(void) {
    gm_context* ctx = make(1, 0);
    wide_arg w[2];
    gm_stats st;
    pthread_t th;
    void* p;
    int i;
    size_t want = ctx->budget / 32 >= 64 * MiB ? 64 * MiB : ctx->budget / 32 / 512 * 512;
    T_EQ(ctx->tc_wide, want > MiB ? want : 0);
    T_EQ(gm_query_desc(ctx).thread_cache_max, MiB);
    if (want < 12 * MiB) { /* a device too small for the pairs below (sim's is 16 GiB) */
        T_OK(gm_shutdown(ctx));
        return;
    }
    wide_run(ctx, 30, w);
    if (!T_CHECK(ctx->tc_max == want && w[0].after + w[1].after > 0))
        printf("  (not widened after %ld and %ld pairs: %u waits counted)\n", w[0].pairs, w[1].pairs, ctx->tc_contended);
    printf("caches widened: %ld and %ld pairs in all, %ld and %ld of them after\n", w[0].pairs, w[1].pairs, w[0].after, w[1].after);
    T_EQ(ctx->tc_lim, want);
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.allocation[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_ALL].allocated, w[0].pairs + w[1].pairs);
    T_EQ(st.allocation[GM_STAT_ALL].freed, w[0].pairs + w[1].pairs);
    T_EQ(st.requested_bytes[GM_STAT_ALL].current, 0);
    T_EQ(st.allocation[GM_STAT_LARGE_POOL].allocated, w[0].pairs + w[1].pairs);
    T_EQ(gm_check(ctx), 0);
    /* this thread's pair is its cache's now: a second of the same size
       reuses the block without the lock */
    T_OK(gm_alloc(ctx, &p, 8 * MiB, NULL));
    T_OK(gm_free(ctx, p));
    {
        void* q;
        T_OK(gm_alloc(ctx, &q, 8 * MiB, NULL));
        T_EQ(q, p);
        T_EQ(gm__tc_get(ctx, 0) != NULL, 1);
        T_OK(gm_free(ctx, q));
        T_EQ(gm__tc_get(ctx, 0)->cached, 8 * MiB);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_get_stats(ctx, &st));
    T_EQ(st.reserved_bytes[GM_STAT_ALL].current, 0);
    T_OK(gm_shutdown(ctx));

    /* widened on a 1 GiB budget (32 MiB blocks at most), an idle thread's
       cached large blocks come back when a request needs their room */
    ctx = make(1, 1024 * MiB);
    T_EQ(ctx->tc_wide, 32 * MiB);
    wide_run(ctx, 30, w);
    T_EQ(ctx->tc_max, 32 * MiB);
    {
        idle_arg x;
        void* big;
        x.ctx = ctx;
        x.size = 24 * MiB; /* in its widened cache */
        x.n = 2;
        t_gate_init(&x.filled);
        t_gate_init(&x.done);
        pthread_create(&th, NULL, idle_holder, &x);
        t_gate_wait(&x.filled);
        {
            size_t held = 0;
            gm__tcache* tc;
            pthread_mutex_lock(&ctx->mu);
            for (tc = ctx->tcs; tc; tc = tc->next) held += tc->cached;
            pthread_mutex_unlock(&ctx->mu);
            T_EQ(held, 48 * MiB);
        }
        T_OK(gm_get_stats(ctx, &st));
        T_EQ(st.allocation[GM_STAT_ALL].current, 0); /* cached blocks count as freed */
        T_OK(gm_alloc(ctx, &big, 1000 * MiB, NULL)); /* needs the idle thread's blocks back */
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_free(ctx, big));
        t_gate_open(&x.done);
        pthread_join(th, NULL);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));

    /* a size asked for stays, the same run or not */
    ctx = make_max(1, 0, MiB);
    T_EQ(ctx->tc_wide, 0);
    wide_run(ctx, 0.5, w);
    T_EQ(ctx->tc_max, MiB);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));

    /* none with expandable segments, nor on a budget whose 1/32 is 1 MiB */
    {
        gm_desc d = t_desc();
        d.expandable = GM_TOGGLE_ON;
        ctx = t_setup(d);
        T_EQ(ctx->tc_wide, 0);
        T_OK(gm_shutdown(ctx));
    }
    ctx = make(1, 32 * MiB);
    T_EQ(ctx->tc_wide, 0);
    T_OK(gm_shutdown(ctx));

    /* a lone thread whose requests wait for another holder of the lock */
    ctx = make(1, 0);
    pthread_create(&th, NULL, lock_holder, ctx);
    for (i = 0; i < 4000; i++) {
        T_OK(gm_alloc(ctx, &p, 8 * MiB, NULL));
        T_OK(gm_free(ctx, p));
    }
    pthread_join(th, NULL);
    T_CHECK(ctx->tc_contended <= 1);
    T_EQ(ctx->tc_max, MiB);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A block over the cache's cap (with a small budget the cap, 1/64 of it,
   is under the 1 MiB the caches serve) is not adopted, and its free leaves
   the bins as they were; so is one adopted before the cap fell (a lower
   budget). Before, each free of such a block gave back every bin of the
   cache, looking for room it could never have, and took the lock twice. */
static void test_over_cap(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__tcache* tc;
    void *s[4], *big;
    size_t cached;
    int i, pass;
    for (pass = 0; pass < 2; pass++) {
        d.device_budget = pass ? 256 * MiB : 32 * MiB;
        d.thread_cache = GM_TOGGLE_ON;
        ctx = t_setup(d);
        T_OK(gm_alloc(ctx, &big, MiB, NULL)); /* pass 1: adopted under a cap of 4 MiB, freed under 512 KiB */
        tc = gm__tc_get(ctx, 0);
        if (!T_CHECK(tc != NULL)) return;
        T_EQ(gm__tc_handed(gm__tc_find(tc, (uintptr_t)big)), pass); /* pass 0: not adopted */
        if (pass) T_OK(gm_set_budget(ctx, 32 * MiB));
        T_CHECK(tc->cap < MiB);
        for (i = 0; i < 4; i++) T_OK(gm_alloc(ctx, &s[i], 4096, NULL));
        for (i = 0; i < 4; i++) T_OK(gm_free(ctx, s[i]));
        cached = tc->cached;
        T_EQ(cached, 4 * 4096);
        T_OK(gm_free(ctx, big));
        T_EQ(tc->cached, cached); /* the bins stay */
        T_EQ(gm_free(ctx, big), GM_ERR_DOUBLE_FREE);
        T_EQ(gm_check(ctx), 0);
        {
            gm_stats st;
            T_OK(gm_get_stats(ctx, &st));
            T_EQ(st.allocated_bytes[GM_STAT_ALL].current, 0);
        }
        T_OK(gm_shutdown(ctx));
    }
}

int main(void) {
    test_reuse();
    test_peak();
    test_stats_match(0);
    test_stats_match(64 * MiB);
    test_two_contexts();
    test_big_marks();
    test_cache_max_option();
    test_misuse();
    test_table_entries();
    test_check_records();
    test_table_limit();
    test_cross_thread(0, 0);
    test_cross_thread(1, 0);
    test_cross_thread(0, 1);
    test_idle_steal();
    test_exit_and_shutdown();
    test_double_free_race();
    test_double_free_race_cached();
    test_producer_consumer();
    test_locked_changes_fold();
    test_widen();
    test_over_cap();
    return t_done();
}
