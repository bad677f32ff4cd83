/* Expandable segments: reserved memory follows live memory, a budget is
   used to the page, holes are given back and reused at the end, pages are
   never unmapped under a stream still using them, and failures of the
   backend leave everything consistent. Sim only (the CUDA backend keeps
   classic segments and says so). */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)

#define st t_stats

static gm_context* exp_ctx(size_t budget) {
    gm_desc d = t_desc();
    d.expandable = GM_TOGGLE_ON;
    d.device_budget = budget;
    return t_setup(d);
}

static void test_follows_live(void) {
    gm_context* ctx = exp_ctx(0);
    void* p[8];
    gm_stats s;
    int i;
    T_EQ(gm_query_desc(ctx).expandable, GM_TOGGLE_ON);
    for (i = 0; i < 8; i++) T_OK(gm_alloc(ctx, &p[i], 3 * MiB, NULL)); /* 24 MiB in 12 pages */
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(24 * MiB));
    T_EQ(s.segment[GM_STAT_ALL].current, 1); /* one range for the large pool */
    T_EQ(s.inactive_split[GM_STAT_ALL].current, 0);
    for (i = 1; i < 8; i++) T_EQ((char*)p[i] - (char*)p[i - 1], (long long)(3 * MiB)); /* packed */
    T_EQ(gm_check(ctx), 0);
    {
        void* small;
        T_OK(gm_alloc(ctx, &small, 1000, NULL)); /* the small pool has its own range */
        s = st(ctx);
        T_EQ(s.reserved_bytes[GM_STAT_SMALL_POOL].current, (int64_t)(2 * MiB));
        T_EQ(s.segment[GM_STAT_ALL].current, 2);
        T_OK(gm_free(ctx, small));
    }
    for (i = 0; i < 8; i++) T_OK(gm_free(ctx, p[i]));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_empty_cache(ctx));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0); /* every page went back */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A hole pattern that classic segments cannot reuse: eight 8 MiB blocks
   fill the budget; every other one is freed; a 32 MiB block needs
   contiguous memory. The idle pages go back and come again at the end. */
static void test_holes_reused(void) {
    gm_context* ctx = exp_ctx(64 * MiB);
    void *p[8], *big, *x;
    gm_stats s;
    int i;
    for (i = 0; i < 8; i++) T_OK(gm_alloc(ctx, &p[i], 8 * MiB, NULL));
    T_EQ(gm_alloc(ctx, &x, 512, NULL), GM_ERR_OUT_OF_MEMORY); /* the budget, to the page */
    for (i = 0; i < 8; i += 2) T_OK(gm_free(ctx, p[i]));
    T_OK(gm_alloc(ctx, &big, 32 * MiB, NULL));
    s = st(ctx);
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].peak <= (int64_t)(64 * MiB));
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(64 * MiB));
    T_EQ(s.num_ooms, 1);
    T_EQ(gm_check(ctx), 0);
    if (t_sim) { /* the live bytes survived the pages around them going away */
        memset(big, 0x7e, 32 * MiB);
        for (i = 1; i < 8; i += 2) memset(p[i], i, 8 * MiB);
        T_EQ(((unsigned char*)big)[32 * MiB - 1], 0x7e);
    }
    T_OK(gm_free(ctx, big));
    for (i = 1; i < 8; i += 2) T_OK(gm_free(ctx, p[i]));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));

    /* classic segments (20 MiB for these requests) do not even fit the
       eight blocks in the same budget */
    {
        gm_desc d = t_desc();
        int n = 0;
        d.device_budget = 64 * MiB;
        ctx = t_setup(d);
        while (n < 8 && gm_alloc(ctx, &p[n], 8 * MiB, NULL) == GM_OK) n++;
        T_CHECK(n < 8);
        while (n) T_OK(gm_free(ctx, p[--n]));
        T_OK(gm_shutdown(ctx));
    }
}

/* Pages idled by a free on a busy stream are not unmapped until that
   stream is past the free: the allocation on another stream waits. */
static void test_unmap_waits_for_stream(void) {
    gm_context* ctx = exp_ctx(16 * MiB);
    gm_stream s, t;
    t_gate g;
    void *p, *q;
    unsigned char* host = (unsigned char*)malloc(16 * MiB);
    double t0;
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_alloc(ctx, &p, 16 * MiB, s));
    memset(host, 0x11, 16 * MiB);
    /* from pageable memory: the copy may return only once done (a GPU's
       does), so it goes before the gate */
    T_OK(gm_memcpy_async(ctx, p, host, 16 * MiB, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g)); /* p's stream stays busy */
    T_OK(gm_free(ctx, p));
    t0 = t_now();
    t_open_later(&g, 150);
    T_OK(gm_alloc(ctx, &q, 16 * MiB, t)); /* needs p's pages */
    T_CHECK(g.open && t_now() >= g.opened_at);
    T_CHECK(t_now() - t0 >= 0.14);
    T_EQ(st(ctx).num_ooms, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, q));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 1);
    free(host);
}

static void test_faults(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *p, *other;
    if (!t_sim) return; /* the sim's fault injection and capacity */
    d.expandable = GM_TOGGLE_ON;
    d.sim.capacity = 64 * MiB;
    ctx = t_setup(d);
    /* a one-shot refusal to map is retried by the ladder */
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DEVICE_ALLOC, 1));
    T_OK(gm_alloc(ctx, &p, 10 * MiB, NULL));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, p));
    /* a device held by someone else: a clean out-of-memory, nothing lost */
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_raw_alloc(ctx, &other, 40 * MiB));
    T_OK(gm_alloc(ctx, &p, 20 * MiB, NULL));
    t_last_log[0] = 0;
    T_EQ(gm_alloc(ctx, &other, 8 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(strstr(t_last_log, "out of memory") != NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &p, 24 * MiB, NULL)); /* what fits still works */
    T_OK(gm_free(ctx, p));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_snapshot_and_options(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void* p;
    char buf[4096];
    d.conf = "expandable:on";
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).expandable, GM_TOGGLE_ON);
    T_OK(gm_alloc(ctx, &p, 3 * MiB, NULL));
    gm_snapshot(ctx, buf, sizeof buf);
    T_CHECK(strstr(buf, "\"expandable\":true") != NULL);
    T_CHECK(strstr(buf, "\"size\":4194304,\"mapped\":4194304") != NULL); /* clipped to the mapped pages */
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
    /* caching:off wins: expandable needs the cache */
    d.conf = "expandable:on,caching:off";
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &p, 3 * MiB, NULL));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, (int64_t)(3 * MiB));
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
}

/* Reserved memory at its peak: a request whose best-fit hole starts on
   unmapped pages but ends on pages a free left idle lands at the end
   (nothing mapped, nothing unmapped), and idle pages given back together
   go in one backend call. */
static void test_no_churn(void) {
    gm_context* ctx = exp_ctx(0);
    void *a, *b, *d, *c;
    gm_stats s0, s;
    T_OK(gm_alloc(ctx, &a, 4 * MiB, NULL)); /* pages 0-1 */
    T_OK(gm_alloc(ctx, &b, 4 * MiB, NULL)); /* pages 2-3 */
    T_OK(gm_alloc(ctx, &d, 2 * MiB, NULL)); /* page 4 */
    T_OK(gm_free(ctx, a));
    s0 = st(ctx);
    T_OK(gm_empty_cache(ctx)); /* pages 0-1 go back, in one call */
    s = st(ctx);
    T_EQ(s.num_pages_unmapped - s0.num_pages_unmapped, 2);
    T_EQ(s.num_device_free - s0.num_device_free, 1);
    T_OK(gm_free(ctx, b)); /* pages 2-3 idle: the hole is pages 0-3, mapped at its end only */
    T_OK(gm_reset_peak_stats(ctx)); /* reserved memory is at its peak */
    s0 = st(ctx);
    T_OK(gm_alloc(ctx, &c, 4 * MiB, NULL));
    s = st(ctx);
    T_EQ((char*)c, (char*)b);
    T_EQ(s.num_pages_mapped, s0.num_pages_mapped);
    T_EQ(s.num_pages_unmapped, s0.num_pages_unmapped);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, s0.reserved_bytes[GM_STAT_ALL].current);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, c));
    T_OK(gm_free(ctx, d));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* The page tables are made as pages are used: a range of 128 GiB of
   address space (a 64 GiB budget) costs host memory for the leaves its
   blocks touch, not for every page. A block across the boundary of two leaves
   maps (and unmaps) in one backend call per leaf, and the checker
   recounts both. */
static void test_tables_follow_use(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm__seg* sg;
    gm__vseg* v;
    gm_stats s0, s;
    void *a, *b, *c;
    size_t leaf;
    if (!t_sim) return; /* a device of 64 GiB */
    d.expandable = GM_TOGGLE_ON;
    d.sim.capacity = (size_t)64 << 30;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &a, 3 * MiB, NULL));
    sg = ctx->ss[0].vseg[1];
    T_CHECK(sg != NULL && sg->va != NULL);
    if (!sg || !sg->va) {
        gm_shutdown(ctx);
        return;
    }
    v = sg->va;
    leaf = (size_t)1 << v->pg.shift;
    T_CHECK(v->npages >= (size_t)1 << 16); /* 128 GiB in 2 MiB pages: 64 leaves */
    T_EQ(v->pg.made, 1);
    T_CHECK(v->qcap <= leaf);
    /* up to the end of the first leaf, then a block across into the second */
    T_OK(gm_alloc(ctx, &b, leaf * v->gran - 5 * MiB, NULL)); /* from 3 MiB to the start of the leaf's last page */
    s0 = st(ctx);
    T_OK(gm_alloc(ctx, &c, 4 * MiB, NULL)); /* that page and the next leaf's first */
    s = st(ctx);
    T_EQ((char*)c - (char*)b, (long long)(leaf * v->gran - 5 * MiB));
    T_EQ(v->pg.made, 2);
    T_EQ(s.num_pages_mapped - s0.num_pages_mapped, 2);
    T_EQ(s.num_device_alloc - s0.num_device_alloc, 2); /* one call per leaf */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    T_OK(gm_free(ctx, c));
    s0 = st(ctx);
    T_OK(gm_empty_cache(ctx));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0);
    T_EQ(s.num_pages_unmapped - s0.num_pages_unmapped, (long long)leaf + 1);
    T_EQ(s.num_device_free - s0.num_device_free, 2); /* one run, one call per leaf */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Thread caches with expandable segments: a small block freed and asked
   for again comes back from the thread's cache, and a request through the
   lock gives the thread's cached blocks back first, so that their pages
   are idle when it maps (the cache does not raise reserved memory's
   peak). */
static void test_thread_cache(void) {
    gm_context* ctx = exp_ctx(0);
    void *a, *a2, *big;
    gm__tcache* tc;
    T_OK(gm_alloc(ctx, &a, 1000, NULL));
    T_OK(gm_free(ctx, a));
    tc = ctx->tcs;
    T_CHECK(!GM__TC || (tc != NULL && tc->cached == gm__round_req(1000))); /* one block binned */
    T_OK(gm_alloc(ctx, &a2, 1000, NULL));
    T_EQ((char*)a2, (char*)a);
    T_OK(gm_free(ctx, a2));
    T_OK(gm_alloc(ctx, &big, 8 * MiB, NULL));
    T_CHECK(!tc || tc->cached == 0);
    /* its page was idle, and reserved memory was growing past its peak: it went back first */
    T_EQ(st(ctx).reserved_bytes[GM_STAT_SMALL_POOL].current, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, big));
    T_OK(gm_empty_cache(ctx));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A large request cannot use the thread's cached small blocks (they lie
   in the small pool): where its pages are mapped already, it leaves them
   cached, for the next small request to take without the lock. It gave
   them back at every large request once, and the loop cached them again. */
static void test_large_leaves_cache(void) {
    gm_context* ctx = exp_ctx(0);
    void *a, *a2, *big;
    gm__tcache* tc;
    T_OK(gm_alloc(ctx, &a, 1000, NULL));
    T_OK(gm_alloc(ctx, &big, 8 * MiB, NULL)); /* both pools' pages mapped at the peak */
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, big));
    tc = ctx->tcs;
    T_CHECK(!GM__TC || (tc != NULL && tc->cached == gm__round_req(1000)));
    T_OK(gm_alloc(ctx, &big, 8 * MiB, NULL)); /* its pages idle and mapped: nothing to map */
    T_CHECK(!GM__TC || (tc != NULL && tc->cached == gm__round_req(1000)));
    T_OK(gm_alloc(ctx, &a2, 1000, NULL)); /* from the cache */
    T_EQ((char*)a2, (char*)a);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, a2));
    T_OK(gm_free(ctx, big));
    T_OK(gm_empty_cache(ctx));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Blocks of up to three leaves of the page tables (a leaf is 1024 pages,
   2 GiB), freed in random order, some on a second stream, with the
   budget's trim and gm_empty_cache between: a block marks the pages
   inside it and counts users on its first and last only, and the checker,
   recounting both from the blocks after every step, agrees. */
static void test_wide_blocks(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s2 = NULL;
    void* p[12] = {0};
    int i, wide = 0;
    if (!t_sim) return; /* a device of 64 GiB */
    d.expandable = GM_TOGGLE_ON;
    d.sim.capacity = (size_t)64 << 30;
    d.device_budget = (size_t)24 << 30;
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s2));
    for (i = 0; i < 400; i++) {
        int k = (int)(t_rand() % 12);
        if (p[k]) {
            T_OK(gm_free(ctx, p[k]));
            p[k] = NULL;
        } else {
            unsigned long long r = t_rand();
            size_t size = r % 4 == 0 ? (size_t)(r >> 8) % (6ull << 30) + 1 : (size_t)(r >> 8) % (9 * MiB) + 1;
            gm_result res = gm_alloc(ctx, &p[k], size, k % 3 == 0 ? s2 : NULL);
            T_CHECK(res == GM_OK || res == GM_ERR_OUT_OF_MEMORY);
            if (res != GM_OK) p[k] = NULL;
            wide += res == GM_OK && size > ((size_t)2 << 30);
        }
        if (i % 50 == 49) T_OK(gm_empty_cache(ctx));
        if (gm_check(ctx) != 0) {
            T_CHECK(!"gm_check after a step");
            break;
        }
    }
    T_CHECK(wide >= 10); /* blocks across a leaf's boundary */
    for (i = 0; i < 12; i++)
        if (p[i]) T_OK(gm_free(ctx, p[i]));
    T_OK(gm_stream_synchronize(ctx, s2));
    T_OK(gm_empty_cache(ctx));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s2));
    T_OK(gm_shutdown(ctx));
}

/* gc_threshold with expandable segments: below reserved memory's peak
   (so gm__va_keep asks nothing), a request that maps new pages past the
   threshold first gives back idle pages, as many as bring it to the
   threshold; without a threshold they stay. */
static void test_gc_threshold(void) {
    int gc;
    for (gc = 0; gc < 2; gc++) {
        gm_desc d = t_desc();
        gm_context* ctx;
        void *x, *a, *c, *e;
        d.expandable = GM_TOGGLE_ON;
        d.device_budget = 64 * MiB;
        d.gc_threshold = gc ? 0.5 : 0;
        ctx = t_setup(d);
        T_OK(gm_alloc(ctx, &x, 48 * MiB, NULL)); /* the peak: 48 MiB */
        T_OK(gm_free(ctx, x));
        T_OK(gm_empty_cache(ctx));
        T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
        T_OK(gm_alloc(ctx, &c, 2 * MiB, NULL));
        T_OK(gm_free(ctx, a)); /* a 20 MiB hole of idle pages before c */
        T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, (long long)(22 * MiB));
        T_OK(gm_alloc(ctx, &e, 24 * MiB, NULL)); /* past c: 46 MiB, under the peak, past the threshold's 32 */
        T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, (long long)(gc ? 32 * MiB : 46 * MiB)); /* to the threshold, no lower */
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_free(ctx, c));
        T_OK(gm_free(ctx, e));
        T_OK(gm_shutdown(ctx));
    }
}

/* desc.expandable_page: rounded up to a multiple of the granularity and
   reported so; every mapping is whole pages of it; a random walk under a
   budget of a few pages keeps the invariants (gm_check after each step),
   and every page goes back. A bad value in the options is a warning and
   the default. */
static void test_page_size(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void* p[24];
    gm_stats s;
    size_t pg;
    int i, k, fails = 0;
    memset(p, 0, sizeof p);
    d.conf = "expandable:on,expandable_page:5M";
    d.device_budget = 60 * MiB;
    ctx = t_setup(d);
    pg = gm_query_desc(ctx).expandable_page;
    T_EQ(pg, 6 * MiB); /* 5 MiB, up to a multiple of 2 MiB */
    T_OK(gm_alloc(ctx, &p[0], 1 * MiB, NULL)); /* the large pool: one page */
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)pg);
    T_EQ(s.num_pages_mapped, 1);
    T_OK(gm_alloc(ctx, &p[1], 7 * MiB, NULL)); /* 7 MiB more: whole pages, at most three in all */
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current % (int64_t)pg, 0);
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].current <= (int64_t)(3 * pg));
    T_OK(gm_free(ctx, p[0]));
    T_OK(gm_free(ctx, p[1]));
    p[0] = p[1] = NULL;
    for (k = 0; k < 3000; k++) {
        i = (int)(t_rand() % 24);
        if (p[i]) {
            T_OK(gm_free(ctx, p[i]));
            p[i] = NULL;
        } else {
            size_t n = (size_t)(t_rand() % (6 * MiB)) + 1;
            gm_result r = gm_alloc(ctx, &p[i], n, NULL);
            if (r != GM_OK) {
                fails += r != GM_ERR_OUT_OF_MEMORY;
                p[i] = NULL;
            }
        }
        if (gm_check(ctx) != 0) {
            T_CHECK(!"gm_check failed in the walk");
            break;
        }
        s = st(ctx);
        if (s.reserved_bytes[GM_STAT_LARGE_POOL].current % (int64_t)pg) {
            T_CHECK(!"reserved memory of the large pool is not whole pages");
            break;
        }
    }
    T_EQ(fails, 0);
    for (i = 0; i < 24; i++)
        if (p[i]) T_OK(gm_free(ctx, p[i]));
    T_OK(gm_empty_cache(ctx));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
    T_OK(gm_shutdown(ctx));
    /* out of range: the default, with a warning */
    d = t_desc();
    d.conf = "expandable:on,expandable_page:2G";
    t_log_count = 0;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).expandable_page, 2 * MiB);
    T_CHECK(t_log_count > 0);
    T_OK(gm_shutdown(ctx));
    /* set in the desc past 1 GiB: the default, with a warning */
    d = t_desc();
    d.expandable = GM_TOGGLE_ON;
    d.expandable_page = (size_t)-1;
    t_log_count = 0;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).expandable_page, 2 * MiB);
    T_CHECK(t_log_count > 0);
    T_OK(gm_shutdown(ctx));
    /* classic segments: no page */
    ctx = t_setup(t_desc());
    T_EQ(gm_query_desc(ctx).expandable_page, 0);
    T_OK(gm_shutdown(ctx));
}

/* A training loop shaped like a transformer's step, replayed five times
   on one context: weights live throughout; the forward pass keeps three
   activations per layer (sizes varying by layer) and frees a temporary;
   the backward pass, in reverse, makes a gradient and a temporary per
   layer and frees that layer's activations; the optimizer makes and frees
   a few buffers. After the second step the pages are in place: the later
   steps map and unmap nothing (on a GPU each page is driver calls of tens
   of microseconds, every step), and reserved memory stays within a
   quarter of the peak of live memory. */
static void test_steady_loop(void) {
    enum { L = 24 };
    void *w[L], *act[L][3], *g[L], *tmp, *opt[3];
    gm_context* ctx = exp_ctx(0);
    gm_stats s;
    int64_t moved2 = 0;
    int l, k, step;
    for (l = 0; l < L; l++) T_OK(gm_alloc(ctx, &w[l], (size_t)(4 + l % 3) * MiB + 4096 * (size_t)l, NULL));
    for (step = 0; step < 5; step++) {
        for (l = 0; l < L; l++) {
            for (k = 0; k < 3; k++) T_OK(gm_alloc(ctx, &act[l][k], (size_t)(k + 1 + (l * 7 + k) % 5) * MiB + 65536 * (size_t)k, NULL));
            T_OK(gm_alloc(ctx, &tmp, (size_t)(3 + l % 4) * MiB + 12345, NULL));
            T_OK(gm_free(ctx, tmp));
        }
        for (l = L - 1; l >= 0; l--) {
            T_OK(gm_alloc(ctx, &g[l], (size_t)(4 + l % 3) * MiB + 4096 * (size_t)l, NULL));
            T_OK(gm_alloc(ctx, &tmp, (size_t)(5 + l % 2) * MiB + 777, NULL));
            for (k = 2; k >= 0; k--) T_OK(gm_free(ctx, act[l][k]));
            T_OK(gm_free(ctx, tmp));
        }
        for (k = 0; k < 3; k++) T_OK(gm_alloc(ctx, &opt[k], (size_t)(2 + k) * MiB, NULL));
        for (k = 0; k < 3; k++) T_OK(gm_free(ctx, opt[k]));
        for (l = 0; l < L; l++) T_OK(gm_free(ctx, g[l]));
        T_EQ(gm_check(ctx), 0);
        s = st(ctx);
        if (step == 1) moved2 = s.num_pages_mapped + s.num_pages_unmapped;
    }
    s = st(ctx);
    T_CHECK(moved2 > 0);
    T_EQ(s.num_pages_mapped + s.num_pages_unmapped, moved2); /* nothing after the second step */
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].peak <= s.allocated_bytes[GM_STAT_ALL].peak / 4 * 5);
    for (l = 0; l < L; l++) T_OK(gm_free(ctx, w[l]));
    T_OK(gm_shutdown(ctx));
}

/* One pass of random lifetimes (a packing problem's shape: blocks of
   64 KiB to 16 MiB, each freed a random while after it was made): the
   allowance that stops a loop's churn must not let reserved memory climb
   away from live memory (it once ratcheted on its own peak: 1.75x the
   optimum on minimalloc's problems). */
static void test_single_pass_bounded(void) {
    enum { N = 3000, LIVE = 64 };
    void* p[LIVE];
    gm_context* ctx = exp_ctx(0);
    gm_stats s;
    unsigned long long seed = 777;
    int i, k;
    memset(p, 0, sizeof p);
    for (i = 0; i < N; i++) {
        k = (int)(t_rand_r(&seed) % LIVE);
        if (p[k]) T_OK(gm_free(ctx, p[k]));
        T_OK(gm_alloc(ctx, &p[k], 65536 + (size_t)(t_rand_r(&seed) % (16 * MiB)), NULL));
    }
    T_EQ(gm_check(ctx), 0);
    s = st(ctx);
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].peak <= s.allocated_bytes[GM_STAT_ALL].peak / 100 * 110);
    for (k = 0; k < LIVE; k++)
        if (p[k]) T_OK(gm_free(ctx, p[k]));
    T_OK(gm_shutdown(ctx));
}

/* Each case timed: on a GPU every page is a driver call of tens of
   microseconds, and a slow case should name itself. */
#define T_RUN(fn)                                                              \
    do {                                                                       \
        double t0_ = t_now();                                                  \
        fn();                                                                  \
        printf("%s: %.1f s\n", #fn, t_now() - t0_);                            \
        fflush(stdout);                                                        \
    } while (0)

int main(void) {
    T_RUN(test_follows_live);
    T_RUN(test_holes_reused);
    T_RUN(test_no_churn);
    T_RUN(test_unmap_waits_for_stream);
    T_RUN(test_faults);
    T_RUN(test_snapshot_and_options);
    T_RUN(test_tables_follow_use);
    T_RUN(test_thread_cache);
    T_RUN(test_large_leaves_cache);
    T_RUN(test_wide_blocks);
    T_RUN(test_gc_threshold);
    T_RUN(test_page_size);
    T_RUN(test_steady_loop);
    T_RUN(test_single_pass_bounded);
    return t_done();
}
