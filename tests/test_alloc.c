/* Caching allocator semantics: sizes, rounding, reuse, split and coalesce,
   budgets, statistics, options and bad input. */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)

#define st t_stats

static void test_edge_sizes(void) {
    gm_context* ctx = t_setup(t_desc());
    size_t sizes[] = {1, 511, 512, 513, MiB - 1, MiB, MiB + 1, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 64 * MiB + 3};
    size_t want[] = {512, 512, 512, 1024, MiB, MiB, MiB + 512, 10 * MiB - 512 + 512, 10 * MiB, 10 * MiB + 512, 64 * MiB + 512};
    void* p[11];
    size_t i, bs;
    gm_stats s;
    void* z = (void*)1;
    T_OK(gm_alloc(ctx, &z, 0, NULL));
    T_CHECK(z == NULL);
    T_OK(gm_free(ctx, NULL));
    for (i = 0; i < 11; i++) {
        T_OK(gm_alloc(ctx, &p[i], sizes[i], NULL));
        T_CHECK(p[i] != NULL && ((uintptr_t)p[i] % 512) == 0);
        T_OK(gm_block_size(ctx, p[i], &bs));
        T_EQ(bs, want[i]);
        T_EQ(gm_check(ctx), 0);
    }
    s = st(ctx);
    T_EQ(s.allocation[GM_STAT_ALL].current, 11);
    T_EQ(s.allocation[GM_STAT_SMALL_POOL].current, 6);  /* up to 1 MiB */
    T_EQ(s.allocation[GM_STAT_LARGE_POOL].current, 5);
    T_EQ(s.requested_bytes[GM_STAT_ALL].current,
         1 + 511 + 512 + 513 + (MiB - 1) + MiB + (MiB + 1) + (10 * MiB - 1) + 10 * MiB + (10 * MiB + 1) + 64 * MiB + 3);
    /* the small pool fits the six small requests in one 2 MiB segment? no:
       4 MiB of them; every small segment is 2 MiB */
    T_EQ(s.reserved_bytes[GM_STAT_SMALL_POOL].current % (int64_t)(2 * MiB), 0);
    /* a request of 1 MiB + 1 .. 10 MiB comes from a 20 MiB segment */
    for (i = 0; i < 11; i++) T_OK(gm_free(ctx, p[i]));
    T_EQ(gm_check(ctx), 0);
    s = st(ctx);
    T_EQ(s.allocation[GM_STAT_ALL].current, 0);
    T_EQ(s.allocated_bytes[GM_STAT_ALL].current, 0);
    T_EQ(s.inactive_split[GM_STAT_ALL].current, 0); /* all coalesced back to whole segments */
    T_EQ(s.allocation[GM_STAT_ALL].allocated, 11);
    T_EQ(s.allocation[GM_STAT_ALL].freed, 11);
    T_OK(gm_shutdown(ctx));
}

static void test_segment_sizes(void) {
    gm_context* ctx = t_setup(t_desc());
    void *a, *b, *c;
    gm_stats s;
    T_OK(gm_alloc(ctx, &a, 100, NULL));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_SMALL_POOL].current, 2 * MiB);
    T_OK(gm_alloc(ctx, &b, 2 * MiB, NULL));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_LARGE_POOL].current, 20 * MiB);
    T_OK(gm_alloc(ctx, &c, 33 * MiB, NULL));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_LARGE_POOL].current, 20 * MiB + 34 * MiB);
    T_EQ(s.segment[GM_STAT_ALL].current, 3);
    T_EQ(s.num_device_alloc, 3);
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    T_OK(gm_free(ctx, c));
    T_OK(gm_shutdown(ctx));
}

static void test_reuse_without_new_segments(void) {
    gm_context* ctx = t_setup(t_desc());
    void *p, *q;
    int i;
    gm_stats s;
    T_OK(gm_alloc(ctx, &p, 4096, NULL));
    T_OK(gm_free(ctx, p));
    for (i = 0; i < 1000; i++) {
        T_OK(gm_alloc(ctx, &q, 4096, NULL));
        if (q != p) break;
        T_OK(gm_free(ctx, q));
    }
    T_EQ(i, 1000); /* the same block every time */
    for (i = 0; i < 100; i++) {
        void* big;
        T_OK(gm_alloc(ctx, &big, 5 * MiB + (size_t)i * 512, NULL));
        T_OK(gm_free(ctx, big));
    }
    s = st(ctx);
    T_EQ(s.num_device_alloc, 2); /* one small, one large segment, reused */
    T_EQ(s.allocation[GM_STAT_ALL].allocated, 1101);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_split_and_coalesce(void) {
    gm_context* ctx = t_setup(t_desc());
    void* p[4];
    void* big;
    gm_stats s;
    int i;
    /* four 512 KiB blocks split one 2 MiB small segment exactly */
    for (i = 0; i < 4; i++) T_OK(gm_alloc(ctx, &p[i], 512 * 1024, NULL));
    s = st(ctx);
    T_EQ(s.segment[GM_STAT_ALL].current, 1);
    for (i = 1; i < 4; i++) T_EQ((char*)p[i] - (char*)p[i - 1], 512 * 1024); /* best fit, lowest address */
    /* free 1 and 2: they coalesce into one inactive split block of 1 MiB */
    T_OK(gm_free(ctx, p[1]));
    T_OK(gm_free(ctx, p[2]));
    s = st(ctx);
    T_EQ(s.inactive_split[GM_STAT_ALL].current, 1);
    T_EQ(s.inactive_split_bytes[GM_STAT_ALL].current, (int64_t)MiB);
    T_EQ(gm_check(ctx), 0);
    /* 1 MiB fits exactly in the coalesced hole */
    T_OK(gm_alloc(ctx, &big, MiB, NULL));
    T_CHECK(big == p[1]);
    s = st(ctx);
    T_EQ(s.segment[GM_STAT_ALL].current, 1);
    T_EQ(s.inactive_split[GM_STAT_ALL].current, 0);
    T_OK(gm_free(ctx, big));
    T_OK(gm_free(ctx, p[0]));
    T_OK(gm_free(ctx, p[3]));
    s = st(ctx);
    T_EQ(s.inactive_split[GM_STAT_ALL].current, 0); /* one whole free segment */
    T_EQ(s.segment[GM_STAT_ALL].current, 1);
    T_EQ(gm_check(ctx), 0);
    /* best fit picks the smallest hole, not the first */
    {
        void *a, *b, *c, *d, *e, *x;
        T_OK(gm_alloc(ctx, &a, 4096, NULL));
        T_OK(gm_alloc(ctx, &b, 8192, NULL));  /* hole of 8 KiB after free */
        T_OK(gm_alloc(ctx, &c, 4096, NULL));
        T_OK(gm_alloc(ctx, &d, 2048, NULL));  /* hole of 2 KiB after free */
        T_OK(gm_alloc(ctx, &e, 4096, NULL));
        T_OK(gm_free(ctx, b));
        T_OK(gm_free(ctx, d));
        T_OK(gm_alloc(ctx, &x, 1500, NULL));
        T_CHECK(x == d);
        T_OK(gm_free(ctx, x));
        T_OK(gm_free(ctx, a));
        T_OK(gm_free(ctx, c));
        T_OK(gm_free(ctx, e));
    }
    /* a large block is split only when more than 1 MiB remains */
    {
        void *l1, *l2;
        size_t bs = 0;
        T_OK(gm_alloc(ctx, &l1, 19 * MiB + 512, NULL)); /* 20 MiB segment, 511.5 KiB left: not split */
        T_OK(gm_block_size(ctx, l1, &bs));
        T_EQ(bs, 20 * MiB);
        s = st(ctx);
        T_EQ(s.allocated_bytes[GM_STAT_LARGE_POOL].current, (int64_t)(20 * MiB)); /* the whole block counts */
        T_EQ(s.inactive_split[GM_STAT_LARGE_POOL].current, 0);
        T_OK(gm_free(ctx, l1));
        T_OK(gm_alloc(ctx, &l1, 8 * MiB, NULL)); /* split: 12 MiB left */
        T_OK(gm_alloc(ctx, &l2, 8 * MiB, NULL));
        T_EQ((char*)l2 - (char*)l1, (long long)(8 * MiB));
        s = st(ctx);
        T_EQ(s.segment[GM_STAT_LARGE_POOL].current, 1);
        T_OK(gm_free(ctx, l1));
        T_OK(gm_free(ctx, l2));
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_budget(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *p, *q;
    gm_stats s;
    d.device_budget = 64 * MiB;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).device_budget, 64 * MiB);
    T_OK(gm_alloc(ctx, &p, 64 * MiB - 511, NULL)); /* just under: rounds to exactly the budget */
    T_EQ(gm_alloc(ctx, &q, 512, NULL), GM_ERR_OUT_OF_MEMORY);
    T_OK(gm_free(ctx, p));
    T_EQ(gm_alloc(ctx, &q, 64 * MiB + 1, NULL), GM_ERR_OUT_OF_MEMORY); /* just over */
    T_CHECK(q == NULL);
    s = st(ctx);
    T_EQ(s.num_ooms, 2);
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].peak <= (int64_t)(64 * MiB));
    /* the last 512 bytes of a budget are usable: the allocator shrinks its
       segment to fit */
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_alloc(ctx, &p, 62 * MiB, NULL));
    T_OK(gm_alloc(ctx, &q, 1000, NULL));
    {
        void* q2;
        T_EQ(gm_alloc(ctx, &q2, 2 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
        T_OK(gm_alloc(ctx, &q2, 1000, NULL));
        T_OK(gm_free(ctx, q2));
    }
    T_OK(gm_free(ctx, q));
    T_OK(gm_free(ctx, p));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));

    if (t_sim) { /* fraction of the simulated card */
        d = t_desc();
        d.sim.capacity = 1024 * MiB;
        d.device_budget_fraction = 0.25;
        ctx = t_setup(d);
        T_EQ(gm_query_desc(ctx).device_budget, 256 * MiB);
        T_OK(gm_alloc(ctx, &p, 256 * MiB, NULL));
        T_EQ(gm_alloc(ctx, &q, 1, NULL), GM_ERR_OUT_OF_MEMORY);
        T_OK(gm_free(ctx, p));
        T_OK(gm_alloc(ctx, &q, 1, NULL));
        T_OK(gm_free(ctx, q));
        T_OK(gm_shutdown(ctx));
    }
}

static void test_huge_and_distinct(void) {
    gm_context* ctx = t_setup(t_desc());
    void *p = (void*)1, *a, *b;
    gm_stats s;
    t_last_log[0] = 0;
    T_EQ(gm_alloc(ctx, &p, (size_t)1 << 50, NULL), GM_ERR_OUT_OF_MEMORY); /* 1 PiB */
    T_CHECK(p == NULL);
    T_CHECK(strstr(t_last_log, "out of memory") != NULL);
    T_EQ(gm_alloc(ctx, &p, (size_t)-1, NULL), GM_ERR_OUT_OF_MEMORY); /* no overflow in rounding */
    T_EQ(gm_alloc(ctx, &p, (size_t)-1 - 100, NULL), GM_ERR_OUT_OF_MEMORY);
    s = st(ctx);
    T_EQ(s.num_ooms, 3);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0);
    T_OK(gm_alloc(ctx, &a, 8, NULL));
    T_OK(gm_alloc(ctx, &b, 8, NULL));
    T_CHECK(a != b);
    T_CHECK((char*)b - (char*)a >= 8 || (char*)a - (char*)b >= 8);
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_bad_input(void) {
    gm_context* ctx = t_setup(t_desc());
    void *p, *q;
    int x;
    gm_stats before, after;
    T_EQ(gm_alloc(NULL, &p, 10, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_alloc(ctx, NULL, 10, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_free(NULL, &x), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_setup(NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_check(NULL), -1);
    T_EQ(gm_get_stats(NULL, &before), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_get_stats(ctx, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_record_stream(NULL, &x, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_empty_cache(NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_shutdown(NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_summary(NULL, NULL, 0), 0);
    T_OK(gm_alloc(ctx, &p, 1000, NULL));
    T_OK(gm_alloc(ctx, &q, 3000, NULL));
    before = st(ctx);
    t_log_count = 0;
    T_EQ(gm_free(ctx, &x), GM_ERR_FOREIGN_POINTER);         /* a host pointer */
    T_EQ(gm_free(ctx, (char*)p + 512), GM_ERR_FOREIGN_POINTER); /* inside a block */
    T_EQ(gm_record_stream(ctx, &x, NULL), GM_ERR_FOREIGN_POINTER);
    T_EQ(t_log_count, 3); /* each one said why */
    T_OK(gm_free(ctx, p));
    T_EQ(gm_free(ctx, p), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_free(ctx, (char*)p + 512), GM_ERR_FOREIGN_POINTER); /* inside freed memory, never handed out */
    T_EQ(gm_record_stream(ctx, p, NULL), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_block_size(ctx, p, &(size_t){0}), GM_ERR_DOUBLE_FREE);
    after = st(ctx);
    T_EQ(after.allocation[GM_STAT_ALL].current, before.allocation[GM_STAT_ALL].current - 1);
    T_EQ(gm_check(ctx), 0);
    if (t_sim) { /* a stream the backend never made, and a destroyed one */
        gm_stream s;
        T_EQ(gm_alloc(ctx, &p, 100, (gm_stream)(void*)&x), GM_ERR_INVALID_STREAM);
        T_EQ(gm_record_stream(ctx, q, (gm_stream)(void*)&x), GM_ERR_INVALID_STREAM);
        T_OK(gm_stream_create(ctx, &s));
        T_OK(gm_alloc(ctx, &p, 100, s));
        T_OK(gm_stream_destroy(ctx, s));
        T_EQ(gm_alloc(ctx, &p, 100, s), GM_ERR_INVALID_STREAM);
        T_EQ(gm_stream_destroy(ctx, s), GM_ERR_INVALID_STREAM);
        T_EQ(gm_stream_destroy(ctx, NULL), GM_ERR_INVALID_STREAM);
        T_EQ(gm_memcpy_async(ctx, &x, &x, 4, GM_COPY_HOST_TO_HOST, s), GM_ERR_INVALID_STREAM);
        T_EQ(gm_launch_host(ctx, s, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
        T_EQ(gm_memcpy_async(ctx, NULL, &x, 4, GM_COPY_HOST_TO_HOST, NULL), GM_ERR_INVALID_ARGUMENT);
        T_EQ(gm_memcpy_async(ctx, &x, &x, 4, (gm_copy_kind)99, NULL), GM_ERR_INVALID_ARGUMENT);
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_free(ctx, p)); /* a block of a destroyed stream can still be freed */
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_free(ctx, q));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_stats_and_summary(void) {
    gm_context* ctx = t_setup(t_desc());
    void *p, *q;
    gm_stats s;
    char buf[8192];
    size_t n;
    T_OK(gm_alloc(ctx, &p, 3 * MiB, NULL));
    T_OK(gm_alloc(ctx, &q, 700, NULL));
    T_OK(gm_free(ctx, p));
    s = st(ctx);
    T_EQ(s.allocated_bytes[GM_STAT_ALL].peak, (int64_t)(3 * MiB + 1024));
    T_EQ(s.allocated_bytes[GM_STAT_ALL].current, 1024);
    T_EQ(s.allocated_bytes[GM_STAT_LARGE_POOL].allocated, (int64_t)(3 * MiB));
    T_EQ(s.allocated_bytes[GM_STAT_LARGE_POOL].freed, (int64_t)(3 * MiB));
    T_EQ(s.requested_bytes[GM_STAT_SMALL_POOL].current, 700);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(22 * MiB));
    T_OK(gm_reset_peak_stats(ctx));
    s = st(ctx);
    T_EQ(s.allocated_bytes[GM_STAT_ALL].peak, 1024);
    T_OK(gm_reset_accumulated_stats(ctx));
    s = st(ctx);
    T_EQ(s.allocation[GM_STAT_ALL].allocated, 0);
    T_EQ(s.num_device_alloc, 0);
    T_EQ(s.allocation[GM_STAT_ALL].current, 1);
    n = gm_summary(ctx, buf, sizeof buf);
    T_CHECK(n > 500 && n < sizeof buf);
    T_CHECK(strlen(buf) == n);
    T_CHECK(strstr(buf, "Allocated memory") && strstr(buf, "Reserved memory") && strstr(buf, "Non-releasable"));
    T_CHECK(strstr(buf, "22.00 MiB") != NULL);
    T_EQ(gm_summary(ctx, buf, 10), n); /* truncated but terminated */
    T_EQ(strlen(buf), 9);
    T_EQ(gm_summary(ctx, NULL, 0), n);
    T_OK(gm_free(ctx, q));
    T_OK(gm_empty_cache(ctx));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0);
    T_EQ(s.segment[GM_STAT_ALL].current, 0);
    T_EQ(s.num_device_free, 2);
    T_OK(gm_shutdown(ctx));
}

static void test_options(void) {
    gm_desc d = t_desc(), q;
    gm_context* ctx;
    void* p;
    d.conf = "budget:32M, caching:off ,gc_threshold:0.5,max_split_size:64M,bogus:1,budget:xyz,log:info,max_split_size:8M,"
             "fallback:managed,host_budget:16M,fallback:maybe";
    t_log_count = 0;
    ctx = t_setup(d);
    q = gm_query_desc(ctx);
    T_EQ(q.device_budget, 32 * MiB);
    T_EQ(q.caching, GM_TOGGLE_OFF);
    T_CHECK(q.gc_threshold == 0.5);
    T_EQ(q.max_split_size, 64 * MiB);
    T_EQ(q.log_level, GM_LOG_INFO);
    T_EQ(q.fallback, GM_FALLBACK_MANAGED);
    T_EQ(q.host_budget, 16 * MiB);
    T_EQ(t_log_count, 4); /* four bad options, four warnings, no failure */
    T_OK(gm_shutdown(ctx));
    /* the desc wins over the string; fractions and percentages */
    d = t_desc();
    d.device_budget = 16 * MiB;
    d.conf = "budget:1G";
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).device_budget, 16 * MiB);
    T_OK(gm_shutdown(ctx));
    if (t_sim) {
        d = t_desc();
        d.conf = "budget:50%,sim_capacity:512M,sim_link:25G";
        ctx = t_setup(d);
        q = gm_query_desc(ctx);
        T_EQ(q.sim.capacity, 512 * MiB);
        T_EQ(q.device_budget, 256 * MiB);
        T_CHECK(q.sim.link_bytes_per_s == 25.0 * 1024 * 1024 * 1024);
        T_OK(gm_shutdown(ctx));
    }
    /* the environment fills what the desc leaves zero */
    setenv("GPUMEM_CONF", "budget:8M,nonsense", 1);
    d = t_desc();
    d.backend = t_sim ? GM_BACKEND_SIM : GM_BACKEND_CUDA;
    d.log_fn = t_log;
    t_log_count = 0;
    if (gm_setup(&ctx, &d) == GM_OK) {
        T_EQ(gm_query_desc(ctx).device_budget, 8 * MiB);
        T_EQ(t_log_count, 1);
        T_OK(gm_alloc(ctx, &p, 8 * MiB, NULL));
        T_OK(gm_free(ctx, p));
        T_OK(gm_shutdown(ctx));
    }
    unsetenv("GPUMEM_CONF");
    /* bad desc values warn and fall back */
    d = t_desc();
    d.device_budget_fraction = 3.0;
    d.gc_threshold = -1;
    t_log_count = 0;
    ctx = t_setup(d);
    T_EQ(t_log_count, 2);
    T_CHECK(gm_query_desc(ctx).gc_threshold == 0);
    T_OK(gm_shutdown(ctx));
}

static void test_caching_off(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *p, *q;
    gm_stats s;
    d.caching = GM_TOGGLE_OFF;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &p, 1000, NULL));
    T_OK(gm_alloc(ctx, &q, 3 * MiB, NULL));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(1024 + 3 * MiB)); /* exact sizes */
    T_OK(gm_free(ctx, p));
    T_OK(gm_free(ctx, q));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0); /* nothing cached */
    T_EQ(s.num_device_alloc, 2);
    T_EQ(s.num_device_free, 2);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_gc_threshold(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *a, *b, *c;
    gm_stats s;
    d.device_budget = 100 * MiB;
    d.gc_threshold = 0.5;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
    T_OK(gm_alloc(ctx, &b, 22 * MiB, NULL));
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(42 * MiB));
    /* growing by 24 MiB would pass 50 MiB: the oldest cached segment (a's)
       goes first, and only as much as needed */
    T_OK(gm_alloc(ctx, &c, 24 * MiB, NULL));
    s = st(ctx);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(46 * MiB));
    T_EQ(s.num_device_free, 1);
    T_OK(gm_free(ctx, c));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_max_split_size(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *big, *small, *p;
    gm_stats s;
    d.max_split_size = 32 * MiB;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &big, 40 * MiB, NULL));
    T_OK(gm_free(ctx, big));
    /* a small request does not take the oversize cached block */
    T_OK(gm_alloc(ctx, &small, 4 * MiB, NULL));
    T_CHECK(small != big);
    /* a big request takes it whole, unsplit */
    T_OK(gm_alloc(ctx, &p, 34 * MiB, NULL));
    T_CHECK(p == big);
    s = st(ctx);
    T_EQ(s.allocated_bytes[GM_STAT_LARGE_POOL].current, (int64_t)(4 * MiB + 40 * MiB));
    T_OK(gm_free(ctx, p));
    T_OK(gm_free(ctx, small));
    T_EQ(gm_check(ctx), 0);
    /* a request below max_split_size still splits a 20 MiB segment, so
       mid-size requests keep reusing the cache */
    {
        int i;
        gm_stats a = st(ctx);
        for (i = 0; i < 10; i++) {
            T_OK(gm_alloc(ctx, &p, 5 * MiB, NULL));
            T_OK(gm_free(ctx, p));
        }
        T_CHECK(st(ctx).num_device_alloc <= a.num_device_alloc + 1);
    }
    T_OK(gm_shutdown(ctx));
    /* 20 MiB or less would defeat the cache: refused with a warning */
    d.max_split_size = 16 * MiB;
    t_log_count = 0;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).max_split_size, 0);
    T_EQ(t_log_count, 1);
    T_OK(gm_shutdown(ctx));
}

/* Two contexts (two devices, or two users of one) share nothing. */
static void test_two_contexts(void) {
    gm_desc d = t_desc();
    gm_context *a, *b;
    void *pa, *pb;
    gm_stats sa, sb;
    d.device_budget = 32 * MiB;
    a = t_setup(d);
    d.device_budget = 64 * MiB;
    b = t_setup(d);
    T_OK(gm_alloc(a, &pa, 1000, NULL));
    T_OK(gm_alloc(b, &pb, 30 * MiB, NULL));
    T_EQ(gm_free(b, pa), GM_ERR_FOREIGN_POINTER); /* not b's */
    T_EQ(gm_free(a, pb), GM_ERR_FOREIGN_POINTER);
    sa = st(a);
    sb = st(b);
    T_EQ(sa.allocation[GM_STAT_ALL].current, 1);
    T_EQ(sb.allocation[GM_STAT_ALL].current, 1);
    T_EQ(gm_query_desc(a).device_budget, 32 * MiB);
    T_EQ(gm_query_desc(b).device_budget, 64 * MiB);
    T_OK(gm_free(a, pa));
    T_OK(gm_free(b, pb));
    T_EQ(gm_check(a), 0);
    T_EQ(gm_check(b), 0);
    T_OK(gm_shutdown(a));
    T_OK(gm_shutdown(b));
}

/* gm_set_budget: lower, memory in use stays and nothing new is reserved
   until the total is under; the cache goes back at once; raised again,
   growth resumes; never above the device. */
static void test_set_budget(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *a, *b, *c;
    d.device_budget = 64 * MiB;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &a, 4 * MiB, NULL)); /* a 20 MiB segment */
    T_OK(gm_alloc(ctx, &b, 30 * MiB, NULL)); /* a 30 MiB one */
    T_OK(gm_set_budget(ctx, 10 * MiB));
    T_EQ(gm_query_desc(ctx).device_budget, 10 * MiB);
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 50 * (int64_t)MiB); /* in use: stays */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_alloc(ctx, &c, 2 * MiB, NULL)); /* from the cache (the large segment) */
    T_OK(gm_free(ctx, c));
    T_EQ(gm_alloc(ctx, &c, 17 * MiB, NULL), GM_ERR_OUT_OF_MEMORY); /* a new segment: over */
    T_OK(gm_free(ctx, b));
    T_OK(gm_set_budget(ctx, 10 * MiB)); /* the free 30 MiB segment goes */
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 20 * (int64_t)MiB);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, a));
    T_OK(gm_set_budget(ctx, 40 * MiB));
    T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 20 * (int64_t)MiB); /* under it: kept */
    T_OK(gm_alloc(ctx, &b, 10 * MiB, NULL));
    T_OK(gm_free(ctx, b));
    T_OK(gm_set_budget(ctx, (size_t)1 << 62)); /* the device's memory at most */
    T_CHECK(gm_query_desc(ctx).device_budget < ((size_t)1 << 62));
    T_EQ(gm_set_budget(ctx, 0), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_set_budget(NULL, MiB), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    test_two_contexts();
    test_set_budget();
    test_edge_sizes();
    test_segment_sizes();
    test_reuse_without_new_segments();
    test_split_and_coalesce();
    test_budget();
    test_huge_and_distinct();
    test_bad_input();
    test_stats_and_summary();
    test_options();
    test_caching_off();
    test_gc_threshold();
    test_max_split_size();
    return t_done();
}
