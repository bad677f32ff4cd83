/* Memory the caller does not own, handles of other contexts, bad planner
   arguments and calls after shutdown: each is refused with a clear result,
   nothing changes, and gm_check sees ownership confusion. Bytes are
   checked through copies, as a GPU would need. */
#include "gm_kept.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void put(gm_context* ctx, void* dev, size_t n, unsigned char seed) {
    unsigned char* h = (unsigned char*)malloc(n);
    size_t i;
    for (i = 0; i < n; i++) h[i] = (unsigned char)(seed + i * 7);
    T_OK(gm_memcpy_async(ctx, dev, h, n, GM_COPY_HOST_TO_DEVICE, NULL));
    T_OK(gm_stream_synchronize(ctx, NULL));
    free(h);
}

static int holds(gm_context* ctx, const void* dev, size_t n, unsigned char seed) {
    unsigned char* h = (unsigned char*)malloc(n);
    size_t i, bad = 0;
    T_OK(gm_memcpy_async(ctx, h, dev, n, GM_COPY_DEVICE_TO_HOST, NULL));
    T_OK(gm_stream_synchronize(ctx, NULL));
    for (i = 0; i < n; i++) bad += h[i] != (unsigned char)(seed + i * 7);
    free(h);
    return bad == 0;
}

static gm_tensor tensor_with(gm_context* ctx, size_t n, unsigned char seed) {
    gm_tensor t;
    void* p;
    T_OK(gm_tensor_create(ctx, &t, n));
    T_OK(gm_tensor_acquire(ctx, t, NULL, &p));
    put(ctx, p, n, seed);
    T_OK(gm_tensor_release(ctx, t, NULL, 1));
    return t;
}

static int tensor_holds(gm_context* ctx, gm_tensor t, size_t n, unsigned char seed) {
    void* p;
    int ok;
    if (gm_tensor_acquire(ctx, t, NULL, &p) != GM_OK) return 0;
    ok = holds(ctx, p, n, seed);
    T_OK(gm_tensor_release(ctx, t, NULL, 0));
    return ok;
}

/* gm_free and gm_record_stream took the pointer gm_tensor_acquire returned:
   the next gm_alloc got the tensor's bytes. */
static void test_tensor_memory_refused(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_tensor t = tensor_with(ctx, 64 * KiB, 3);
    gm_stream s;
    void *p, *q;
    size_t n = 0;
    gm_stats before, after;
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tensor_acquire(ctx, t, NULL, &p));
    before = t_stats(ctx);
    t_log_count = 0;
    T_EQ(gm_free(ctx, p), GM_ERR_FOREIGN_POINTER);
    T_EQ(gm_record_stream(ctx, p, s), GM_ERR_FOREIGN_POINTER);
    T_EQ(gm_block_size(ctx, p, &n), GM_ERR_FOREIGN_POINTER);
    T_EQ(t_log_count, 3);
    T_CHECK(strstr(t_last_log, "tensor") != NULL);
    after = t_stats(ctx);
    T_EQ(after.allocation[GM_STAT_ALL].current, before.allocation[GM_STAT_ALL].current);
    T_OK(gm_alloc(ctx, &q, 64 * KiB, NULL)); /* a block of its own */
    T_CHECK(q != p);
    put(ctx, q, 64 * KiB, 99);
    T_OK(gm_tensor_release(ctx, t, NULL, 0));
    T_CHECK(tensor_holds(ctx, t, 64 * KiB, 3));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, t));
    T_CHECK(holds(ctx, q, 64 * KiB, 99)); /* the destroy freed the tensor's block, not q */
    T_OK(gm_free(ctx, q));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* gm_check sees a tensor's block in the wrong hands (white box: the
   confusion the refusal prevents, made by hand). */
static void test_check_sees_ownership(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_tensor t = tensor_with(ctx, 8 * KiB, 5);
    void* p;
    gm__block* b;
    T_OK(gm_tensor_acquire(ctx, t, NULL, &p));
    T_OK(gm_tensor_release(ctx, t, NULL, 0));
    T_EQ(gm_check(ctx), 0);
    b = (gm__block*)gm__map_get(&ctx->map, (uintptr_t)p);
    T_CHECK(b != NULL && b->owner == GM__OWN_TENSOR);
    if (b) {
        int quiet = t_log_count;
        b->owner = GM__OWN_USER; /* as if gm_free had taken it for the caller */
        b->tag = 0;
        T_CHECK(gm_check(ctx) > 0);
        T_CHECK(t_log_count > quiet);
        b->owner = GM__OWN_TENSOR;
        b->tag = t.id;
        T_EQ(gm_check(ctx), 0);
        b->tag = t.id ^ 1; /* held for another tensor */
        T_CHECK(gm_check(ctx) > 0);
        b->tag = t.id;
    }
    T_OK(gm_tensor_destroy(ctx, t));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* gm_raw_free with a pointer and size matching a segment of the cache
   unmapped memory the allocator still owned. */
static void test_raw_is_told_apart(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *p, *raw, *big;
    gm_stats st;
    gm_tensor t;
    d.host_budget = 4 * MiB;
    d.device_budget = 64 * MiB;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &p, 4 * KiB, NULL)); /* at the base of a 2 MiB segment */
    put(ctx, p, 4 * KiB, 11);
    T_EQ(gm_raw_free(ctx, p, 2 * MiB), GM_ERR_FOREIGN_POINTER);
    T_CHECK(strstr(t_last_log, "caching allocator") != NULL);
    T_EQ(gm_raw_free(ctx, p, 4 * KiB), GM_ERR_FOREIGN_POINTER);
    T_CHECK(holds(ctx, p, 4 * KiB, 11)); /* still mapped, still its bytes */
    st = t_stats(ctx);
    T_EQ(st.segment[GM_STAT_ALL].current, 1);
    T_OK(gm_raw_alloc(ctx, &raw, 3 * MiB));
    put(ctx, raw, 4 * KiB, 12);
    T_EQ(gm_free(ctx, raw), GM_ERR_FOREIGN_POINTER);
    T_CHECK(strstr(t_last_log, "gm_raw_free") != NULL);
    T_EQ(gm_record_stream(ctx, raw, NULL), GM_ERR_FOREIGN_POINTER);
    T_EQ(gm_block_size(ctx, raw, &(size_t){0}), GM_ERR_FOREIGN_POINTER);
    T_EQ(gm_raw_free(ctx, raw, 2 * MiB), GM_ERR_INVALID_ARGUMENT); /* not its size */
    T_CHECK(holds(ctx, raw, 4 * KiB, 12));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_raw_free(ctx, raw, 3 * MiB));
    T_EQ(gm_raw_free(ctx, raw, 3 * MiB), GM_ERR_FOREIGN_POINTER); /* twice */
    /* a tensor's device memory and its pinned host copy are not raw either */
    T_OK(gm_tensor_create(ctx, &t, 1 * MiB));
    T_OK(gm_tensor_acquire(ctx, t, NULL, &big));
    T_EQ(gm_raw_free(ctx, big, 1 * MiB), GM_ERR_FOREIGN_POINTER);
    T_OK(gm_tensor_release(ctx, t, NULL, 1));
    T_OK(gm_tensor_evict(ctx, t)); /* now in the pinned host pool */
    {
        gm__tier* tm = (gm__tier*)ctx->tier;
        gm__tensor* x = gm__tensor_get(ctx, t);
        T_CHECK(x && x->host_valid);
        if (x && x->host) { /* the pool's chunk base, its whole size: pinned memory, not raw */
            gm__seg* sg = x->host->seg;
            T_EQ(gm_raw_free(ctx, (void*)sg->base, sg->size), GM_ERR_FOREIGN_POINTER);
            T_EQ(gm_free(ctx, (void*)sg->base), GM_ERR_FOREIGN_POINTER);
        }
        (void)tm;
    }
    T_OK(gm_tensor_destroy(ctx, t));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, p));
    T_OK(gm_raw_alloc(ctx, &raw, 1 * MiB)); /* left for shutdown: a leak, released and logged */
    T_OK(gm_shutdown(ctx));
}

/* Freeing an address inside a free block that was never handed out said
   GM_ERR_DOUBLE_FREE. A real double free, even of a block that has since
   coalesced with its neighbours, still says so. */
static void test_double_free_or_foreign(void) {
    gm_context* ctx = t_setup(t_desc());
    void *a, *b, *c;
    T_OK(gm_alloc(ctx, &a, 4 * KiB, NULL));
    T_OK(gm_alloc(ctx, &b, 4 * KiB, NULL));
    T_EQ(gm_free(ctx, (char*)b + 64 * KiB), GM_ERR_FOREIGN_POINTER); /* free memory, never a block */
    T_EQ(gm_free(ctx, (char*)a + 512), GM_ERR_FOREIGN_POINTER);      /* inside a live block */
    T_EQ(gm_free(ctx, (char*)a + 100), GM_ERR_FOREIGN_POINTER);      /* not even 512-aligned */
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b)); /* coalesces with a and the rest: one free segment */
    T_EQ(gm_free(ctx, b), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_free(ctx, a), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_record_stream(ctx, b, NULL), GM_ERR_DOUBLE_FREE);
    T_EQ(gm_free(ctx, (char*)b + 4 * KiB), GM_ERR_FOREIGN_POINTER);
    T_OK(gm_alloc(ctx, &c, 8 * KiB, NULL)); /* covers a and b */
    T_CHECK(c == a);
    T_OK(gm_free(ctx, c));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Context B accepted context A's handle: the first tensor of every
   context had the same one. */
static void test_handles_of_other_contexts(void) {
    gm_context* a = t_setup(t_desc());
    gm_context* b = t_setup(t_desc());
    gm_tensor ta = tensor_with(a, 16 * KiB, 21), tb = tensor_with(b, 16 * KiB, 22), forged;
    void* p;
    gm_tier w;
    T_EQ(ta.id, tb.id); /* the same slot and generation ... */
    T_CHECK(ta.ctx_id != tb.ctx_id); /* ... told apart by the context */
    T_EQ(gm_tensor_destroy(b, ta), GM_ERR_STALE_HANDLE);
    T_CHECK(strstr(t_last_log, "another context") != NULL);
    T_EQ(gm_tensor_acquire(b, ta, NULL, &p), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_release(b, ta, NULL, 0), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_prefetch(b, ta, NULL), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_evict(b, ta), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_set_priority(b, ta, 1, 1), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_where(b, ta, &w), GM_ERR_STALE_HANDLE);
    forged.id = tb.id, forged.ctx_id = 0; /* an id without its context */
    T_EQ(gm_tensor_where(b, forged, &w), GM_ERR_STALE_HANDLE);
    T_CHECK(tensor_holds(b, tb, 16 * KiB, 22));
    T_CHECK(tensor_holds(a, ta, 16 * KiB, 21));
    T_EQ(gm_check(a), 0);
    T_EQ(gm_check(b), 0);
    T_OK(gm_tensor_destroy(b, tb));
    T_OK(gm_tensor_destroy(a, ta));
    T_OK(gm_shutdown(b));
    T_OK(gm_shutdown(a));
}

/* gm_plan_pack wrapped rounded sizes with a huge align and returned
   overlapping offsets; gm_plan_peak_live overflowed at 2^63. */
static void test_planner_arguments(void) {
    gm_plan_req r[3];
    uint64_t region = 77;
    memset(r, 0, sizeof r);
    r[0].size = 1000, r[0].start = 0, r[0].end = 2;
    r[1].size = 1000, r[1].start = 1, r[1].end = 3;
    T_EQ(gm_plan_pack(r, 2, (size_t)1 << 63, &region), GM_ERR_INVALID_ARGUMENT);
    T_EQ(region, 0);
    T_EQ(gm_plan_pack(r, 2, ((size_t)1 << 62) + 1, &region), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_plan_pack(r, 2, ((size_t)1 << 61) + 512, &region), GM_ERR_INVALID_ARGUMENT); /* rounded, past 2^62 */
    T_OK(gm_plan_pack(r, 1, ((size_t)1 << 61) + 512, &region));                          /* one of them fits */
    T_EQ(region, ((uint64_t)1 << 61) + 512);
    T_OK(gm_plan_pack(r, 2, (size_t)1 << 61, &region)); /* exactly 2^62 in all */
    T_EQ(region, (uint64_t)1 << 62);
    T_EQ(gm_plan_check(r, 2, region), 0);
    T_OK(gm_plan_pack(r, 2, 4096, &region)); /* a sane align packs */
    T_EQ(region, 8192);
    T_EQ(gm_plan_check(r, 2, region), 0);
    r[0].size = (uint64_t)1 << 62, r[1].size = (uint64_t)1 << 62;
    T_EQ(gm_plan_pack(r, 2, 512, &region), GM_ERR_INVALID_ARGUMENT); /* the sum passes 2^62 */
    r[0].size = ((uint64_t)1 << 62) + 1;
    T_EQ(gm_plan_pack(r, 1, 1, &region), GM_ERR_INVALID_ARGUMENT);
    r[0].size = 0;
    T_EQ(gm_plan_pack(r, 1, 0, &region), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_plan_pack(NULL, 1, 0, &region), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_plan_pack(r, 1, 0, NULL), GM_ERR_INVALID_ARGUMENT);
    /* the checker */
    r[0].size = 100, r[0].start = 5, r[0].end = 5;
    T_EQ(gm_plan_check(r, 1, 1000), -1);
    r[0].end = 6, r[0].size = 0;
    T_EQ(gm_plan_check(r, 1, 1000), -1);
    T_EQ(gm_plan_check(NULL, 1, 1000), -1);
    T_EQ(gm_plan_check(NULL, 0, 1000), 0);
    r[0].size = 100, r[0].offset = UINT64_MAX - 10; /* past 2^64 */
    T_EQ(gm_plan_check(r, 1, UINT64_MAX), 1);
    /* the peak: 2^63 twice, apart in time, then together */
    r[0].size = (uint64_t)1 << 63, r[0].start = 0, r[0].end = 1;
    r[1].size = (uint64_t)1 << 63, r[1].start = 1, r[1].end = 2;
    r[2].size = 5, r[2].start = 7, r[2].end = 3; /* never live */
    T_EQ(gm_plan_peak_live(r, 3) == ((uint64_t)1 << 63), 1);
    r[1].start = 0;
    T_EQ(gm_plan_peak_live(r, 2) == UINT64_MAX, 1);
    T_EQ(gm_plan_peak_live(NULL, 2), 0);
    /* requests that never overlap: the perturbation's work estimate was 0,
       and gm_plan_pack divided by it (SIGFPE; found by fuzz_lifetimes) */
    memset(r, 0, sizeof r);
    r[0].size = 1000, r[0].start = 0, r[0].end = 3;
    r[1].size = 4096, r[1].start = 3, r[1].end = 10;
    T_OK(gm_plan_pack(r, 2, 0, &region));
    T_EQ(region, 4096);
    T_EQ(r[0].offset, 0);
    T_EQ(r[1].offset, 0);
}

/* A call on a context after gm_shutdown: refused while its memory has not
   been reused (here it is kept: gm_kept.h). */
static void test_after_shutdown(void) {
    gm_context* ctx = t_setup(t_desc());
    void* p = NULL;
    gm_stats st;
    int kept = t_nkept;
    T_OK(gm_shutdown(ctx));
    T_CHECK(t_nkept > kept);
    T_EQ(gm_alloc(ctx, &p, 100, NULL), GM_ERR_INVALID_ARGUMENT);
    T_CHECK(p == NULL);
    T_EQ(gm_free(ctx, (void*)4096), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_get_stats(ctx, &st), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_check(ctx), -1);
    T_EQ(gm_snapshot(ctx, NULL, 0), 0);
    T_EQ(gm_shutdown(ctx), GM_ERR_INVALID_ARGUMENT);
    T_CHECK(strcmp(gm_backend_name(ctx), "none") == 0);
}

/* A budget far above the device sized the expandable segments' page
   tables by it (gigabytes of host memory; found by fuzz_setup): it is the
   device's memory now, and a simulated device is at most 4 TiB. */
static void test_budget_above_device(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void* p;
    d.conf = "budget:222222215M,expandable:on";
    d.sim.capacity = 64 * MiB;
    ctx = t_setup(d);
    T_EQ(gm_query_desc(ctx).device_budget, t_sim ? 64 * MiB : gm_query_desc(ctx).device_budget);
    T_OK(gm_alloc(ctx, &p, 4 * MiB, NULL));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
    if (t_sim) {
        d = t_desc();
        d.conf = "sim_capacity:1024T";
        t_log_count = 0;
        ctx = t_setup(d);
        T_EQ(gm_query_desc(ctx).sim.capacity, (size_t)1 << 42);
        T_CHECK(t_log_count == 1 && strstr(t_last_log, "4 TiB") != NULL);
        T_OK(gm_shutdown(ctx));
    }
}

/* Misuse found by probing every public call with bad input. Each was
   accepted (GM_OK), crashed, or refused without a log line before. */
static void test_probed_misuse(void) {
    gm_context* ctx;
    gm_desc d;
    gm_stream s, s2;
    gm_tensor t;
    gm_use u;
    void* p;
    size_t n;
    int logs;
    /* a NULL buffer with a capacity: sizing only (before: a store through NULL) */
    ctx = t_setup(t_desc());
    n = gm_summary(ctx, NULL, 10);
    T_CHECK(n > 10 && n == gm_summary(ctx, NULL, 0));
    n = gm_snapshot(ctx, NULL, 10);
    T_CHECK(n > 10 && n == gm_snapshot(ctx, NULL, 0));
    /* NULL results and bad arguments: refused with a log line each (before: silent) */
    logs = t_log_count;
    T_EQ(gm_alloc(ctx, NULL, 100, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_alloc_ex(ctx, &p, 100, NULL, 0x80), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tensor_create(ctx, NULL, 100), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_stream_create(ctx, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_set_budget(ctx, 0), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tier_set_policy(ctx, GM_EVICT_CUSTOM, 0, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tier_set_policy(ctx, GM_EVICT_LRU, -1, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_memcpy_async(ctx, NULL, &n, 8, GM_COPY_HOST_TO_HOST, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_memcpy_async(ctx, &p, &n, 8, (gm_copy_kind)99, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_launch_host(ctx, NULL, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_launch_host_copy(ctx, NULL, NULL, &n, sizeof n), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_raw_alloc(ctx, NULL, 100), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_raw_alloc(ctx, &p, (size_t)-1), GM_ERR_OUT_OF_MEMORY);
    T_EQ(t_log_count - logs, 13);
    /* the out-of-memory line counts a block the thread's cache holds free as free (before: "1.00 KiB
       allocated; -1.00 KiB reserved but unallocated") */
    T_OK(gm_alloc(ctx, &p, 1000, NULL));
    T_OK(gm_free(ctx, p));
    T_EQ(gm_alloc(ctx, &p, (size_t)1 << 44, NULL), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(strstr(t_last_log, "out of memory") != NULL && strstr(t_last_log, "; -") == NULL);
    T_OK(gm_tensor_create(ctx, &t, 4096));
    logs = t_log_count;
    T_EQ(gm_tensor_acquire(ctx, t, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tensor_where(ctx, t, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tensor_get_info(ctx, t, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(t_log_count - logs, 3);
    /* a release batch with an access outside gm_access: refused as a whole, as an acquire
       batch is (before: released, as written) */
    T_OK(gm_tensor_acquire(ctx, t, NULL, &p));
    u.tensor = t;
    u.access = (gm_access)99;
    u.ptr = NULL;
    T_EQ(gm_tensor_release_many(ctx, &u, 1, NULL), GM_ERR_INVALID_ARGUMENT);
    {
        gm_tensor_info info;
        T_OK(gm_tensor_get_info(ctx, t, &info));
        T_EQ(info.acquired, 1);
    }
    T_OK(gm_tensor_release(ctx, t, NULL, 0));
    if (t_sim) { /* CUDA's streams are trusted (they may come from other code): the sim knows its own */
        /* a stream destroyed while a tensor is acquired on it: no more acquires on it (before: a
           nested acquire was served); its release still releases, the device waited for instead */
        T_OK(gm_stream_create(ctx, &s2));
        T_OK(gm_tensor_acquire(ctx, t, s2, &p));
        T_OK(gm_stream_destroy(ctx, s2));
        T_EQ(gm_tensor_acquire(ctx, t, s2, &p), GM_ERR_INVALID_STREAM);
        u.access = GM_ACCESS_READ;
        T_EQ(gm_tensor_acquire_many(ctx, &u, 1, s2), GM_ERR_INVALID_STREAM);
        logs = t_log_count;
        T_OK(gm_tensor_release(ctx, t, s2, 0)); /* one warning, and no call on the dead stream (before: an event
                                                   recorded and a sync on it, two errors) */
        T_EQ(t_log_count - logs, 1);
        T_CHECK(strstr(t_last_log, "destroyed while it was acquired") != NULL);
        {
            gm_tensor_info info;
            T_OK(gm_tensor_get_info(ctx, t, &info));
            T_EQ(info.acquired, 0);
        }
        /* nothing to copy, but an unknown stream is still refused */
        T_EQ(gm_memcpy_async(ctx, &p, &p, 0, GM_COPY_HOST_TO_HOST, s2), GM_ERR_INVALID_STREAM);
        /* the planned mode serves no request on a destroyed stream, and records none on one
           (before: GM_OK for both) */
        T_OK(gm_stream_create(ctx, &s));
        T_OK(gm_plan_begin(ctx));
        T_OK(gm_alloc(ctx, &p, 1000, s));
        T_OK(gm_free(ctx, p));
        T_OK(gm_plan_end(ctx));
        T_OK(gm_plan_step(ctx));
        T_OK(gm_alloc(ctx, &p, 1000, s)); /* planned */
        T_EQ(gm_record_stream(ctx, p, s2), GM_ERR_INVALID_STREAM);
        T_OK(gm_free(ctx, p));
        T_OK(gm_stream_destroy(ctx, s));
        T_OK(gm_plan_step(ctx));
        p = NULL;
        T_EQ(gm_alloc(ctx, &p, 1000, s), GM_ERR_INVALID_STREAM);
        T_CHECK(p == NULL);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    /* a desc's out-of-range values: the default, with a warning (log_level: before, every message
       was dropped, errors too); a budget fraction that comes to 0 bytes is refused */
    d = t_desc();
    d.log_level = (gm_log_level)-9;
    d.caching = (gm_toggle)77;
    d.fallback = (gm_fallback)42;
    d.disk_io = (gm_disk_io)55;
    d.sim.link_bytes_per_s = 1e-300; /* a copy would take ages (conf's sim_link refuses it) */
    logs = t_log_count;
    ctx = t_setup(d);
    T_EQ(t_log_count - logs, 5);
    T_CHECK(gm_query_desc(ctx).sim.link_bytes_per_s == 0);
    T_EQ(gm_query_desc(ctx).log_level, GM_LOG_WARN);
    T_EQ(gm_query_desc(ctx).caching, GM_TOGGLE_ON);
    T_EQ(gm_query_desc(ctx).fallback, GM_FALLBACK_FAIL);
    logs = t_log_count;
    T_EQ(gm_free(ctx, (void*)4096), GM_ERR_FOREIGN_POINTER);
    T_EQ(t_log_count - logs, 1);
    T_OK(gm_shutdown(ctx));
    d = t_desc();
    d.device_budget = 0;
    d.device_budget_fraction = 1e-15;
    d.backend = t_sim ? GM_BACKEND_SIM : GM_BACKEND_CUDA;
    d.ignore_env = 1;
    d.log_fn = t_log;
    ctx = NULL;
    T_EQ(gm_setup(&ctx, &d), GM_ERR_INVALID_ARGUMENT);
    T_CHECK(ctx == NULL);
    d.backend = (gm_backend)9;
    T_EQ(gm_setup(&ctx, &d), GM_ERR_INVALID_ARGUMENT);
    T_CHECK(ctx == NULL);
}

int main(void) {
    test_tensor_memory_refused();
    test_check_sees_ownership();
    test_raw_is_told_apart();
    test_double_free_or_foreign();
    test_handles_of_other_contexts();
    test_planner_arguments();
    test_budget_above_device();
    test_after_shutdown();
    test_probed_misuse();
    t_kept_free();
    return t_done();
}
