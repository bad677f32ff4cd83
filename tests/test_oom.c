/* The OOM ladder, one rung at a time: release the cache and retry, wait for
   other streams, ask the tier manager, call the user's hook, fail with a
   message that says what was asked and what is where. */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)

#define st t_stats

static int hook_calls;
static void* hook_victim;
static size_t hook_size;
static gm_oom_action hook_free_victim(gm_context* ctx, size_t size, gm_stream s, void* user) {
    (void)s;
    (void)user;
    hook_calls++;
    hook_size = size;
    if (hook_victim) {
        gm_free(ctx, hook_victim); /* the lock is not held: freeing is allowed */
        hook_victim = NULL;
        return GM_OOM_RETRY;
    }
    return GM_OOM_FAIL;
}
static gm_oom_action hook_always_retry(gm_context* ctx, size_t size, gm_stream s, void* user) {
    (void)ctx; (void)size; (void)s; (void)user;
    hook_calls++;
    return GM_OOM_RETRY;
}

static gm_context* budget_ctx(size_t budget, gm_oom_fn fn) {
    gm_desc d = t_desc();
    d.device_budget = budget;
    d.oom_fn = fn;
    return t_setup(d);
}

/* Rung 3: cached segments go back to the device, then the grow succeeds. */
static void test_release_then_retry(void) {
    gm_context* ctx = budget_ctx(40 * MiB, hook_free_victim);
    void *a, *b;
    gm_stats s;
    hook_calls = 0;
    T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
    T_OK(gm_free(ctx, a)); /* 20 MiB cached */
    T_OK(gm_alloc(ctx, &b, 30 * MiB, NULL)); /* 20 + 30 > 40: release, retry */
    s = st(ctx);
    T_EQ(s.num_alloc_retries, 1);
    T_EQ(s.num_device_free, 1);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, (int64_t)(30 * MiB));
    T_EQ(s.num_ooms, 0);
    T_EQ(hook_calls, 0);
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Rung 3 also covers a device that refuses (an injected failure while
   memory is cached). */
static void test_device_refuses(void) {
    gm_context* ctx;
    void *a, *b;
    gm_stats s;
    if (!t_sim) return;
    ctx = budget_ctx(0, NULL);
    T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
    T_OK(gm_free(ctx, a));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DEVICE_ALLOC, 1));
    T_OK(gm_alloc(ctx, &b, 30 * MiB, NULL));
    s = st(ctx);
    T_EQ(s.num_alloc_retries, 1);
    T_EQ(s.num_device_free, 1); /* the cache went back first */
    T_EQ(s.num_device_alloc, 2);
    T_OK(gm_free(ctx, b));
    /* with nothing cached, a one-shot refusal is retried by the later rungs */
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DEVICE_ALLOC, 1));
    T_OK(gm_alloc(ctx, &b, 30 * MiB, NULL));
    T_EQ(st(ctx).num_ooms, 0);
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* The device is full because someone else holds memory: the budget allows
   the request, the device does not. */
static void test_device_full(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *other, *a, *b;
    if (!t_sim) return;
    d.sim.capacity = 64 * MiB;
    ctx = t_setup(d);
    T_OK(gm_raw_alloc(ctx, &other, 40 * MiB));
    T_OK(gm_alloc(ctx, &a, 12 * MiB, NULL));
    t_last_log[0] = 0;
    T_EQ(gm_alloc(ctx, &b, 20 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(strstr(t_last_log, "12.00 MiB allocated") != NULL);
    T_CHECK(strstr(t_last_log, "12.00 MiB free on the device") != NULL);
    T_OK(gm_alloc(ctx, &b, 10 * MiB, NULL)); /* what does fit still works */
    T_OK(gm_free(ctx, a));
    T_OK(gm_free(ctx, b));
    T_OK(gm_raw_free(ctx, other, 40 * MiB));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Rung 6: the hook frees memory and asks for a retry; rung 7 when it
   cannot. */
static void test_hook_then_fail(void) {
    gm_context* ctx = budget_ctx(40 * MiB, hook_free_victim);
    void *a, *b;
    gm_stats s;
    hook_calls = 0;
    T_OK(gm_alloc(ctx, &a, 30 * MiB, NULL));
    hook_victim = a;
    T_OK(gm_alloc(ctx, &b, 20 * MiB, NULL));
    T_EQ(hook_calls, 1);
    T_EQ(hook_size, 20 * MiB);
    s = st(ctx);
    T_EQ(s.num_oom_hook_calls, 1);
    T_EQ(s.num_ooms, 0);
    /* now the hook has nothing to give */
    t_last_log[0] = 0;
    T_EQ(gm_alloc(ctx, &a, 30 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_EQ(hook_calls, 2);
    s = st(ctx);
    T_EQ(s.num_ooms, 1);
    T_CHECK(strstr(t_last_log, "tried to allocate 30.00 MiB") != NULL);
    T_CHECK(strstr(t_last_log, "budget 40.00 MiB") != NULL);
    T_CHECK(strstr(t_last_log, "20.00 MiB allocated") != NULL);
    T_CHECK(strstr(t_last_log, "reserved but unallocated") != NULL);
    T_CHECK(strstr(t_last_log, "free on the device") != NULL);
    T_CHECK(strstr(t_last_log, "device capacity") != NULL);
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A hook that always says "retry" without freeing cannot loop forever. */
static void test_hook_bounded(void) {
    gm_context* ctx = budget_ctx(8 * MiB, hook_always_retry);
    void* a;
    hook_calls = 0;
    T_EQ(gm_alloc(ctx, &a, 9 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(hook_calls >= 1 && hook_calls <= 4);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Rung 5: the tier manager's seam is asked before the user's hook. */
static void* tier_victim;
static int tier_calls;
static size_t tier_evict(gm_context* ctx, size_t bytes, void* tier) {
    (void)tier;
    (void)bytes;
    tier_calls++;
    if (!tier_victim) return 0;
    gm_free(ctx, tier_victim);
    tier_victim = NULL;
    return 1;
}

static void test_tier_before_hook(void) {
    gm_context* ctx = budget_ctx(40 * MiB, hook_free_victim);
    void *a, *b;
    hook_calls = tier_calls = 0;
    ctx->tier_evict = tier_evict;
    T_OK(gm_alloc(ctx, &a, 30 * MiB, NULL));
    tier_victim = a;
    hook_victim = NULL;
    T_OK(gm_alloc(ctx, &b, 20 * MiB, NULL));
    T_EQ(tier_calls, 1);
    T_EQ(hook_calls, 0);
    T_EQ(gm_alloc(ctx, &a, 30 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_EQ(tier_calls, 2);
    T_EQ(hook_calls, 1);
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* The order of the rungs: a request that only the wait (rung 4) can serve
   never reaches the hook. */
static void test_wait_before_hook(void) {
    gm_context* ctx = budget_ctx(2 * MiB, hook_free_victim);
    gm_stream s;
    t_gate g;
    void *p, *q;
    hook_calls = 0;
    hook_victim = NULL;
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    T_OK(gm_alloc(ctx, &p, MiB, s));
    T_OK(gm_record_stream(ctx, p, NULL)); /* and the default stream used it */
    T_OK(gm_free(ctx, p));
    t_open_later(&g, 50);
    T_OK(gm_alloc(ctx, &q, 2 * MiB - 512, s));
    T_EQ(hook_calls, 0);
    T_EQ(st(ctx).num_sync_all_streams, 1);
    T_OK(gm_free(ctx, q));
    T_OK(gm_stream_destroy(ctx, s));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 1);
}

/* Out of memory leaves everything as it was. */
static void test_oom_changes_nothing(void) {
    gm_context* ctx = budget_ctx(64 * MiB, NULL);
    void* live[16];
    void* x;
    gm_stats a, b;
    int i;
    for (i = 0; i < 16; i++) T_OK(gm_alloc(ctx, &live[i], 3 * MiB + (size_t)i * 4096, NULL));
    for (i = 0; i < 16; i += 2) T_OK(gm_free(ctx, live[i]));
    a = st(ctx);
    T_EQ(gm_alloc(ctx, &x, 60 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    b = st(ctx);
    T_EQ(b.allocation[GM_STAT_ALL].current, a.allocation[GM_STAT_ALL].current);
    T_EQ(b.allocated_bytes[GM_STAT_ALL].current, a.allocated_bytes[GM_STAT_ALL].current);
    T_EQ(b.num_ooms, a.num_ooms + 1);
    T_EQ(gm_check(ctx), 0);
    for (i = 1; i < 16; i += 2) T_OK(gm_free(ctx, live[i]));
    T_OK(gm_alloc(ctx, &x, 60 * MiB, NULL)); /* all free now: fits after release */
    T_OK(gm_free(ctx, x));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A hook that destroys the stream being allocated on: the allocation
   reports the stream, not out-of-memory. */
static gm_stream doomed;
static gm_oom_action hook_destroy_stream(gm_context* ctx, size_t size, gm_stream s, void* user) {
    (void)size; (void)s; (void)user;
    gm_stream_destroy(ctx, doomed);
    return GM_OOM_RETRY;
}

static void test_stream_gone_in_hook(void) {
    gm_context* ctx;
    void* p;
    if (!t_sim) return;
    ctx = budget_ctx(8 * MiB, hook_destroy_stream);
    T_OK(gm_stream_create(ctx, &doomed));
    T_EQ(gm_alloc(ctx, &p, 9 * MiB, doomed), GM_ERR_INVALID_STREAM);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Rung 7: with the managed fallback, a request the device cannot hold is
   served by unified memory; the pointer is freed, sized and recorded like
   any other, and a fallback_fn may refuse case by case. */
static gm_fallback only_small(gm_context* ctx, size_t bytes, void* user) {
    (void)ctx, (void)user;
    return bytes <= 16 * MiB ? GM_FALLBACK_MANAGED : GM_FALLBACK_FAIL;
}
static void test_managed_fallback(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *a, *b, *c, *e;
    size_t n = 0, i;
    gm_stream s;
    gm_stats x;
    d.device_budget = 24 * MiB;
    d.fallback = GM_FALLBACK_MANAGED;
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &a, 20 * MiB, s));
    T_OK(gm_alloc(ctx, &b, 12 * MiB + 5, s)); /* past the budget: unified memory */
    x = st(ctx);
    T_EQ(x.num_managed_fallbacks, 1);
    T_EQ(x.managed_bytes, (int64_t)(12 * MiB + 5));
    T_EQ(x.num_ooms, 1); /* the ladder ran out before the fallback */
    T_EQ(x.allocated_bytes[GM_STAT_ALL].current, (int64_t)(20 * MiB));
    T_OK(gm_block_size(ctx, b, &n));
    T_EQ(n, 12 * MiB + 5);
    T_OK(gm_record_stream(ctx, b, NULL));
    if (t_sim) { /* sim: unified memory is host memory */
        memset(b, 0x3c, 12 * MiB + 5);
        for (i = 0; i < 12 * MiB + 5 && ((unsigned char*)b)[i] == 0x3c; i++) {}
        T_EQ(i, 12 * MiB + 5);
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, b));
    T_EQ(st(ctx).managed_bytes, 0);
    T_EQ(gm_free(ctx, b), GM_ERR_FOREIGN_POINTER); /* gone: no longer ours */
    T_OK(gm_alloc(ctx, &c, 8 * MiB, s));           /* unified again, left for shutdown */
    T_EQ(st(ctx).num_managed_fallbacks, 2);
    T_OK(gm_free(ctx, a));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx)); /* releases c, with a leak warning */
    (void)c;

    d.fallback = GM_FALLBACK_DEFAULT;
    d.fallback_fn = only_small;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
    T_OK(gm_alloc(ctx, &b, 16 * MiB, NULL));
    T_EQ(gm_alloc(ctx, &c, 17 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_EQ(st(ctx).num_managed_fallbacks, 1);
    T_OK(gm_free(ctx, b));
    T_OK(gm_free(ctx, a));
    /* without a fallback, the ladder fails as before */
    d.fallback_fn = NULL;
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &a, 20 * MiB, NULL));
    T_EQ(gm_alloc(ctx, &e, 8 * MiB, NULL), GM_ERR_OUT_OF_MEMORY);
    T_EQ(st(ctx).num_managed_fallbacks, 0);
    T_OK(gm_free(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* A freed unified-memory block synchronized the whole device (every free
   past the budget a device-wide barrier): it waits for its streams
   instead, is reused from a cache once they are done, and goes back to
   the backend on gm_empty_cache. */
static void test_managed_free_is_no_barrier(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s, other;
    void *a, *b, *c, *e;
    t_gate g;
    double t0;
    d.device_budget = 24 * MiB;
    d.fallback = GM_FALLBACK_MANAGED;
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &other));
    T_OK(gm_alloc(ctx, &a, 20 * MiB, s));
    T_OK(gm_alloc(ctx, &b, 12 * MiB, s)); /* unified */
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, other, t_gate_wait, &g)); /* another stream, busy for a while */
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));     /* b's stream too */
    t_open_later(&g, 300);
    t0 = t_now();
    T_OK(gm_free(ctx, b));
    T_CHECK(t_now() - t0 < 0.2); /* no wait for the device */
    T_OK(gm_alloc(ctx, &c, 12 * MiB, s)); /* b's stream is not done with it: other memory */
    T_CHECK(c != b);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_synchronize(ctx, s));
    T_OK(gm_free(ctx, c));
    T_OK(gm_stream_synchronize(ctx, s));
    T_OK(gm_alloc(ctx, &e, 12 * MiB, s)); /* from the cache now */
    T_CHECK(e == b || e == c);
    T_EQ(st(ctx).managed_bytes, (int64_t)(12 * MiB));
    T_OK(gm_free(ctx, e));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_empty_cache(ctx)); /* the cache goes back */
    if (t_sim) T_EQ(((gm__sim*)ctx->bs)->managed, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_synchronize(ctx, other)); /* no stream waits on the gate any more */
    t_gate_done(&g, 1);
    T_OK(gm_free(ctx, a));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, other));
    T_OK(gm_shutdown(ctx));
}

/* GM_ALLOC_NO_SYNC (a stream capturing a CUDA graph): served from the
   cache or a new segment, or refused at once; it never waits for a
   pending free as the ladder does. */
static void test_alloc_no_sync(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s1, s2;
    void *a, *b;
    t_gate g;
    double t0;
    d.device_budget = 20 * MiB;
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s1));
    T_OK(gm_stream_create(ctx, &s2));
    T_OK(gm_alloc_ex(ctx, &a, 18 * MiB, s1, GM_ALLOC_NO_SYNC)); /* a new segment: fine */
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, s2, t_gate_wait, &g));
    T_OK(gm_record_stream(ctx, a, s2)); /* s2 still uses it */
    T_OK(gm_free(ctx, a));
    t_open_later(&g, 300);
    t0 = t_now();
    T_EQ(gm_alloc_ex(ctx, &b, 18 * MiB, s1, GM_ALLOC_NO_SYNC), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(t_now() - t0 < 0.2); /* refused, not waited for */
    T_OK(gm_alloc(ctx, &b, 18 * MiB, s1)); /* the ladder waits for s2 */
    T_CHECK(t_now() - t0 > 0.2);
    T_CHECK(b == a);
    T_EQ(gm_alloc_ex(ctx, &a, 100, s1, 2), GM_ERR_INVALID_ARGUMENT); /* an unknown flag */
    T_OK(gm_free(ctx, b));
    T_EQ(gm_check(ctx), 0);
    t_gate_done(&g, 1);
    T_OK(gm_stream_destroy(ctx, s1));
    T_OK(gm_stream_destroy(ctx, s2));
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    test_managed_fallback();
    test_alloc_no_sync();
    test_managed_free_is_no_barrier();
    test_stream_gone_in_hook();
    test_release_then_retry();
    test_device_refuses();
    test_device_full();
    test_hook_then_fail();
    test_hook_bounded();
    test_tier_before_hook();
    test_wait_before_hook();
    test_oom_changes_nothing();
    return t_done();
}
