/* The backend under the allocator: streams run asynchronously and in order,
   events and cross-stream waits, copies move bytes, the link model paces
   them, faults can be injected, device memory is capped, unified memory's
   residency is modelled. On CUDA the same program checks the same
   behaviour of the real runtime, except the parts only a simulation has
   (capacity, link model, injection, unified memory's model). */
#include "gm_test.h"

#define MiB ((size_t)1 << 20)

typedef struct seq_log {
    pthread_mutex_t mu;
    int items[64];
    int n;
} seq_log;
typedef struct seq_item {
    seq_log* log;
    int value;
} seq_item;
static void seq_push(void* arg) {
    seq_item* it = (seq_item*)arg;
    pthread_mutex_lock(&it->log->mu);
    it->log->items[it->log->n++] = it->value;
    pthread_mutex_unlock(&it->log->mu);
}

static void test_async_and_ordered(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s, t;
    t_gate g;
    seq_log log;
    seq_item it[8];
    void* ev;
    int i;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.mu, NULL);
    t_gate_init(&g);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    for (i = 0; i < 4; i++) {
        it[i].log = &log;
        it[i].value = i;
        T_OK(gm_launch_host(ctx, s, seq_push, &it[i]));
    }
    /* the call returned, the work did not run: s is asynchronous */
    T_EQ(log.n, 0);
    /* an event recorded on s is not complete; t waits on it */
    T_OK(ctx->be->event_create(ctx, &ev));
    T_OK(ctx->be->event_record(ctx, ev, s));
    T_EQ(ctx->be->event_query(ctx, ev), GM_NOT_READY);
    T_OK(ctx->be->stream_wait_event(ctx, t, ev));
    it[4].log = &log;
    it[4].value = 100;
    T_OK(gm_launch_host(ctx, t, seq_push, &it[4])); /* must run after s's four */
    t_gate_open(&g);
    T_OK(gm_stream_synchronize(ctx, t));
    T_EQ(log.n, 5);
    for (i = 0; i < 4; i++) T_EQ(log.items[i], i); /* FIFO on s */
    T_EQ(log.items[4], 100);                      /* t waited for s */
    T_OK(ctx->be->event_sync(ctx, ev));
    T_OK(ctx->be->event_query(ctx, ev));
    T_OK(ctx->be->event_destroy(ctx, ev));
    /* an event never recorded counts as complete */
    T_OK(ctx->be->event_create(ctx, &ev));
    T_OK(ctx->be->event_query(ctx, ev));
    T_OK(ctx->be->event_destroy(ctx, ev));
    T_OK(gm_device_synchronize(ctx));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
    pthread_mutex_destroy(&log.mu);
}

static void test_copies_move_bytes(void) {
    gm_context* ctx = t_setup(t_desc());
    size_t n = 3 * MiB + 77, i, bad = 0;
    unsigned char *h = (unsigned char*)malloc(n), *back = (unsigned char*)malloc(n);
    void *d1, *d2;
    gm_stream s;
    for (i = 0; i < n; i++) h[i] = (unsigned char)(i * 131 + 7);
    memset(back, 0, n);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &d1, n, s));
    T_OK(gm_alloc(ctx, &d2, n, s));
    T_OK(gm_memcpy_async(ctx, d1, h, n, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(gm_memcpy_async(ctx, d2, d1, n, GM_COPY_DEVICE_TO_DEVICE, s));
    T_OK(gm_memcpy_async(ctx, back, d2, n, GM_COPY_DEVICE_TO_HOST, s));
    T_OK(gm_memcpy_async(ctx, back, back, 0, GM_COPY_HOST_TO_HOST, s)); /* zero bytes: nothing */
    T_OK(gm_stream_synchronize(ctx, s));
    for (i = 0; i < n; i++) bad += back[i] != h[i];
    T_EQ(bad, 0);
    T_OK(gm_free(ctx, d1));
    T_OK(gm_free(ctx, d2));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
    free(h);
    free(back);
}

/* The link model: 16 MiB at 128 MiB/s takes at least 125 ms; two copies in
   the same direction share the link; the two directions do not. The rate is
   low so that the model, not memcpy, sets the time on a small machine. */
static void test_link_model(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    size_t n = 16 * MiB;
    const double rate = 128.0 * 1024 * 1024, t1 = (double)n / rate;
    void *dev1, *dev2;
    unsigned char *h1, *h2;
    gm_stream s, t;
    double t0, one, same, both;
    if (!t_sim) return;
    d.sim.link_bytes_per_s = rate;
    ctx = t_setup(d);
    h1 = (unsigned char*)malloc(n);
    h2 = (unsigned char*)malloc(n);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_stream_create(ctx, &t));
    T_OK(gm_alloc(ctx, &dev1, n, s));
    T_OK(gm_alloc(ctx, &dev2, n, t));
    memset(h1, 1, n); /* touch every page first: faults are not the link */
    memset(h2, 2, n);
    memset(dev1, 3, n);
    memset(dev2, 4, n);
    t0 = t_now();
    T_OK(gm_memcpy_async(ctx, dev1, h1, n, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(gm_stream_synchronize(ctx, s));
    one = t_now() - t0;
    t0 = t_now();
    T_OK(gm_memcpy_async(ctx, dev1, h1, n, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(gm_memcpy_async(ctx, dev2, h2, n, GM_COPY_HOST_TO_DEVICE, t));
    T_OK(gm_device_synchronize(ctx));
    same = t_now() - t0;
    t0 = t_now();
    T_OK(gm_memcpy_async(ctx, dev1, h1, n, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(gm_memcpy_async(ctx, h2, dev2, n, GM_COPY_DEVICE_TO_HOST, t));
    T_OK(gm_device_synchronize(ctx));
    both = t_now() - t0;
    T_CHECK(one >= t1 * 0.99);
    T_CHECK(same >= 2 * t1 * 0.99); /* shared: twice as long */
    T_CHECK(both < same * 0.8);     /* full duplex: not serialized */
    {
        /* host copies cross no link: no bytes on either direction (a
           timing check here failed under ThreadSanitizer, whose memcpy of
           16 MiB can take longer than the modelled link) */
        uint64_t b0[2], b1[2], busy;
        T_OK(gm_sim_link_stats(ctx, 0, &b0[0], &busy));
        T_OK(gm_sim_link_stats(ctx, 1, &b0[1], &busy));
        T_OK(gm_memcpy_async(ctx, h2, h1, n, GM_COPY_HOST_TO_HOST, s));
        T_OK(gm_stream_synchronize(ctx, s));
        T_OK(gm_sim_link_stats(ctx, 0, &b1[0], &busy));
        T_OK(gm_sim_link_stats(ctx, 1, &b1[1], &busy));
        T_CHECK(b1[0] == b0[0] && b1[1] == b0[1]);
        T_CHECK(memcmp(h2, h1, n) == 0);
    }
    printf("link model: 16 MiB at 128 MiB/s in %.1f ms (model %.1f); two in one direction %.1f ms; one each way %.1f ms\n",
           one * 1e3, t1 * 1e3, same * 1e3, both * 1e3);
    T_OK(gm_free(ctx, dev1));
    T_OK(gm_free(ctx, dev2));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_stream_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    free(h1);
    free(h2);
}

static void test_faults_and_capacity(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    unsigned char h[4096], back[4096];
    void *p, *raw;
    if (!t_sim) {
        ctx = t_setup(d);
        T_EQ(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 1), GM_ERR_UNSUPPORTED);
        T_OK(gm_shutdown(ctx));
        return;
    }
    d.sim.capacity = 32 * MiB;
    d.sim.fail_copy = 2; /* the second copy of this context fails */
    ctx = t_setup(d);
    memset(h, 0x5A, sizeof h);
    memset(back, 0, sizeof back);
    T_OK(gm_alloc(ctx, &p, sizeof h, NULL));
    T_OK(gm_memcpy_async(ctx, p, h, sizeof h, GM_COPY_HOST_TO_DEVICE, NULL));
    T_EQ(gm_memcpy_async(ctx, back, p, sizeof h, GM_COPY_DEVICE_TO_HOST, NULL), GM_ERR_COPY_FAILED);
    T_OK(gm_stream_synchronize(ctx, NULL));
    T_EQ(back[0], 0); /* a failed copy moved nothing */
    T_OK(gm_memcpy_async(ctx, back, p, sizeof h, GM_COPY_DEVICE_TO_HOST, NULL)); /* one-shot */
    T_OK(gm_stream_synchronize(ctx, NULL));
    T_EQ(back[4095], 0x5A);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 3));
    T_OK(gm_memcpy_async(ctx, back, p, 16, GM_COPY_DEVICE_TO_HOST, NULL));
    T_OK(gm_memcpy_async(ctx, back, p, 16, GM_COPY_DEVICE_TO_HOST, NULL));
    T_EQ(gm_memcpy_async(ctx, back, p, 16, GM_COPY_DEVICE_TO_HOST, NULL), GM_ERR_COPY_FAILED);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 1));
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 0)); /* disarmed */
    T_OK(gm_memcpy_async(ctx, back, p, 16, GM_COPY_DEVICE_TO_HOST, NULL));
    T_EQ(gm_sim_inject(ctx, (gm_sim_fault)9, 1), GM_ERR_INVALID_ARGUMENT);
    /* raw device memory: capacity enforced, alignment at least 256 */
    T_EQ(gm_raw_alloc(ctx, &raw, 33 * MiB), GM_ERR_OUT_OF_MEMORY);
    T_OK(gm_raw_alloc(ctx, &raw, 16 * MiB));
    T_EQ((uintptr_t)raw % 256, 0);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DEVICE_ALLOC, 1));
    {
        void* r2;
        size_t f = 0, tot = 0;
        T_EQ(gm_raw_alloc(ctx, &r2, 4096), GM_ERR_OUT_OF_MEMORY);
        T_OK(gm_raw_alloc(ctx, &r2, 4096));
        T_OK(gm_mem_info(ctx, &f, &tot));
        T_EQ(tot, 32 * MiB);
        T_EQ(f, 32 * MiB - 2 * MiB - 16 * MiB - 4096); /* the cache's segment, raw, r2 */
        T_OK(gm_raw_free(ctx, r2, 4096));
    }
    { /* only the sim's own mappings, at their own length, are unmapped */
        int x;
        T_EQ(gm_raw_free(ctx, &x, 4096), GM_ERR_FOREIGN_POINTER);
        T_EQ(gm_raw_free(ctx, (void*)(uintptr_t)0x10000, 4096), GM_ERR_FOREIGN_POINTER);
        T_EQ(gm_raw_free(ctx, raw, 32 * MiB), GM_ERR_INVALID_ARGUMENT);
        T_EQ(gm_raw_free(ctx, (char*)raw + 4096, 4096), GM_ERR_FOREIGN_POINTER);
    }
    T_OK(gm_raw_free(ctx, raw, 16 * MiB));
    T_OK(gm_raw_alloc(ctx, &raw, 4 * MiB)); /* left mapped: shutdown unmaps it, with a warning */
    T_OK(gm_free(ctx, p));
    T_OK(gm_shutdown(ctx));
}

/* A 55 GB reservation costs no memory: MAP_NORESERVE and nothing touched. */
static void test_big_untouched(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void* p[11];
    int i;
    if (!t_sim) return;
    d.sim.capacity = (size_t)80 << 30;
    ctx = t_setup(d);
    for (i = 0; i < 11; i++) T_OK(gm_alloc(ctx, &p[i], (size_t)5 << 30, NULL));
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 11; i++) T_OK(gm_free(ctx, p[i]));
    T_OK(gm_shutdown(ctx));
}

/* Unified memory (the sim's model of the UVM driver): residency per 2 MiB
   chunk, checked by the links' byte counters (exact: the model is
   deterministic) and, for time, by lower bounds only. */
static void link_bytes(gm_context* ctx, uint64_t b[2]) {
    uint64_t busy;
    T_OK(gm_sim_link_stats(ctx, 0, &b[0], &busy));
    T_OK(gm_sim_link_stats(ctx, 1, &b[1], &busy));
}
static int resident_ok(gm_context* ctx) { /* the LRU sums to resident, which fits beside device memory */
    gm__sim* sim = (gm__sim*)ctx->bs;
    gm__sim_chunk* c;
    size_t sum = 0;
    int ok;
    pthread_mutex_lock(&sim->mu);
    for (c = sim->lru; c; c = c->next) sum += gm__sim_clen(c);
    ok = sum == sim->resident && sim->used + sim->resident <= sim->capacity;
    pthread_mutex_unlock(&sim->mu);
    return ok;
}
static size_t resident(gm_context* ctx) {
    gm__sim* sim = (gm__sim*)ctx->bs;
    size_t n;
    pthread_mutex_lock(&sim->mu);
    n = sim->resident;
    pthread_mutex_unlock(&sim->mu);
    return n;
}
static void prefetch(gm_context* ctx, void* p, size_t n, int to_dev) {
    T_OK(ctx->be->managed_prefetch(ctx, p, n, to_dev, NULL));
    T_OK(gm_stream_synchronize(ctx, NULL));
}

static void test_unified_memory(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    const double rate = 1024.0 * 1024 * 1024, chunk = 2.0 * (double)MiB / rate;
    uint64_t b0[2], b1[2];
    void *a, *b, *c, *raw;
    unsigned char h[4096];
    double t0, dt;
    if (!t_sim) return;
    d.sim.capacity = 16 * MiB;
    d.sim.link_bytes_per_s = rate;
    ctx = t_setup(d);
    T_EQ(((gm__sim*)ctx->bs)->used, 0);
    T_OK(ctx->be->managed_alloc(ctx, &a, 8 * MiB));
    T_OK(ctx->be->managed_alloc(ctx, &b, 12 * MiB));
    T_OK(ctx->be->managed_alloc(ctx, &c, 24 * MiB));
    T_EQ(resident(ctx), 0); /* fresh memory is nowhere */

    /* first touch populates the device without copying; a second prefetch
       of what is there moves nothing */
    link_bytes(ctx, b0);
    prefetch(ctx, a, 8 * MiB, 1);
    link_bytes(ctx, b1);
    T_EQ(b1[0] - b0[0], 0);
    T_EQ(resident(ctx), 8 * MiB);
    prefetch(ctx, a, 8 * MiB, 1);
    link_bytes(ctx, b0);
    T_EQ(b0[0] - b1[0], 0);
    T_EQ(b0[1] - b1[1], 0);
    /* back to the host and in again: the bytes cross each way once */
    prefetch(ctx, a, 8 * MiB, 0);
    T_EQ(resident(ctx), 0);
    prefetch(ctx, a, 8 * MiB, 1);
    link_bytes(ctx, b1);
    T_EQ(b1[1] - b0[1], 8 * MiB);
    T_EQ(b1[0] - b0[0], 8 * MiB);
    T_CHECK(resident_ok(ctx));

    /* 12 MiB more than the 8 free: the two least recently migrated chunks of
       a go out first, serialized with the migration in */
    prefetch(ctx, b, 12 * MiB, 0); /* on the host, as after the CPU wrote it */
    link_bytes(ctx, b0);
    t0 = t_now();
    prefetch(ctx, b, 12 * MiB, 1);
    dt = t_now() - t0;
    link_bytes(ctx, b1);
    T_EQ(b1[0] - b0[0], 12 * MiB);
    T_EQ(b1[1] - b0[1], 4 * MiB);
    T_CHECK(dt >= 8 * chunk * 0.99); /* 6 chunks in, 2 out, no overlap */
    T_EQ(resident(ctx), 16 * MiB);
    T_CHECK(resident_ok(ctx));

    /* a range larger than the device: the prefetch brings all 12 chunks in,
       evicting the other 8 and 4 of its own, and the use after it misses in
       every chunk (LRU under a cyclic walk): 12 more in, 12 more out */
    prefetch(ctx, c, 24 * MiB, 0);
    link_bytes(ctx, b0);
    t0 = t_now();
    prefetch(ctx, c, 24 * MiB, 1);
    dt = t_now() - t0;
    link_bytes(ctx, b1);
    T_EQ(b1[0] - b0[0], 48 * MiB);
    T_EQ(b1[1] - b0[1], 48 * MiB);
    T_CHECK(dt >= 48 * chunk * 0.99);
    T_EQ(resident(ctx), 16 * MiB);
    T_CHECK(resident_ok(ctx));

    /* a device allocation takes its room from resident chunks, and still
       cannot have more than the device minus device memory */
    link_bytes(ctx, b0);
    T_OK(gm_raw_alloc(ctx, &raw, 6 * MiB));
    link_bytes(ctx, b1);
    T_EQ(b1[1] - b0[1], 6 * MiB);
    T_EQ(resident(ctx), 10 * MiB);
    T_CHECK(resident_ok(ctx));
    {
        void* big;
        T_EQ(gm_raw_alloc(ctx, &big, 11 * MiB), GM_ERR_OUT_OF_MEMORY);
    }
    T_EQ(gm_check(ctx), 0);

    /* a copy into a chunk on the host faults it in first (its 2 MiB, then
       the copy's bytes), slower than a prefetch; the bytes land as written */
    memset(h, 0xA5, sizeof h);
    link_bytes(ctx, b0);
    t0 = t_now();
    T_OK(gm_memcpy_async(ctx, (char*)a + 4 * MiB, h, sizeof h, GM_COPY_DEFAULT, NULL));
    T_OK(gm_stream_synchronize(ctx, NULL));
    dt = t_now() - t0;
    link_bytes(ctx, b1);
    T_EQ(b1[0] - b0[0], 2 * MiB + sizeof h);
    T_CHECK(dt >= chunk + GM__UVM_ROUNDS * GM__UVM_BATCH_NS * 1e-9);
    T_CHECK(memcmp((char*)a + 4 * MiB, h, sizeof h) == 0);
    prefetch(ctx, (char*)a + 4 * MiB, 2 * MiB, 1); /* now there: nothing moves */
    link_bytes(ctx, b0);
    T_EQ(b0[0] - b1[0], 0);
    T_CHECK(resident_ok(ctx));

    /* freeing a range drops its chunks from the device */
    T_OK(ctx->be->managed_free(ctx, c, 24 * MiB));
    T_CHECK(resident_ok(ctx));
    T_EQ(resident(ctx), 2 * MiB); /* a's chunk the copy brought in */
    T_OK(gm_raw_free(ctx, raw, 6 * MiB));
    T_OK(ctx->be->managed_free(ctx, a, 8 * MiB));
    T_OK(ctx->be->managed_free(ctx, b, 12 * MiB));
    T_EQ(resident(ctx), 0);

    /* less room than one chunk: it crosses the link both ways at the
       prefetch and again at the use, and stays on the host */
    T_OK(gm_raw_alloc(ctx, &raw, 15 * MiB));
    T_OK(ctx->be->managed_alloc(ctx, &a, 2 * MiB));
    prefetch(ctx, a, 2 * MiB, 0);
    link_bytes(ctx, b0);
    prefetch(ctx, a, 2 * MiB, 1);
    link_bytes(ctx, b1);
    T_EQ(b1[0] - b0[0], 4 * MiB);
    T_EQ(b1[1] - b0[1], 4 * MiB);
    T_EQ(resident(ctx), 0);
    T_CHECK(resident_ok(ctx));
    T_OK(ctx->be->managed_free(ctx, a, 2 * MiB));
    T_OK(gm_raw_free(ctx, raw, 15 * MiB));
    T_OK(gm_shutdown(ctx));
}

static void test_backend_choice(void) {
    gm_desc d = t_desc();
    gm_context* ctx = NULL;
    d.ignore_env = 1;
    d.log_fn = t_log;
#ifndef GPUMEM_CUDA
    d.backend = GM_BACKEND_CUDA;
    T_EQ(gm_setup(&ctx, &d), GM_ERR_UNSUPPORTED); /* not built in */
    T_CHECK(ctx == NULL);
    d.backend = GM_BACKEND_DEFAULT;
    T_OK(gm_setup(&ctx, &d));
    T_CHECK(strcmp(gm_backend_name(ctx), "sim") == 0);
    T_OK(gm_shutdown(ctx));
#else
    d.backend = GM_BACKEND_SIM; /* a CUDA build still has the sim */
    T_OK(gm_setup(&ctx, &d));
    T_CHECK(strcmp(gm_backend_name(ctx), "sim") == 0);
    T_OK(gm_shutdown(ctx));
    d.backend = GM_BACKEND_CUDA;
    d.device = 4096;
    {
        gm_result r = gm_setup(&ctx, &d);
        T_CHECK(r == GM_ERR_NO_DEVICE);
    }
#endif
    T_CHECK(strcmp(gm_result_string(GM_ERR_DOUBLE_FREE), "double free") == 0);
    T_CHECK(strcmp(gm_result_string((gm_result)-999), "unknown result") == 0);
}

/* sim.run_inline: a small copy queued on an idle stream has completed when
   the call returns (no hand-off to the stream's thread), and counts on its
   link; one queued behind work still waits for it, in order; a copy over a
   modelled link, or a large one, still goes to the stream's thread. */
static void test_run_inline(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s;
    t_gate g;
    void *dev, *ev;
    unsigned char h[4096], back[4096];
    uint64_t bytes = 0, busy = 0;
    size_t i, bad = 0;
    if (!t_sim) return;
    d.sim.run_inline = GM_TOGGLE_ON;
    ctx = t_setup(d);
    for (i = 0; i < sizeof h; i++) h[i] = (unsigned char)(i * 7 + 1);
    memset(back, 0, sizeof back);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &dev, sizeof h, s));
    T_OK(gm_stream_synchronize(ctx, s));
    T_OK(ctx->be->event_create(ctx, &ev));
    T_OK(gm_memcpy_async(ctx, dev, h, sizeof h, GM_COPY_HOST_TO_DEVICE, s));
    T_OK(ctx->be->event_record(ctx, ev, s));
    T_OK(ctx->be->event_query(ctx, ev)); /* done already: it ran in this thread */
    T_OK(gm_sim_link_stats(ctx, 0, &bytes, &busy));
    T_EQ(bytes, sizeof h);
    /* behind a host function that has not run, a copy waits its turn */
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g));
    T_OK(gm_memcpy_async(ctx, back, dev, sizeof back, GM_COPY_DEVICE_TO_HOST, s));
    T_OK(ctx->be->event_record(ctx, ev, s));
    T_EQ(ctx->be->event_query(ctx, ev), GM_NOT_READY);
    for (i = 0; i < sizeof back; i++) bad += back[i] != 0;
    T_EQ(bad, 0);
    t_gate_open(&g);
    T_OK(gm_stream_synchronize(ctx, s));
    for (i = 0; i < sizeof back; i++) bad += back[i] != h[i];
    T_EQ(bad, 0);
    T_OK(ctx->be->event_destroy(ctx, ev));
    T_OK(gm_free(ctx, dev));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
    /* the option by name, and a modelled link: the copy is the stream thread's */
    d = t_desc();
    d.conf = "sim_inline:on,sim_link:1M";
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_alloc(ctx, &dev, 16 * sizeof h, s));
    T_OK(gm_stream_synchronize(ctx, s));
    T_OK(ctx->be->event_create(ctx, &ev));
    {
        unsigned char* big = (unsigned char*)calloc(16, sizeof h);
        T_OK(gm_memcpy_async(ctx, dev, big, 16 * sizeof h, GM_COPY_HOST_TO_DEVICE, s)); /* 64 KiB at 1 MiB/s: 62 ms */
        T_OK(ctx->be->event_record(ctx, ev, s));
        T_EQ(ctx->be->event_query(ctx, ev), GM_NOT_READY);
        T_OK(gm_stream_synchronize(ctx, s));
        free(big);
    }
    T_OK(ctx->be->event_destroy(ctx, ev));
    T_OK(gm_free(ctx, dev));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* sim.move_bytes off (sim_bytes:off): copies keep their order and link
   accounting, on the stream thread or inline, but move no bytes; the
   default moves them. */
static void test_move_bytes_off(void) {
    gm_desc d;
    gm_context* ctx;
    gm_stream s;
    void* dev;
    unsigned char h[4096], back[4096];
    uint64_t bytes = 0, busy = 0;
    size_t i, bad;
    int inl;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    T_EQ(gm_query_desc(ctx).sim.move_bytes, GM_TOGGLE_ON);
    T_OK(gm_shutdown(ctx));
    for (i = 0; i < sizeof h; i++) h[i] = (unsigned char)(i * 5 + 3);
    for (inl = 0; inl < 2; inl++) {
        d = t_desc();
        d.conf = inl ? "sim_bytes:off,sim_inline:on" : "sim_bytes:off";
        ctx = t_setup(d);
        T_EQ(gm_query_desc(ctx).sim.move_bytes, GM_TOGGLE_OFF);
        T_OK(gm_stream_create(ctx, &s));
        T_OK(gm_alloc(ctx, &dev, sizeof h, s));
        T_OK(gm_memcpy_async(ctx, dev, h, sizeof h, GM_COPY_HOST_TO_DEVICE, s));
        memset(back, 0xee, sizeof back);
        T_OK(gm_memcpy_async(ctx, back, dev, sizeof back, GM_COPY_DEVICE_TO_HOST, s));
        T_OK(gm_stream_synchronize(ctx, s));
        for (bad = 0, i = 0; i < sizeof back; i++) bad += back[i] != 0xee; /* nothing came back */
        T_EQ(bad, 0);
        T_OK(gm_sim_link_stats(ctx, 0, &bytes, &busy));
        T_EQ(bytes, sizeof h); /* counted on the link all the same */
        T_OK(gm_free(ctx, dev));
        T_OK(gm_stream_destroy(ctx, s));
        T_OK(gm_shutdown(ctx));
    }
}

/* A hand-off as a stream's worker stops polling for work: an op queued
   at any delay after the last one completed must run without another op
   to wake the worker. Four threads, each with its own stream, queue ops
   at delays around the polling window (0..200 us). Each op must be done
   within a second by event queries alone (a lost wake-up would leave it
   queued for good); every fourth is waited for instead, and must have run
   when the wait returns (the waiter's side of the hand-off). */
typedef struct handoff_arg {
    gm_context* ctx;
    unsigned long long seed;
    int ran, lost, n;
} handoff_arg;
static void count_fn(void* a) { __atomic_fetch_add((int*)a, 1, __ATOMIC_RELAXED); }
static void* handoff_worker(void* p) {
    handoff_arg* a = (handoff_arg*)p;
    gm_stream s;
    void* ev;
    int i;
    if (gm_stream_create(a->ctx, &s) != GM_OK || a->ctx->be->event_create(a->ctx, &ev) != GM_OK) {
        a->lost = -1;
        return NULL;
    }
    for (i = 0; i < 5000 && !a->lost; i++) {
        struct timespec ts;
        double t0;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(t_rand_r(&a->seed) % 200000);
        nanosleep(&ts, NULL);
        if (gm_launch_host(a->ctx, s, count_fn, &a->ran) != GM_OK || a->ctx->be->event_record(a->ctx, ev, s) != GM_OK) {
            a->lost = -1;
            break;
        }
        a->n++;
        if (i % 4 == 3) {
            if (a->ctx->be->event_sync(a->ctx, ev) != GM_OK || __atomic_load_n(&a->ran, __ATOMIC_RELAXED) != a->n)
                a->lost++;
            continue;
        }
        t0 = t_now();
        while (a->ctx->be->event_query(a->ctx, ev) == GM_NOT_READY && t_now() - t0 < 1.0) sched_yield();
        if (a->ctx->be->event_query(a->ctx, ev) == GM_NOT_READY) a->lost++;
    }
    gm_stream_synchronize(a->ctx, s);
    a->ctx->be->event_destroy(a->ctx, ev);
    gm_stream_destroy(a->ctx, s);
    return NULL;
}
static void test_handoff_race(void) {
    gm_context* ctx;
    pthread_t th[4];
    handoff_arg a[4];
    int i;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    for (i = 0; i < 4; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].ctx = ctx;
        a[i].seed = 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
        T_CHECK(pthread_create(&th[i], NULL, handoff_worker, &a[i]) == 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        T_EQ(a[i].lost, 0);
        T_EQ(a[i].ran, a[i].n);
    }
    T_OK(gm_shutdown(ctx));
}

/* A wait on a stream that is being destroyed (its thread told to stop,
   its queue still draining) returns only once its op has run: a waiter's
   poll ends on progress, never on the stop. The waiter's polling window is
   set to its longest, as a stream that handed off quickly would have it. */
typedef struct retire_arg {
    gm_context* ctx;
    gm_stream s;
} retire_arg;
static void slow_fn(void* a) {
    struct timespec ts;
    ts.tv_sec = 0;
    ts.tv_nsec = 50 * 1000 * 1000;
    nanosleep(&ts, NULL);
    __atomic_store_n((int*)a, 1, __ATOMIC_RELEASE);
}
static void* retire_fn(void* p) {
    retire_arg* a = (retire_arg*)p;
    a->ctx->be->stream_destroy(a->ctx, a->s); /* stop, drain, join */
    return NULL;
}
static void test_wait_while_retiring(void) {
    gm_context* ctx;
    gm__sim_stream* st;
    retire_arg ra;
    pthread_t th;
    void* ev;
    int done = 0;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    T_OK(ctx->be->stream_create(ctx, &ra.s));
    ra.ctx = ctx;
    st = (gm__sim_stream*)ra.s;
    pthread_mutex_lock(&st->mu);
    st->wspin_ns = GM__SIM_SPIN_MAX;
    pthread_mutex_unlock(&st->mu);
    T_OK(ctx->be->launch_host(ctx, ra.s, slow_fn, &done));
    T_OK(ctx->be->event_create(ctx, &ev));
    T_OK(ctx->be->event_record(ctx, ev, ra.s));
    T_CHECK(pthread_create(&th, NULL, retire_fn, &ra) == 0);
    while (!__atomic_load_n(&st->stop, __ATOMIC_RELAXED)) sched_yield();
    T_OK(ctx->be->event_sync(ctx, ev));
    T_EQ(__atomic_load_n(&done, __ATOMIC_ACQUIRE), 1);
    pthread_join(th, NULL);
    T_OK(ctx->be->event_destroy(ctx, ev));
    T_OK(gm_shutdown(ctx));
}

/* An event recorded again on another thread while it is waited for (the
   allocator lets go of its lock to wait for events another thread may
   record again meanwhile): a wait reads the stream and the count of one
   record, never one's stream with another's count. Stream a has done one
   op, b thousands: before, a sync could read a with b's count and wait
   for good (here a watchdog then pushes a past it and the case fails),
   and a query could lock one stream and unlock the other. */
typedef struct rerecord_arg {
    gm_context* ctx;
    void* ev;
    gm_stream a, b;
    int stop, torn;
} rerecord_arg;
static void nop_fn(void* a) { (void)a; }
static void* rerecord_fn(void* p) {
    rerecord_arg* r = (rerecord_arg*)p;
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        r->ctx->be->event_record(r->ctx, r->ev, r->a);
        r->ctx->be->event_record(r->ctx, r->ev, r->b);
    }
    return NULL;
}
static void* rerecord_watch(void* p) {
    rerecord_arg* r = (rerecord_arg*)p;
    int k;
    for (k = 0; k < 20000 && !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE); k++) usleep(1000);
    if (__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) return NULL;
    __atomic_store_n(&r->torn, 1, __ATOMIC_RELEASE); /* a sync is stuck: let it go, until the case stops */
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        for (k = 0; k < 4000; k++) r->ctx->be->launch_host(r->ctx, r->a, nop_fn, NULL);
        usleep(10000);
    }
    return NULL;
}
static void test_record_while_waited(void) {
    gm_context* ctx;
    rerecord_arg r;
    pthread_t th, wd;
    int i;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    T_OK(ctx->be->stream_create(ctx, &r.a));
    T_OK(ctx->be->stream_create(ctx, &r.b));
    T_OK(ctx->be->launch_host(ctx, r.a, nop_fn, NULL));
    for (i = 0; i < 3000; i++) T_OK(ctx->be->launch_host(ctx, r.b, nop_fn, NULL));
    T_OK(ctx->be->stream_sync(ctx, r.a));
    T_OK(ctx->be->stream_sync(ctx, r.b));
    T_OK(ctx->be->event_create(ctx, &r.ev));
    T_OK(ctx->be->event_record(ctx, r.ev, r.a));
    T_CHECK(pthread_create(&th, NULL, rerecord_fn, &r) == 0);
    T_CHECK(pthread_create(&wd, NULL, rerecord_watch, &r) == 0);
    for (i = 0; i < 200000 && !__atomic_load_n(&r.torn, __ATOMIC_ACQUIRE); i++) {
        if (ctx->be->event_sync(ctx, r.ev) != GM_OK) break;
    }
    T_EQ(i, 200000);
    /* a query reads one record whole too: before, it could lock one stream and unlock another (a
       deadlock, or under ThreadSanitizer its report) */
    for (i = 0; i < 200000 && !__atomic_load_n(&r.torn, __ATOMIC_ACQUIRE); i++) (void)ctx->be->event_query(ctx, r.ev);
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    pthread_join(wd, NULL);
    T_EQ(__atomic_load_n(&r.torn, __ATOMIC_ACQUIRE), 0);
    T_OK(ctx->be->event_destroy(ctx, r.ev));
    T_OK(ctx->be->stream_destroy(ctx, r.a));
    T_OK(ctx->be->stream_destroy(ctx, r.b));
    T_OK(gm_shutdown(ctx));
}

/* Two threads record one event at once, on two streams (CUDA allows it):
   each record claims the event's sequence lock whole. Before, both could
   bump its version together: records were lost from the count, the
   version could stay odd (every later query or sync of the event spun for
   good), and a reader could take one record's stream with the other's
   count. */
typedef struct tworec_arg {
    gm_context* ctx;
    void* ev;
    gm_stream s;
    int* go;
} tworec_arg;
static void* tworec_fn(void* p) {
    tworec_arg* a = (tworec_arg*)p;
    int i;
    while (!__atomic_load_n(a->go, __ATOMIC_ACQUIRE)) sched_yield();
    for (i = 0; i < 20000; i++) a->ctx->be->event_record(a->ctx, a->ev, a->s);
    return NULL;
}
static void test_two_recorders(void) {
    gm_context* ctx;
    tworec_arg x, y;
    pthread_t t1, t2;
    void* ev;
    int go = 0;
    if (!t_sim) return;
    ctx = t_setup(t_desc());
    T_OK(ctx->be->stream_create(ctx, &x.s));
    T_OK(ctx->be->stream_create(ctx, &y.s));
    T_OK(ctx->be->event_create(ctx, &ev));
    x.ctx = y.ctx = ctx;
    x.ev = y.ev = ev;
    x.go = y.go = &go;
    T_CHECK(pthread_create(&t1, NULL, tworec_fn, &x) == 0);
    T_CHECK(pthread_create(&t2, NULL, tworec_fn, &y) == 0);
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    T_EQ(__atomic_load_n(&((gm__sim_event*)ev)->ver, __ATOMIC_ACQUIRE), 2u * 40000u); /* each record whole, once */
    T_OK(ctx->be->event_query(ctx, ev));
    T_OK(ctx->be->event_sync(ctx, ev));
    T_OK(ctx->be->event_destroy(ctx, ev));
    T_OK(ctx->be->stream_destroy(ctx, x.s));
    T_OK(ctx->be->stream_destroy(ctx, y.s));
    T_OK(gm_shutdown(ctx));
}

int main(void) {
    test_backend_choice();
    test_async_and_ordered();
    test_copies_move_bytes();
    test_link_model();
    test_faults_and_capacity();
    test_big_untouched();
    test_unified_memory();
    test_run_inline();
    test_move_bytes_off();
    test_handoff_race();
    test_wait_while_retiring();
    test_record_while_waited();
    test_two_recorders();
    return t_done();
}
