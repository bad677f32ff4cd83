/* Stream rules: a block freed on S is reused at once on S; another stream
   gets it only after the work queued on S before the free has completed;
   gm_record_stream holds a block until the other streams' work is done.
   "Still running" is made real by a gate that blocks a stream. */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)

#define st t_stats

static void test_same_stream_reuse(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s;
    t_gate g;
    void *p, *q;
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g)); /* s is busy */
    T_OK(gm_alloc(ctx, &p, 4096, s));
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &q, 4096, s));
    T_CHECK(q == p); /* stream order makes reuse on s safe at once */
    T_OK(gm_free(ctx, q));
    t_gate_open(&g);
    T_OK(gm_stream_destroy(ctx, s));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
}

static void test_no_cross_stream_reuse_while_busy(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s, t;
    t_gate g;
    void *p, *q;
    gm_stats a;
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    T_OK(gm_alloc(ctx, &p, MiB, s));
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &q, MiB, t)); /* s may still be using p */
    T_CHECK(q != p);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_free(ctx, q));
    /* once s drained, a whole free segment of s may move to t instead of
       the allocator growing */
    t_gate_open(&g);
    T_OK(gm_stream_synchronize(ctx, s));
    a = st(ctx);
    {
        void *x, *x2, *y, *z;
        T_OK(gm_alloc(ctx, &x, MiB, t)); /* x and x2 fill t's own segment */
        T_OK(gm_alloc(ctx, &x2, MiB, t));
        T_OK(gm_alloc(ctx, &y, MiB, t)); /* no room on t: adopts s's segment */
        T_EQ(st(ctx).num_device_alloc, a.num_device_alloc);
        T_CHECK(y == p);
        T_OK(gm_alloc(ctx, &z, MiB, s)); /* s has nothing left: grows */
        T_EQ(st(ctx).num_device_alloc, a.num_device_alloc + 1);
        T_OK(gm_free(ctx, x));
        T_OK(gm_free(ctx, x2));
        T_OK(gm_free(ctx, y));
        T_OK(gm_free(ctx, z));
    }
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
}

/* Under a budget of one segment, the allocation on t must wait for s. */
static void test_waits_for_other_stream(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s, t;
    t_gate g;
    void *p, *q;
    double t0;
    d.device_budget = 2 * MiB;
    ctx = t_setup(d);
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    T_OK(gm_alloc(ctx, &p, MiB, s));
    T_OK(gm_free(ctx, p));
    t0 = t_now();
    t_open_later(&g, 150);
    T_OK(gm_alloc(ctx, &q, MiB, t));
    T_CHECK(q == p);                 /* the same memory ... */
    T_CHECK(g.open && t_now() >= g.opened_at); /* ... only after s finished */
    T_CHECK(t_now() - t0 >= 0.14);
    T_CHECK(st(ctx).num_sync_all_streams >= 1);
    T_EQ(st(ctx).num_ooms, 0);
    T_OK(gm_free(ctx, q));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 1);
}

static void test_record_stream(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s, t;
    t_gate g;
    void *p, *q, *r;
    gm_stats a;
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_alloc(ctx, &p, 8192, s));
    T_OK(gm_launch_host(ctx, t, t_gate_wait, &g)); /* t is using p */
    T_OK(gm_record_stream(ctx, p, t));
    T_OK(gm_record_stream(ctx, p, t)); /* twice is once */
    T_OK(gm_record_stream(ctx, p, s)); /* its own stream: nothing to do */
    T_OK(gm_free(ctx, p));
    a = st(ctx);
    T_EQ(a.allocation[GM_STAT_ALL].current, 0);
    T_EQ(a.active[GM_STAT_ALL].current, 1); /* pending: not reusable yet */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_alloc(ctx, &q, 8192, s));
    T_CHECK(q != p);
    t_gate_open(&g);
    T_OK(gm_stream_synchronize(ctx, t));
    T_OK(gm_alloc(ctx, &r, 8192, s)); /* the event completed: p is back */
    T_CHECK(r == p);
    T_EQ(st(ctx).active[GM_STAT_ALL].current, 2);
    T_OK(gm_free(ctx, q));
    T_OK(gm_free(ctx, r));
    T_EQ(gm_check(ctx), 0);
    /* gm_empty_cache waits for pending frees */
    {
        t_gate g2;
        t_gate_init(&g2);
        T_OK(gm_alloc(ctx, &p, 8192, s));
        T_OK(gm_launch_host(ctx, t, t_gate_wait, &g2));
        T_OK(gm_record_stream(ctx, p, t));
        T_OK(gm_free(ctx, p));
        t_open_later(&g2, 50);
        T_OK(gm_empty_cache(ctx));
        T_EQ(st(ctx).active[GM_STAT_ALL].current, 0);
        T_EQ(st(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
        t_gate_done(&g2, 1);
    }
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
}

/* The bytes themselves: s writes into p after its gate opens; t gets memory
   while s is blocked and writes its own pattern. If the allocator had given
   t the same memory, s's late write would overwrite t's pattern. */
static void test_bytes_survive(void) {
    gm_context* ctx;
    gm_stream s, t;
    t_gate g;
    void *p, *q;
    unsigned char *a, *b, *back;
    size_t n = 64 * 1024, i, bad = 0;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    a = (unsigned char*)malloc(n);
    b = (unsigned char*)malloc(n);
    back = (unsigned char*)malloc(n);
    memset(a, 0xAA, n);
    memset(b, 0xBB, n);
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_alloc(ctx, &p, n, s));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    T_OK(gm_memcpy_async(ctx, p, a, n, GM_COPY_HOST_TO_DEVICE, s)); /* runs after the gate */
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &q, n, t));
    T_OK(gm_memcpy_async(ctx, q, b, n, GM_COPY_HOST_TO_DEVICE, t));
    T_OK(gm_stream_synchronize(ctx, t));
    t_gate_open(&g);
    T_OK(gm_stream_synchronize(ctx, s));
    T_OK(gm_memcpy_async(ctx, back, q, n, GM_COPY_DEVICE_TO_HOST, t));
    T_OK(gm_stream_synchronize(ctx, t));
    for (i = 0; i < n; i++) bad += back[i] != 0xBB;
    T_EQ(bad, 0);
    T_OK(gm_free(ctx, q));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
    free(a);
    free(b);
    free(back);
}

static void test_destroyed_stream_memory(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s;
    void *p, *q;
    d.device_budget = 2 * MiB;
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &p, MiB, s));
    T_OK(gm_free(ctx, p));
    T_OK(gm_stream_destroy(ctx, s)); /* synchronized: its segment is free for all */
    T_OK(gm_alloc(ctx, &q, 2 * MiB - 512, NULL));
    T_CHECK(q == p);
    T_EQ(st(ctx).num_ooms, 0);
    T_OK(gm_free(ctx, q));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* White box: a stream the host keeps busy still retires its older fences.
   Two fences in flight; when the first one's work is done, frees made
   before it are safe even though the stream is still blocked further on.
   The frees go through the lock (no thread cache): a block a thread cache
   keeps is reused on its own stream only and needs no fence. */
static void test_fence_ring(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    d.thread_cache = GM_TOGGLE_OFF;
    ctx = t_setup(d);
    gm_stream s;
    t_gate g1, g2;
    void *p, *r;
    uint32_t si;
    gm__sstate* ss;
    int i;
    t_gate_init(&g1);
    t_gate_init(&g2);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &p, 4096, s));
    T_OK(gm_alloc(ctx, &r, 3 * MiB, s));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g1));
    T_OK(gm_free(ctx, p));
    pthread_mutex_lock(&ctx->mu);
    T_OK(gm__ss_index(ctx, s, &si));
    ss = &ctx->ss[si];
    gm__fence_need(ctx, ss); /* fence 1: after the first gate */
    pthread_mutex_unlock(&ctx->mu);
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g2));
    T_OK(gm_free(ctx, r));
    pthread_mutex_lock(&ctx->mu);
    gm__fence_need(ctx, ss); /* fence 2: after the second gate */
    T_EQ(ss->fcount, 2);
    T_EQ(ss->safe_epoch, 0);
    pthread_mutex_unlock(&ctx->mu);
    t_gate_open(&g1);
    for (i = 0; i < 200; i++) { /* the first fence completes; the stream stays blocked */
        pthread_mutex_lock(&ctx->mu);
        gm__fence_poll(ctx, ss);
        pthread_mutex_unlock(&ctx->mu);
        if (ss->fcount == 1) break;
        {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    T_EQ(ss->fcount, 1);
    T_EQ(ss->safe_epoch, 1); /* p's free is safe for other streams ... */
    T_CHECK(ss->dirty_epoch > ss->safe_epoch); /* ... r's is not yet */
    T_EQ(gm_check(ctx), 0);
    t_gate_open(&g2);
    T_OK(gm_stream_synchronize(ctx, s));
    pthread_mutex_lock(&ctx->mu);
    gm__fence_poll(ctx, ss);
    T_EQ(ss->fcount, 0);
    T_EQ(ss->safe_epoch, ss->dirty_epoch);
    pthread_mutex_unlock(&ctx->mu);
    T_OK(gm_stream_destroy(ctx, s));
    T_EQ(gm_stream_destroy(ctx, s), GM_ERR_INVALID_STREAM); /* refused, not synchronized */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g1, 0);
    t_gate_done(&g2, 0);
}

int main(void) {
    test_fence_ring();
    test_same_stream_reuse();
    test_no_cross_stream_reuse_while_busy();
    test_waits_for_other_stream();
    test_record_stream();
    test_bytes_survive();
    test_destroyed_stream_memory();
    return t_done();
}
