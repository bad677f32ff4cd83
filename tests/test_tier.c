/* The tiered manager against a model: tensors far larger in total than the
   device budget, random create / acquire / write / verify / release (dirty
   or clean) / prefetch / evict / destroy on two streams, with every byte of
   every tensor checked by stream work ("kernels") on every acquire and
   gm_check after every step; faults in the middle of evictions and
   bring-ins; misuse; the host tier full; the allocator evicting for plain
   gm_alloc; managed fallback; priorities and pinning; prefetch. Sim only:
   the kernels read and write device memory from the host. */
#include "gm_tier_test.h"

/* Under a sanitizer every byte the kernels touch is instrumented: a smaller
   walk of smaller tensors keeps the run in seconds. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define WALK_STEPS 1500
#define BIG_MAX (256 * KiB)
#define COMPACT_STEPS 250 /* the walks of large tensors (1 to 4 MiB, where compaction works) */
#define MT_BIG_STEPS 100
#else
#define WALK_STEPS 6000
#define BIG_MAX (2 * MiB)
#define COMPACT_STEPS 3000
#define MT_BIG_STEPS 1500
#endif

static gm_context* tier_ctx(size_t dev, size_t host, gm_fallback fb) {
    gm_desc d = t_desc();
    d.device_budget = dev;
    d.host_budget = host;
    d.fallback = fb;
    return t_setup(d);
}

static void test_roundtrip(void) {
    gm_context* ctx = tier_ctx(64 * MiB, 256 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor a;
    gm_tier_stats ts;
    T_OK(gm_tensor_create(ctx, &a, 3 * MiB + 7));
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    fill(ctx, a, 3 * MiB + 7, 11, NULL);
    T_OK(gm_tensor_evict(ctx, a));
    T_EQ(where(ctx, a), GM_TIER_HOST);
    verify(ctx, a, 3 * MiB + 7, 11, NULL);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_OK(gm_tensor_evict(ctx, a)); /* clean: the host copy is still good, no copy */
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.evictions, 2);
    T_EQ(ts.clean_evictions, 1);
    T_EQ(ts.bytes_to_host, 3 * MiB + 7);
    T_EQ(ts.bytes_to_device, 3 * MiB + 7);
    T_EQ(ts.host_bytes, 3 * MiB + 7);
    T_EQ(ts.device_bytes, 0);
    verify(ctx, a, 3 * MiB + 7, 11, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.tensors, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

static void test_misuse(void) {
    gm_context* ctx = tier_ctx(16 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor a, b, none = {0}, bogus = {0x7fffffff, 0};
    gm_stream s;
    void* p;
    gm_tier w;
    T_EQ(gm_tensor_acquire(ctx, a = none, NULL, &p), GM_ERR_STALE_HANDLE); /* no tier yet */
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tensor_create(ctx, &a, 4096));
    T_EQ(gm_tensor_release(ctx, a, NULL, 0), GM_ERR_BAD_STATE);     /* release without acquire */
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    T_EQ(gm_tensor_acquire(ctx, a, s, &p), GM_ERR_INVALID_STREAM);  /* acquired on another stream */
    T_EQ(gm_tensor_release(ctx, a, s, 0), GM_ERR_INVALID_STREAM);   /* released on another stream */
    T_EQ(gm_tensor_destroy(ctx, a), GM_ERR_BAD_STATE);              /* destroy while acquired */
    T_EQ(gm_tensor_evict(ctx, a), GM_ERR_BAD_STATE);                /* evict while acquired */
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));                      /* nested on one stream */
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_OK(gm_tensor_destroy(ctx, a));
    T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_STALE_HANDLE); /* destroyed */
    T_EQ(gm_tensor_destroy(ctx, a), GM_ERR_STALE_HANDLE);
    T_OK(gm_tensor_create(ctx, &b, 4096)); /* same slot, new generation */
    T_CHECK((b.id & 0xfffff) == (a.id & 0xfffff) && b.id != a.id);
    T_EQ(gm_tensor_where(ctx, a, &w), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_where(ctx, bogus, &w), GM_ERR_STALE_HANDLE);
    T_EQ(gm_tensor_where(ctx, none, &w), GM_ERR_STALE_HANDLE);
    if (t_sim) /* CUDA cannot tell a made-up stream handle: undefined behaviour there */
        T_EQ(gm_tensor_acquire(ctx, b, (gm_stream)(void*)&w, &p), GM_ERR_INVALID_STREAM);
    T_EQ(gm_tensor_acquire(ctx, b, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tensor_create(NULL, &b, 1), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* Faults in the middle of an eviction or a bring-in: an error, and the
   tensor keeps its last good copy. */
static void test_faults(void) {
    gm_context* ctx;
    gm_tensor a;
    void* p;
    if (!t_sim) return; /* the device's faults are the sim's to inject */
    ctx = tier_ctx(64 * MiB, 256 * MiB, GM_FALLBACK_DEFAULT);
    { /* no pinned memory to be had: the tensor stays on the device */
        gm_context* c2 = tier_ctx(16 * MiB, 2 * MiB, GM_FALLBACK_DEFAULT);
        T_OK(gm_tensor_create(c2, &a, 2 * MiB));
        fill(c2, a, 2 * MiB, 5, NULL);
        T_OK(gm_sim_inject(c2, GM_SIM_FAULT_HOST_ALLOC, 1));
        T_EQ(gm_tensor_evict(c2, a), GM_ERR_HOST_OUT_OF_MEMORY);
        T_EQ(where(c2, a), GM_TIER_DEVICE);
        verify(c2, a, 2 * MiB, 5, NULL);
        T_EQ(errors_now(c2), 0);
        T_EQ(gm_check(c2), 0);
        T_OK(gm_shutdown(c2));
    }
    T_OK(gm_tensor_create(ctx, &a, 2 * MiB));
    fill(ctx, a, 2 * MiB, 5, NULL);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_HOST_ALLOC, 1)); /* a 64 MiB pinned chunk refused: 2 MiB will do */
    T_OK(gm_tensor_evict(ctx, a));
    T_EQ(where(ctx, a), GM_TIER_HOST);
    fill(ctx, a, 2 * MiB, 5, NULL); /* back on the device, the host copy stale */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 1)); /* the copy out fails */
    T_EQ(gm_tensor_evict(ctx, a), GM_ERR_COPY_FAILED);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    verify(ctx, a, 2 * MiB, 5, NULL);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_evict(ctx, a));
    T_EQ(where(ctx, a), GM_TIER_HOST);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 1)); /* the copy in fails */
    T_EQ(gm_tensor_acquire(ctx, a, NULL, &p), GM_ERR_COPY_FAILED);
    T_EQ(where(ctx, a), GM_TIER_HOST);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_DEVICE_ALLOC, 1)); /* no device room, once: retried */
    verify(ctx, a, 2 * MiB, 5, NULL);
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_shutdown(ctx));
}

/* No disk tier: when device and host are both full, an honest OOM, and
   every earlier tensor intact. Plain gm_alloc makes room by eviction. */
static void test_full_and_alloc_evicts(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 8 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor t[64];
    int n = 0, i;
    gm_result r = GM_OK;
    void* big;
    gm_tier_stats ts;
    while (n < 64 && (r = gm_tensor_create(ctx, &t[n], MiB)) == GM_OK) {
        fill(ctx, t[n], MiB, (unsigned)n + 100, NULL);
        n++;
    }
    T_EQ(r, GM_ERR_OUT_OF_MEMORY);
    T_CHECK(n >= 14 && n <= 16); /* 8 MiB on the device and 8 MiB on the host */
    {   /* with both tiers full a host tensor still comes in: it trades
           places with a victim on the device (a swap), nothing lost */
        void* p;
        int j;
        for (i = 0; i < n && where(ctx, t[i]) != GM_TIER_HOST; i++) {}
        T_CHECK(i < n);
        T_OK(gm_tensor_acquire(ctx, t[i], NULL, &p));
        T_EQ(where(ctx, t[i]), GM_TIER_DEVICE);
        T_OK(gm_tensor_release(ctx, t[i], NULL, 0));
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_EQ(ts.swaps, 1);
        T_EQ(gm_check(ctx), 0);
        for (j = 0; j < n; j++) verify(ctx, t[j], MiB, (unsigned)j + 100, NULL); /* each read swaps again */
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_CHECK(ts.swaps > 1);
        T_EQ(errors_now(ctx), 0);
        T_EQ(gm_check(ctx), 0);
    }
    /* a little slack, and every tensor can be read again, swapping */
    T_OK(gm_tensor_destroy(ctx, t[--n]));
    T_OK(gm_tensor_destroy(ctx, t[--n]));
    for (i = 0; i < n; i++) verify(ctx, t[i], MiB, (unsigned)i + 100, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = n / 2; i < n; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    n /= 2;
    /* a plain allocation: the OOM ladder asks the manager to evict */
    T_OK(gm_alloc(ctx, &big, 6 * MiB, NULL));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.evictions >= 1);
    T_OK(gm_free(ctx, big));
    for (i = 0; i < n; i++) verify(ctx, t[i], MiB, (unsigned)i + 100, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < n; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* A host copy in pieces: with every chunk of the host pool holding a
   tensor and a hole none fits whole, a tensor leaves the device into
   extents of several chunks (before, it could not leave: the host tier
   full). Its bytes come back through each path: a copy in, a copy out
   after a write, and a swap with a device copy (device and host full),
   whose pieces end where extents do (19 + 19 + 7 MiB against 4 MiB
   pieces). */
static void test_host_pieces(void) {
    enum { N = 45 };
    gm_context* ctx = tier_ctx(64 * MiB, 192 * MiB, GM_FALLBACK_FAIL);
    gm_tensor t[5];
    gm_tier_stats ts;
    int64_t scattered;
    int i;
    for (i = 0; i < 4; i++) { /* one to each 64 MiB chunk, leaving 19 MiB in each; the fourth in pieces */
        T_OK(gm_tensor_create(ctx, &t[i], N * MiB + 5));
        fill(ctx, t[i], N * MiB + 5, 40u + (unsigned)i, NULL);
        T_OK(gm_tensor_evict(ctx, t[i]));
        T_EQ(where(ctx, t[i]), GM_TIER_HOST);
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_scattered, 1);
    T_EQ(ts.host_reserved, 192 * (int64_t)MiB);
    { /* a chain made a cycle: gm_check says so, and ends */
        gm__block *first = gm__tensor_get(ctx, t[3])->host, *last = first;
        T_CHECK(first && first->r);
        while (last->r) last = last->r;
        last->r = first;
        T_CHECK(gm_check(ctx) != 0);
        last->r = NULL;
        T_EQ(gm_check(ctx), 0);
    }
    verify(ctx, t[3], N * MiB + 5, 43, NULL); /* in from the pieces */
    fill(ctx, t[3], N * MiB + 5, 53, NULL);   /* written: the pieces go; out into new ones */
    if (t_sim) { /* the second piece's copy fails: the tensor stays on the device, the pieces go back */
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 2));
        T_EQ(gm_tensor_evict(ctx, t[3]), GM_ERR_COPY_FAILED);
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 0));
        T_EQ(where(ctx, t[3]), GM_TIER_DEVICE);
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_EQ(ts.host_bytes, 3 * (int64_t)(N * MiB + 5));
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    scattered = ts.host_scattered;
    T_OK(gm_tensor_evict(ctx, t[3]));
    T_EQ(where(ctx, t[3]), GM_TIER_HOST);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_scattered, scattered + 1);
    T_EQ(gm_check(ctx), 0);
    /* device and host full: t[4] on the device trades places with t[3] in pieces, and back */
    T_OK(gm_tensor_create(ctx, &t[4], N * MiB));
    fill(ctx, t[4], N * MiB, 44, NULL);
    verify(ctx, t[3], N * MiB + 5, 53, NULL);
    T_EQ(where(ctx, t[3]), GM_TIER_DEVICE);
    T_EQ(where(ctx, t[4]), GM_TIER_HOST);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, t[4], N * MiB, 44, NULL);
    T_EQ(where(ctx, t[4]), GM_TIER_DEVICE);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.swaps, 2);
    for (i = 0; i < 3; i++) verify(ctx, t[i], N * MiB + 5, 40u + (unsigned)i, NULL);
    verify(ctx, t[3], N * MiB + 5, 53, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 5; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_bytes, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A host copy in pieces that needs more new chunks than one: three 45 MiB
   tensors fill three 64 MiB chunks of a 320 MiB host tier, and a 150 MiB
   tensor takes the three 19 MiB tails and two new chunks (64 + 29 MiB of
   the 128 left). Before, the pool grew one chunk at most, the eviction
   failed with the budget's room unused, and its chunk stayed reserved. */
static void test_host_pieces_grow(void) {
    enum { N = 45, BIG = 150 };
    gm_context* ctx = tier_ctx(160 * MiB, 320 * MiB, GM_FALLBACK_FAIL);
    gm_tensor t[4];
    gm_tier_stats ts;
    int i;
    for (i = 0; i < 3; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], N * MiB));
        fill(ctx, t[i], N * MiB, 60u + (unsigned)i, NULL);
        T_OK(gm_tensor_evict(ctx, t[i]));
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_reserved, 192 * (int64_t)MiB);
    T_OK(gm_tensor_create(ctx, &t[3], BIG * MiB));
    fill(ctx, t[3], BIG * MiB, 63, NULL);
    T_OK(gm_tensor_evict(ctx, t[3]));
    T_EQ(where(ctx, t[3]), GM_TIER_HOST);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.host_scattered, 1);
    T_EQ(ts.host_reserved, 320 * (int64_t)MiB);
    T_EQ(ts.host_bytes, 3 * (int64_t)(N * MiB) + BIG * (int64_t)MiB);
    T_EQ(gm_check(ctx), 0);
    verify(ctx, t[3], BIG * MiB, 63, NULL);
    for (i = 0; i < 3; i++) verify(ctx, t[i], N * MiB, 60u + (unsigned)i, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 4; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* A swap whose copy fails part way: the chunks already traded are traded
   back, the acquire says what failed, and both tensors read as before. */
static void test_swap_fails(void) {
    gm_context* ctx = tier_ctx(24 * MiB, 24 * MiB, GM_FALLBACK_DEFAULT);
    const size_t n = 10 * MiB + 4096;
    gm_tensor t[4];
    gm_tier_stats ts;
    void* p;
    int i, h = -1;
    for (i = 0; i < 4; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], n));
        fill(ctx, t[i], n, (unsigned)i + 7, NULL);
    }
    {
        gm_tensor extra;
        T_EQ(gm_tensor_create(ctx, &extra, n), GM_ERR_OUT_OF_MEMORY); /* both tiers full */
    }
    for (i = 0; i < 4; i++)
        if (where(ctx, t[i]) == GM_TIER_HOST) h = i;
    T_CHECK(h >= 0);
    /* chunks of 4 MiB: copies 1-2 trade the first, 3-4 the second; the
       fifth (the third chunk's copy out) fails */
    if (gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 5) == GM_OK) { /* the sim's faults */
        T_EQ(gm_tensor_acquire(ctx, t[h], NULL, &p), GM_ERR_COPY_FAILED);
        T_EQ(where(ctx, t[h]), GM_TIER_HOST);
        T_OK(gm_tier_get_stats(ctx, &ts));
        T_EQ(ts.swaps, 0);
        T_EQ(gm_check(ctx), 0);
        /* the sixth (the third chunk's copy in) fails: the victim's chunk goes back onto the
           device from the bounce buffer (a failed copy may have written part of it), and the
           two chunks before are traded back */
        T_OK(gm_sim_inject(ctx, GM_SIM_FAULT_COPY, 6));
        T_EQ(gm_tensor_acquire(ctx, t[h], NULL, &p), GM_ERR_COPY_FAILED);
        T_EQ(where(ctx, t[h]), GM_TIER_HOST);
        for (i = 0; i < 4; i++) {
            gm_tensor_info info;
            T_OK(gm_tensor_get_info(ctx, t[i], &info));
            T_EQ(info.lost, 0);
        }
        T_EQ(gm_check(ctx), 0);
    }
    t_every_byte = 1;
    for (i = 0; i < 4; i++) verify(ctx, t[i], n, (unsigned)i + 7, NULL);
    t_every_byte = 0;
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 4; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

static void test_managed_fallback(void) {
    gm_context* ctx = tier_ctx(4 * MiB, 4 * MiB, GM_FALLBACK_MANAGED);
    gm_tensor t[6];
    gm_tier_stats ts;
    int i;
    for (i = 0; i < 6; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 2 * MiB));
        fill(ctx, t[i], 2 * MiB, (unsigned)i, NULL);
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.managed_fallbacks >= 1);
    T_CHECK(ts.managed_bytes >= (int64_t)(2 * MiB));
    for (i = 0; i < 6; i++) verify(ctx, t[i], 2 * MiB, (unsigned)i, NULL);
    {
        int managed = 0;
        for (i = 0; i < 6; i++) managed += where(ctx, t[i]) == GM_TIER_MANAGED;
        T_CHECK(managed >= 1);
    }
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 6; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* A hook decides case by case: small tensors may go to managed memory,
   big ones fail. */
static int hook_calls;
static gm_fallback small_managed(gm_context* ctx, size_t bytes, void* user) {
    (void)ctx;
    (void)user;
    hook_calls++;
    return bytes <= MiB ? GM_FALLBACK_MANAGED : GM_FALLBACK_FAIL;
}

static void test_fallback_hook(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a, b, c;
    d.device_budget = 2 * MiB;
    d.host_budget = 2 * MiB;
    d.fallback_fn = small_managed;
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &a, 2 * MiB)); /* the device */
    T_OK(gm_tensor_create(ctx, &b, 2 * MiB)); /* a is evicted to the host, b takes its place */
    T_OK(gm_tensor_create(ctx, &c, MiB));     /* no room anywhere: the hook says managed */
    T_EQ(where(ctx, c), GM_TIER_MANAGED);
    {
        gm_tensor big;
        T_EQ(gm_tensor_create(ctx, &big, 2 * MiB), GM_ERR_OUT_OF_MEMORY); /* the hook says fail */
    }
    T_CHECK(hook_calls >= 2);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_tensor_destroy(ctx, c));
    T_OK(gm_shutdown(ctx));
}

static void test_priority_and_pinning(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor pin, low, hi, extra;
    T_OK(gm_tensor_create(ctx, &pin, 2 * MiB));
    T_OK(gm_tensor_create(ctx, &hi, 2 * MiB));
    T_OK(gm_tensor_create(ctx, &low, 2 * MiB));
    T_OK(gm_tensor_set_priority(ctx, pin, 0, 1));
    T_OK(gm_tensor_set_priority(ctx, hi, 5, 0));
    T_OK(gm_tensor_set_priority(ctx, low, -5, 0));
    T_OK(gm_tensor_create(ctx, &extra, 4 * MiB)); /* needs one 2 MiB tensor to go */
    T_EQ(where(ctx, pin), GM_TIER_DEVICE);
    T_EQ(where(ctx, hi), GM_TIER_DEVICE);
    T_EQ(where(ctx, low), GM_TIER_HOST); /* lowest priority first, although released last */
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, extra));
    T_OK(gm_tensor_destroy(ctx, low));
    T_OK(gm_tensor_destroy(ctx, hi));
    T_OK(gm_tensor_destroy(ctx, pin));
    T_OK(gm_shutdown(ctx));
}

/* A prefetch overlaps: with a slow link the copy is in flight when the
   acquire comes, and the stream waits for it, not the host. */
static void test_prefetch(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor a;
    gm_stream s;
    gm_tier_stats ts;
    void* p;
    double t0, took;
    d.device_budget = 64 * MiB;
    d.host_budget = 64 * MiB;
    d.sim.link_bytes_per_s = 64.0 * 1024 * 1024; /* 8 MiB: 125 ms each way */
    ctx = t_setup(d);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tensor_create(ctx, &a, 8 * MiB));
    fill(ctx, a, 8 * MiB, 77, s);
    T_OK(gm_tensor_evict(ctx, a));
    T_OK(gm_device_synchronize(ctx));
    t0 = t_now();
    T_OK(gm_tensor_prefetch(ctx, a, s));
    T_OK(gm_tensor_acquire(ctx, a, s, &p));
    took = t_now() - t0;
    T_CHECK(took < 0.05); /* neither call waited for the copy */
    T_OK(run(ctx, s, p, 8 * MiB, 77, 0)); /* runs after the copy, on the stream */
    T_OK(gm_tensor_release(ctx, a, s, 0));
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.prefetch_hits, 1);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* A loop over L tensors under a budget that holds about half of them:
   forward and backward (backward = 1), or forward only, the cyclic sweep
   where LRU evicts exactly what comes next. Returns the misses of the last
   two steps (acquires that had to bring a tensor in). */
static int64_t loop_misses(gm_evict_policy policy, int ahead, int steps, int backward) {
    enum { L = 16 };
    gm_context* ctx = tier_ctx(8 * MiB + 64 * KiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor t[L];
    gm_tier_stats a, b;
    int i, k;
    memset(&a, 0, sizeof a);
    T_OK(gm_tier_set_policy(ctx, policy, ahead, NULL, NULL));
    for (i = 0; i < L; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        fill(ctx, t[i], MiB, (unsigned)i + 1, NULL);
    }
    for (k = 0; k < steps; k++) {
        if (k == steps - 2) T_OK(gm_tier_get_stats(ctx, &a));
        for (i = 0; i < L; i++) verify(ctx, t[i], MiB, (unsigned)i + 1, NULL);
        for (i = L - 1; backward && i >= 0; i--) verify(ctx, t[i], MiB, (unsigned)i + 1, NULL);
        T_OK(gm_tier_step(ctx));
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &b));
    T_EQ(errors_now(ctx), 0);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
    return b.prefetch_misses - a.prefetch_misses;
}

/* The learned victim from the heap against the rule itself, a walk of the
   LRU list (lowest priority, then used farthest ahead, then least recently
   released), after every step of a walk over a repeating acquire order with
   departures, priorities, pins, prefetch, phases and step ends. */
static const gm__tensor* walk_victim(gm__tier* tm, uint64_t* nu_out) {
    const gm__tensor *x, *best = NULL;
    uint64_t best_nu = 0;
    uint32_t k;
    for (k = tm->lru; k; k = x->next) {
        uint64_t nu;
        x = GM__LRU(tm, k);
        if (x->pinned || !x->dev || x->acquired) continue;
        nu = GM__PLANNED(tm) ? gm__next_use(tm, k - 1) : 0;
        if (!best || x->priority < best->priority || (x->priority == best->priority && nu > best_nu)) {
            best = x;
            best_nu = nu;
        }
    }
    *nu_out = best_nu;
    return best;
}

static void test_learned_victims(long steps) {
    enum { L = 24 };
    gm_context* ctx = tier_ctx(6 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm__tier* tm;
    gm_tensor t[L];
    unsigned long long seed = 7;
    long k, compared = 0, planned = 0, mismatched = 0;
    int i, order[L];
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 1, NULL, NULL));
    for (i = 0; i < L; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], (size_t)(64 + 64 * (i % 5)) * KiB));
        order[i] = i;
    }
    tm = (gm__tier*)ctx->tier;
    for (k = 0; k < steps; k++) {
        unsigned r = (unsigned)(t_rand_r(&seed) % 100);
        int a = (int)(t_rand_r(&seed) % L);
        const gm__tensor *want, *got;
        uint64_t want_nu, got_nu;
        void* p;
        if (r < 70) { /* the next tensor of the order, or now and then another */
            int j = r < 62 ? order[k % L] : a;
            T_OK(gm_tensor_acquire(ctx, t[j], NULL, &p));
            T_OK(gm_tensor_release(ctx, t[j], NULL, (int)(r & 1)));
        } else if (r < 80) {
            T_OK(gm_tensor_set_priority(ctx, t[a], (int)(t_rand_r(&seed) % 3) - 1, t_rand_r(&seed) % 8 == 0));
        } else if (r < 86) {
            T_OK(gm_tensor_prefetch(ctx, t[a], NULL));
        } else if (r < 92) {
            T_OK(gm_tier_step(ctx));
        } else if (r < 94) {
            T_OK(gm_tier_set_phase(ctx, (int)(t_rand_r(&seed) % 2)));
        } else if (r < 97) {
            gm_tier where;
            T_OK(gm_tensor_where(ctx, t[a], &where));
            if (where == GM_TIER_DEVICE) T_OK(gm_tensor_evict(ctx, t[a]));
        } else { /* a tensor made again: its slot keeps its place in the plan */
            T_OK(gm_tensor_destroy(ctx, t[a]));
            T_OK(gm_tensor_create(ctx, &t[a], (size_t)(64 + 64 * (a % 5)) * KiB));
        }
        if (k % 97 == 0) { /* the order shifts: the plan departs, then is learned again */
            int x = order[0];
            memmove(order, order + 1, (L - 1) * sizeof *order);
            order[L - 1] = x;
        }
        gm__rmu_lock(&tm->mu);
        want = walk_victim(tm, &want_nu);
        got = gm__victim(ctx, tm, 0, NULL);
        got_nu = got && GM__PLANNED(tm) ? gm__next_use(tm, (uint32_t)(got - tm->t)) : 0;
        planned += GM__PLANNED(tm);
        compared++;
        if (want != got || (want && (want->priority != got->priority || want_nu != got_nu)))
            mismatched++; /* the same tensor: ties (never used again) go by LRU place in both */
        gm__rmu_unlock(&tm->mu);
        if (gm_check(ctx) != 0) { /* logged; the first is enough */
            T_EQ(gm_check(ctx), 0);
            break;
        }
    }
    printf("learned victims: %ld steps, %ld under a plan, heap against the walk: %ld differ\n", compared, planned,
           mismatched);
    T_EQ(mismatched, 0);
    T_CHECK(planned > steps / 2);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

static void test_learned_order(void) {
    int64_t lru = loop_misses(GM_EVICT_LRU, 0, 4, 0);
    int64_t learned = loop_misses(GM_EVICT_LEARNED, 0, 4, 0);
    int64_t ahead = loop_misses(GM_EVICT_LEARNED, 2, 4, 0);
    int64_t fb_lru = loop_misses(GM_EVICT_LRU, 0, 4, 1);
    int64_t fb_learned = loop_misses(GM_EVICT_LEARNED, 0, 4, 1);
    int64_t fb_ahead = loop_misses(GM_EVICT_LEARNED, 2, 4, 1);
    printf("misses in two steps, 16 tensors, room for 8: sweep: LRU %lld, learned %lld, learned+prefetch %lld; "
           "forward-backward: LRU %lld, learned %lld, learned+prefetch %lld\n",
           (long long)lru, (long long)learned, (long long)ahead, (long long)fb_lru, (long long)fb_learned,
           (long long)fb_ahead);
    T_CHECK(learned * 3 < lru * 2); /* Belady on a sweep: about half the misses of LRU */
    T_CHECK(ahead < learned);       /* prefetch ahead: the copies happen before the acquires */
    T_CHECK(fb_learned <= fb_lru);  /* where LRU is optimal already, no worse */
    T_CHECK(fb_ahead < fb_learned);
}

/* Learned order copies a written tensor out ahead of its eviction (write
   behind) only when Belady's order on the device evicts it before its next
   use: forward then backward over 16 written tensors with room for 8, each
   step moves Belady's 16 MiB each way. Before, the tensor used farthest
   ahead at the turns (the 8th of the forward pass, then of the backward)
   was copied out, written again before it left, and copied out again: 18
   MiB out a step. */
static void test_write_behind_count(void) {
    enum { L = 16, STEPS = 6 };
    gm_context* ctx = tier_ctx(8 * MiB + 64 * KiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor t[L];
    unsigned seed[L];
    gm_tier_stats a, b;
    int i, k, q;
    memset(&a, 0, sizeof a);
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < L; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        seed[i] = 0;
    }
    for (k = 0; k < STEPS; k++) {
        if (k == STEPS - 2) T_OK(gm_tier_get_stats(ctx, &a));
        for (q = 0; q < 2 * L; q++) {
            i = q < L ? q : 2 * L - 1 - q;
            fill(ctx, t[i], MiB, seed[i] = (unsigned)(k * 64 + q + 1), NULL);
        }
        T_OK(gm_tier_step(ctx));
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &b));
    T_EQ(b.bytes_to_host - a.bytes_to_host, (long long)(2 * L * MiB));
    T_EQ(b.bytes_to_device - a.bytes_to_device, (long long)(2 * L * MiB));
    for (i = 0; i < L; i++) {
        verify(ctx, t[i], MiB, seed[i], NULL);
        T_OK(gm_tensor_destroy(ctx, t[i]));
    }
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* The plan's verdicts (Belady's order on a heap by next use, run when a
   step ends) against t_belady_scan: random steps of random lengths over
   tensors of mixed sizes, some used several times a step, on a device
   that holds about a quarter of them. */
static void test_belady_heap(void) {
    enum { L = 40, STEPS = 40 };
    gm_context* ctx = tier_ctx(6 * MiB, 256 * MiB, GM_FALLBACK_DEFAULT);
    gm__tier* tm = NULL;
    gm_tensor t[L];
    unsigned long long seed = 11;
    int i, k, verdicts = 0, differ = 0, leave = 0;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 0, NULL, NULL));
    t_plan_tensors(ctx, t, L, &seed);
    for (k = 0; k < STEPS; k++) {
        t_plan_step(ctx, t, L, k, &seed);
        tm = gm__tier_of(ctx);
        gm__rmu_lock(&tm->mu);
        if (T_CHECK(tm->leaves != NULL)) {
            uint8_t* want = (uint8_t*)malloc(tm->nplan);
            uint32_t u;
            t_belady_scan(tm, ctx->budget, want, NULL);
            for (u = 0; u < tm->nplan; u++) {
                differ += want[u] != ((tm->leaves[u] & GM__LV_DEV) != 0);
                leave += want[u];
            }
            verdicts += (int)tm->nplan;
            free(want);
        }
        gm__rmu_unlock(&tm->mu);
        T_EQ(gm_check(ctx), 0);
    }
    printf("Belady's order on a heap against a scan: %d verdicts (%d leave), %d differ\n", verdicts, leave, differ);
    T_EQ(differ, 0);
    T_CHECK(leave > verdicts / 10);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* A custom policy: the largest candidate goes. */
static size_t pick_largest(gm_context* ctx, const gm_tensor* c, size_t n, void* user) {
    size_t i, best = 0;
    (void)ctx;
    (void)user;
    for (i = 1; i < n; i++)
        if ((c[i].id & 0xfffff) > (c[best].id & 0xfffff)) best = i; /* created last = largest here */
    return best;
}

/* A tensor keeps its marks' low 32 bits (gm__tk_at gives the mark back):
   the tracks run past 2^32 marks here, and every copy and release still
   orders what follows it. A mark whose low bits are 0 would read as none:
   gm__tk_mark passes that number over. */
static void test_mark_wrap(void) {
    enum { N = 8 };
    gm_context* ctx = tier_ctx(4 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm__tier* tm;
    gm_stream st[2];
    gm_tensor t[N];
    unsigned seed[N];
    uint32_t ti;
    int i, round;
    st[0] = NULL;
    T_OK(gm_stream_create(ctx, &st[1]));
    for (i = 0; i < N; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        seed[i] = (unsigned)i + 1;
        fill(ctx, t[i], MiB, seed[i], st[i % 2]);
    }
    gm_device_synchronize(ctx);
    tm = gm__tier_of(ctx);
    gm__rmu_lock(&tm->mu);
    { /* the number with low bits 0 is passed over */
        uint64_t a, b;
        gm__tk_poll(ctx, tm, GM__TK_IN);
        T_EQ(tm->tk[GM__TK_IN].n, 0);
        tm->tk[GM__TK_IN].seq = 0xfffffffeull;
        a = gm__tk_mark(ctx, tm, GM__TK_IN);
        b = gm__tk_mark(ctx, tm, GM__TK_IN);
        T_EQ(a, 0xffffffffull);
        T_EQ(b, 0x100000001ull);
        T_EQ(gm__tk_at(tm, GM__TK_IN, (uint32_t)a), a);
        T_EQ(gm__tk_at(tm, GM__TK_IN, (uint32_t)b), b);
        T_EQ(gm__tk_at(tm, GM__TK_IN, 0), 0);
    }
    gm_device_synchronize(ctx);
    for (ti = 0; ti < tm->ntk; ti++) { /* every track a few marks short of 2^32 (all done: nothing waits) */
        gm__tk_poll(ctx, tm, ti);
        T_EQ(tm->tk[ti].n, 0);
        tm->tk[ti].seq = 0xffffffffull - 6 - ti;
    }
    gm__rmu_unlock(&tm->mu);
    T_EQ(gm_check(ctx), 0);
    for (round = 0; round < 12; round++)
        for (i = 0; i < N; i++) { /* read on one stream, written on the other: evictions both ways */
            int k = (i + round) % 2;
            verify(ctx, t[i], MiB, seed[i], st[k]);
            seed[i] += 100;
            fill(ctx, t[i], MiB, seed[i], st[1 - k]);
            T_EQ(gm_check(ctx), 0);
        }
    for (ti = 0; ti < tm->ntk; ti++) T_CHECK(tm->tk[ti].seq > 0xffffffffull);
    for (i = 0; i < N; i++) verify(ctx, t[i], MiB, seed[i], NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < N; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_stream_destroy(ctx, st[1]));
    T_OK(gm_shutdown(ctx));
}

static void test_custom_policy(void) {
    gm_context* ctx = tier_ctx(7 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT); /* a, b and c do not fit together */
    gm_tensor a, b, c;
    T_EQ(gm_tier_set_policy(ctx, GM_EVICT_CUSTOM, 0, NULL, NULL), GM_ERR_INVALID_ARGUMENT);
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_CUSTOM, 0, pick_largest, NULL));
    T_OK(gm_tensor_create(ctx, &a, MiB));
    T_OK(gm_tensor_create(ctx, &b, 3 * MiB));
    T_OK(gm_tensor_create(ctx, &c, 4 * MiB)); /* needs room: the policy picks b, not a (LRU) */
    T_EQ(where(ctx, a), GM_TIER_DEVICE);
    T_EQ(where(ctx, b), GM_TIER_HOST);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    T_OK(gm_tensor_destroy(ctx, b));
    T_OK(gm_tensor_destroy(ctx, c));
    T_OK(gm_shutdown(ctx));
}

/* Regressions from review: each once broke an invariant or a handle. */
static void* first_create(void* arg) {
    gm_context* ctx = (gm_context*)arg;
    gm_tensor t;
    gm_tier w = GM_TIER_NONE;
    if (gm_tensor_create(ctx, &t, 4096) != GM_OK || gm_tensor_where(ctx, t, &w) != GM_OK || w == GM_TIER_NONE) return ctx;
    gm_tensor_destroy(ctx, t);
    return NULL;
}

/* The host pool gives whole chunks back once it has been mostly empty for
   a while (twice the peak use of the last 1024 tier operations stays), and
   grows again when needed; every byte stays intact. */
static void test_host_giveback(void) {
    gm_context* ctx = tier_ctx(16 * MiB, 512 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor t[64];
    unsigned seed[64];
    gm_tier_stats ts;
    int64_t grown;
    int i, k;
    for (i = 0; i < 64; i++) {
        seed[i] = (unsigned)i + 1;
        T_OK(gm_tensor_create(ctx, &t[i], 4 * MiB));
        fill(ctx, t[i], 4 * MiB, seed[i], NULL);
    }
    for (i = 0; i < 64; i++)
        if (where(ctx, t[i]) == GM_TIER_DEVICE) T_OK(gm_tensor_evict(ctx, t[i]));
    T_OK(gm_tier_get_stats(ctx, &ts));
    grown = ts.host_reserved;
    T_CHECK(grown >= (int64_t)(256 * MiB));
    for (i = 4; i < 64; i++) T_OK(gm_tensor_destroy(ctx, t[i])); /* the pool is mostly empty now */
    for (k = 0; k < 1500; k++) { /* a window (1024 operations) passes after the emptying one */
        i = k % 4;
        seed[i] += 100;
        fill(ctx, t[i], 4 * MiB, seed[i], NULL); /* written: the host copy goes */
        if (k % 3 == 0) T_OK(gm_tensor_evict(ctx, t[(k + 2) % 4])); /* and some come back to host */
        if (k % 50 == 0) T_EQ(gm_check(ctx), 0);
        /* a step's end: nothing makes the host wait for the device, and a
           chunk goes back only once the copies that used it completed */
        if (k % 100 == 99) T_OK(gm_device_synchronize(ctx));
    }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.host_reserved <= (int64_t)(128 * MiB)); /* chunks went back */
    T_CHECK(ts.host_reserved < grown);
    for (i = 0; i < 4; i++) verify(ctx, t[i], 4 * MiB, seed[i], NULL);
    T_EQ(errors_now(ctx), 0);
    for (i = 4; i < 64; i++) { /* the pool grows again */
        seed[i] = (unsigned)i + 1000;
        T_OK(gm_tensor_create(ctx, &t[i], 4 * MiB));
        fill(ctx, t[i], 4 * MiB, seed[i], NULL);
    }
    for (i = 0; i < 64; i++) verify(ctx, t[i], 4 * MiB, seed[i], NULL);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.host_reserved >= (int64_t)(200 * MiB));
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 64; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

static void test_regressions(void) {
    gm_context* ctx;
    gm_tensor a, old;
    gm_stream s;
    void* p;
    int i, failures = 0;
    /* a stream destroyed after a tensor used it: the tensor still moves */
    ctx = tier_ctx(16 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tensor_create(ctx, &a, MiB));
    fill(ctx, a, MiB, 9, s);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_tensor_evict(ctx, a));
    verify(ctx, a, MiB, 9, NULL);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    /* zero bytes: still in a tier, through evict and acquire */
    T_OK(gm_tensor_create(ctx, &a, 0));
    T_OK(gm_tensor_evict(ctx, a));
    T_OK(gm_tensor_acquire(ctx, a, NULL, &p));
    T_CHECK(p != NULL);
    T_OK(gm_tensor_release(ctx, a, NULL, 0));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, a));
    /* no size wraps around */
    T_EQ(gm_tensor_create(ctx, &a, (size_t)-1), GM_ERR_OUT_OF_MEMORY);
    T_EQ(gm_check(ctx), 0);
    /* generations never repeat a live handle */
    T_OK(gm_tensor_create(ctx, &old, 64));
    T_OK(gm_tensor_destroy(ctx, old));
    for (i = 0; i < 5000; i++) {
        T_CHECK(gm_tensor_create(ctx, &a, 64) == GM_OK && a.id != old.id);
        if (gm_tensor_destroy(ctx, old) != GM_ERR_STALE_HANDLE) failures++;
        gm_tensor_destroy(ctx, a);
    }
    T_EQ(failures, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    /* eight threads making the first tensors at once share one manager */
    for (i = 0; i < 20; i++) {
        pthread_t th[8];
        int k;
        ctx = tier_ctx(64 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
        for (k = 0; k < 8; k++) pthread_create(&th[k], NULL, first_create, ctx);
        for (k = 0; k < 8; k++) {
            void* r;
            pthread_join(th[k], &r);
            if (r) failures++;
        }
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_shutdown(ctx));
    }
    T_EQ(failures, 0);
    /* a learned prefetch that finds no room neither falls back to managed
       memory nor counts as an out-of-memory */
    {
        gm_tensor t3[3];
        gm_stats st;
        gm_tier w;
        ctx = tier_ctx(2 * MiB, 64 * MiB, GM_FALLBACK_MANAGED);
        T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        for (i = 0; i < 3; i++) T_OK(gm_tensor_create(ctx, &t3[i], MiB));
        for (i = 0; i < 3; i++) verify(ctx, t3[i], 0, 0, NULL); /* the plan: 0, 1, 2 */
        T_OK(gm_tier_step(ctx));
        T_OK(gm_tensor_acquire(ctx, t3[0], NULL, &p));
        T_OK(gm_tensor_acquire(ctx, t3[1], NULL, &p)); /* prefetching 2 finds no room */
        T_OK(gm_tensor_where(ctx, t3[2], &w));
        T_CHECK(w != GM_TIER_MANAGED);
        T_OK(gm_get_stats(ctx, &st));
        T_EQ(st.num_ooms, 0);
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_tensor_release(ctx, t3[0], NULL, 0));
        T_OK(gm_tensor_release(ctx, t3[1], NULL, 0));
        for (i = 0; i < 3; i++) T_OK(gm_tensor_destroy(ctx, t3[i]));
        T_OK(gm_shutdown(ctx));
    }
}

/* The differential test: far more tensor bytes than the device holds. */
static void test_random(long steps) {
    gm_context* ctx = tier_ctx(24 * MiB, 2048 * MiB, GM_FALLBACK_DEFAULT);
    gm_tier_stats ts = t_walk(ctx, steps, BIG_MAX, 0);
    T_CHECK(ts.evictions > 100 && ts.bytes_to_device > 0 && ts.clean_evictions > 0);
    T_CHECK(ts.host_bytes > ts.device_bytes); /* most tensors live on the host */
    T_OK(gm_shutdown(ctx));
}

/* The same walk in learned order over a repeating sequence: prefetches
   ahead of the plan and write-behind of the next victim, on two streams,
   every byte checked against the model and gm_check after every step. */
static void test_random_learned(long steps) {
    gm_context* ctx = tier_ctx(24 * MiB, 2048 * MiB, GM_FALLBACK_DEFAULT);
    gm_tier_stats ts;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    t_walk_period = 97;
    ts = t_walk(ctx, steps, BIG_MAX, 0);
    t_walk_period = 0;
    T_CHECK(ts.evictions > 100 && ts.clean_evictions > 0 && ts.prefetch_hits > 0);
    T_OK(gm_shutdown(ctx));
}

static gm_tensor_info info(gm_context* ctx, gm_tensor t) {
    gm_tensor_info in;
    memset(&in, 0, sizeof in);
    T_OK(gm_tensor_get_info(ctx, t, &in));
    return in;
}

static void overwrite(gm_context* ctx, gm_tensor t, size_t n, unsigned seed, int written) {
    void* p;
    if (!T_OK(gm_tensor_acquire_as(ctx, t, NULL, GM_ACCESS_OVERWRITE, &p))) return;
    T_OK(run(ctx, NULL, p, n, seed, 1));
    T_OK(gm_tensor_release(ctx, t, NULL, written));
}

static void verify_read(gm_context* ctx, gm_tensor t, size_t n, unsigned seed) {
    void* p;
    if (!T_OK(gm_tensor_acquire_as(ctx, t, NULL, GM_ACCESS_READ, &p))) return;
    T_OK(run(ctx, NULL, p, n, seed, 0));
    T_OK(gm_tensor_release(ctx, t, NULL, GM_AS_ACQUIRED));
}

/* Access modes: a tensor never written costs no transfer in any tier; an
   overwrite brings nothing in and its release is written whatever it says;
   a read released as acquired keeps the copy below valid. */
static void test_modes(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    const size_t n = 2 * MiB;
    gm_tensor t[6], gone;
    gm_tier_stats ts, ts2;
    gm_tensor_info in;
    void* p;
    int i, round;
    for (i = 0; i < 6; i++) T_OK(gm_tensor_create(ctx, &t[i], n)); /* more than the device holds */
    for (round = 0; round < 3; round++)
        for (i = 0; i < 6; i++) {
            T_OK(gm_tensor_acquire_as(ctx, t[i], NULL, GM_ACCESS_READ, &p));
            T_OK(gm_tensor_release(ctx, t[i], NULL, GM_AS_ACQUIRED));
            if (i % 2) T_OK(gm_tensor_evict(ctx, t[i]));
            T_EQ(gm_check(ctx), 0);
        }
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.evictions > 6);
    T_EQ(ts.bytes_to_host, 0); /* never written: nothing moves, ever */
    T_EQ(ts.bytes_to_device, 0);
    in = info(ctx, t[0]);
    T_EQ(in.written, 0);
    T_EQ(in.bytes, n);
    T_EQ(gm_tensor_size(ctx, t[0]), n);
    /* overwrites: nothing comes in, the new bytes survive eviction, also released with 0 */
    for (i = 0; i < 6; i++) overwrite(ctx, t[i], n, 100u + (unsigned)i, i % 2 ? 0 : GM_AS_ACQUIRED);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.bytes_to_device, 0);
    for (i = 0; i < 6; i++) T_OK(gm_tensor_evict(ctx, t[i]));
    for (i = 0; i < 6; i++) {
        T_EQ(where(ctx, t[i]), GM_TIER_HOST);
        T_EQ(info(ctx, t[i]).written, 1);
    }
    for (i = 0; i < 6; i++) overwrite(ctx, t[i], n, 200u + (unsigned)i, 0); /* over a host copy: not brought in */
    T_OK(gm_tier_get_stats(ctx, &ts2));
    T_EQ(ts2.bytes_to_device, 0);
    T_EQ(ts2.bytes_not_copied - ts.bytes_not_copied, (int64_t)(6 * n));
    for (i = 0; i < 6; i++) T_OK(gm_tensor_evict(ctx, t[i]));
    for (i = 0; i < 6; i++) verify_read(ctx, t[i], n, 200u + (unsigned)i);
    /* a read released as acquired: the host copy stays valid, the eviction is free */
    T_OK(gm_tier_get_stats(ctx, &ts));
    for (i = 0; i < 6; i++)
        if (where(ctx, t[i]) == GM_TIER_DEVICE) T_OK(gm_tensor_evict(ctx, t[i]));
    T_OK(gm_tier_get_stats(ctx, &ts2));
    T_EQ(ts2.bytes_to_host, ts.bytes_to_host);
    T_CHECK(ts2.clean_evictions > ts.clean_evictions);
    /* info while acquired, nested */
    T_OK(gm_tensor_acquire_as(ctx, t[2], NULL, GM_ACCESS_READ, &p));
    T_OK(gm_tensor_acquire_as(ctx, t[2], NULL, GM_ACCESS_READ, &p));
    in = info(ctx, t[2]);
    T_EQ(in.acquired, 2);
    T_EQ(in.tier, GM_TIER_DEVICE);
    T_EQ(in.on_host, 1);
    T_OK(gm_tensor_release(ctx, t[2], NULL, GM_AS_ACQUIRED));
    T_OK(gm_tensor_release(ctx, t[2], NULL, GM_AS_ACQUIRED));
    T_EQ(info(ctx, t[2]).on_host, 1); /* read only: still valid */
    T_EQ(gm_tensor_acquire_as(ctx, t[2], NULL, (gm_access)7, &p), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tensor_get_info(ctx, t[2], NULL), GM_ERR_INVALID_ARGUMENT);
    /* peaks, and their reset */
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_CHECK(ts.peak_device_bytes >= (int64_t)(3 * n) && ts.peak_device_bytes <= (int64_t)(8 * MiB));
    T_CHECK(ts.peak_host_bytes >= (int64_t)(6 * n));
    T_OK(gm_tier_reset_peaks(ctx));
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.peak_device_bytes, ts.device_bytes);
    T_EQ(ts.peak_host_bytes, ts.host_bytes);
    for (i = 0; i < 6; i++) verify(ctx, t[i], n, 200u + (unsigned)i, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    gone = t[5];
    for (i = 0; i < 6; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_EQ(gm_tensor_size(ctx, gone), 0);
    T_EQ(gm_tensor_get_info(ctx, gone, &in), GM_ERR_STALE_HANDLE);
    T_OK(gm_shutdown(ctx));
}

/* Batches: a layer that fits is acquired whole; one that does not fails
   before any of it is acquired, and loses nothing (an overwrite in it
   included); duplicates nest; misuse changes nothing. */
static void test_batch(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    const size_t n = 2 * MiB;
    gm_tensor t[8], dead;
    gm_use u[8];
    gm_stream s;
    gm_tier_stats ts;
    void* p;
    int i;
    T_OK(gm_stream_create(ctx, &s));
    for (i = 0; i < 8; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], n));
        fill(ctx, t[i], n, 30u + (unsigned)i, NULL);
    }
    for (i = 0; i < 3; i++) u[i].tensor = t[i], u[i].access = GM_ACCESS_READ;
    T_OK(gm_tensor_acquire_many(ctx, u, 3, NULL));
    for (i = 0; i < 3; i++) {
        T_CHECK(u[i].ptr != NULL);
        T_EQ(info(ctx, t[i]).acquired, 1);
        T_OK(run(ctx, NULL, u[i].ptr, n, 30u + (unsigned)i, 0));
    }
    T_OK(gm_tensor_release_many(ctx, u, 3, NULL));
    T_EQ(gm_check(ctx), 0);
    /* five do not fit in 8 MiB: none is acquired, and the overwrite of one on the host keeps its bytes */
    T_OK(gm_tensor_evict(ctx, t[7]));
    for (i = 0; i < 5; i++) u[i].tensor = t[3 + i], u[i].access = i == 4 ? GM_ACCESS_OVERWRITE : GM_ACCESS_READ_WRITE;
    t_last_log[0] = 0;
    T_EQ(gm_tensor_acquire_many(ctx, u, 5, NULL), GM_ERR_OUT_OF_MEMORY);
    /* the message says what was tried and what stood in the way */
    T_CHECK(strstr(t_last_log, "no device room for tensor") != NULL);
    T_CHECK(strstr(t_last_log, "acquired (") != NULL && strstr(t_last_log, "largest free block") != NULL);
    /* again at once: a line still, without the walk (its details were just logged) */
    t_last_log[0] = 0;
    T_EQ(gm_tensor_acquire_many(ctx, u, 5, NULL), GM_ERR_OUT_OF_MEMORY);
    T_CHECK(strstr(t_last_log, "no device room for tensor") != NULL);
    T_CHECK(strstr(t_last_log, "in detail was logged") != NULL && strstr(t_last_log, "largest free block") == NULL);
    for (i = 0; i < 5; i++) {
        T_CHECK(u[i].ptr == NULL);
        T_EQ(info(ctx, t[3 + i]).acquired, 0);
    }
    T_EQ(gm_check(ctx), 0);
    /* duplicates nest; release_many of more than was acquired releases none */
    u[0].tensor = t[0], u[0].access = GM_ACCESS_READ;
    u[1] = u[0];
    T_OK(gm_tensor_acquire_many(ctx, u, 2, NULL));
    T_EQ(info(ctx, t[0]).acquired, 2);
    T_OK(gm_tensor_release(ctx, t[0], NULL, GM_AS_ACQUIRED));
    T_EQ(gm_tensor_release_many(ctx, u, 2, NULL), GM_ERR_BAD_STATE);
    T_EQ(info(ctx, t[0]).acquired, 1);
    T_OK(gm_tensor_release_many(ctx, u, 1, NULL));
    /* a stale handle, or a tensor acquired on another stream, in the middle: none is acquired */
    T_OK(gm_tensor_create(ctx, &dead, 4096));
    T_OK(gm_tensor_destroy(ctx, dead));
    u[0].tensor = t[1], u[1].tensor = dead, u[2].tensor = t[2];
    u[0].access = u[1].access = u[2].access = GM_ACCESS_READ;
    T_EQ(gm_tensor_acquire_many(ctx, u, 3, NULL), GM_ERR_STALE_HANDLE);
    T_EQ(info(ctx, t[1]).acquired, 0);
    T_OK(gm_tensor_acquire(ctx, t[2], s, &p));
    u[1].tensor = t[0];
    T_EQ(gm_tensor_acquire_many(ctx, u, 3, NULL), GM_ERR_INVALID_STREAM);
    T_EQ(info(ctx, t[1]).acquired, 0);
    T_EQ(info(ctx, t[0]).acquired, 0);
    T_EQ(gm_tensor_release_many(ctx, u, 3, s), GM_ERR_BAD_STATE); /* t[1] is not acquired */
    T_OK(gm_tensor_release(ctx, t[2], s, 0));
    T_EQ(gm_tensor_acquire_many(ctx, NULL, 1, NULL), GM_ERR_INVALID_ARGUMENT);
    T_OK(gm_tensor_acquire_many(ctx, NULL, 0, NULL));
    /* a whole layer overwritten in one batch on a user stream: nothing comes in */
    for (i = 0; i < 8; i++) T_OK(gm_tensor_evict(ctx, t[i]));
    T_OK(gm_tier_get_stats(ctx, &ts));
    for (i = 0; i < 3; i++) u[i].tensor = t[i], u[i].access = GM_ACCESS_OVERWRITE;
    T_OK(gm_tensor_acquire_many(ctx, u, 3, s));
    for (i = 0; i < 3; i++) T_OK(run(ctx, s, u[i].ptr, n, 60u + (unsigned)i, 1));
    T_OK(gm_tensor_release_many(ctx, u, 3, s));
    {
        gm_tier_stats ts2;
        T_OK(gm_tier_get_stats(ctx, &ts2));
        T_EQ(ts2.bytes_to_device, ts.bytes_to_device);
    }
    for (i = 0; i < 8; i++) verify(ctx, t[i], n, i < 3 ? 60u + (unsigned)i : 30u + (unsigned)i, s);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < 8; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* gm_launch_host_copy: the function sees the argument as it was at the
   call, though the caller's block changed at once. */
typedef struct hostarg {
    int v[16];
} hostarg;
static int host_seen[16];
static void host_fn(void* a) { memcpy(host_seen, ((const hostarg*)a)->v, sizeof host_seen); }

static void test_launch_copy(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 8 * MiB, GM_FALLBACK_DEFAULT);
    hostarg a;
    char big[GM_LAUNCH_ARG_MAX + 1];
    int i;
    for (i = 0; i < 16; i++) a.v[i] = i * 7 + 1;
    T_OK(gm_launch_host_copy(ctx, NULL, host_fn, &a, sizeof a));
    memset(&a, 0, sizeof a);
    T_OK(gm_stream_synchronize(ctx, NULL));
    for (i = 0; i < 16; i++) T_EQ(host_seen[i], i * 7 + 1);
    memset(big, 0, sizeof big);
    T_EQ(gm_launch_host_copy(ctx, NULL, host_fn, big, sizeof big), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_launch_host_copy(ctx, NULL, host_fn, NULL, 8), GM_ERR_INVALID_ARGUMENT);
    T_OK(gm_shutdown(ctx));
}

/* Phases: training steps (a sweep over 16 tensors) with evaluation steps
   (another order over 8 of them and 4 others) between them; with the
   phases named, or recognised by how each step begins, a training step
   after an evaluation misses no more than one after a training step, and
   the whole run moves no more bytes than LRU. Random acquires leave every
   plan: prefetching stops. mode: 0 training only, 1 recognised, 2 named,
   3 LRU. */
typedef struct phase_run {
    int64_t train_misses, bytes, wasted, lost, departures;
} phase_run;

static phase_run phase_loop(int mode) {
    enum { L = 20, STEPS = 8 };
    gm_context* ctx = tier_ctx(8 * MiB + 64 * KiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor t[L];
    gm_tier_stats a, b;
    phase_run pr;
    int i, k;
    memset(&pr, 0, sizeof pr);
    T_OK(gm_tier_set_policy(ctx, mode == 3 ? GM_EVICT_LRU : GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < L; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], MiB));
        fill(ctx, t[i], MiB, (unsigned)i + 1, NULL);
    }
    for (k = 0; k < STEPS; k++) {
        if (mode == 2) T_OK(gm_tier_set_phase(ctx, 0));
        T_OK(gm_tier_get_stats(ctx, &a));
        for (i = 0; i < 16; i++) verify_read(ctx, t[i], MiB, (unsigned)i + 1);
        T_OK(gm_tier_step(ctx));
        T_OK(gm_tier_get_stats(ctx, &b));
        if (k >= 2) pr.train_misses += b.prefetch_misses - a.prefetch_misses;
        if (mode != 0) { /* an evaluation */
            if (mode == 2) T_OK(gm_tier_set_phase(ctx, 1));
            for (i = 0; i < 12; i++) {
                int j = i < 8 ? 15 - 2 * i : 8 + i;
                verify_read(ctx, t[j], MiB, (unsigned)j + 1);
            }
            T_OK(gm_tier_step(ctx));
        }
        T_EQ(gm_check(ctx), 0);
    }
    T_OK(gm_tier_get_stats(ctx, &b));
    pr.bytes = b.bytes_to_device + b.bytes_to_host;
    pr.wasted = b.prefetch_wasted;
    if (mode == 1) { /* random acquires: the plan is lost, and found again */
        uint64_t rng = 12345;
        for (k = 0; k < 64; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            i = (int)((rng >> 33) % L);
            verify_read(ctx, t[i], MiB, (unsigned)i + 1);
        }
        T_OK(gm_tier_get_stats(ctx, &a));
        T_CHECK(a.plan_lost > b.plan_lost);
        T_CHECK(a.plan_departures > b.plan_departures + 8);
        for (i = 0; i < 16; i++) verify_read(ctx, t[i], MiB, (unsigned)i + 1); /* the training step again */
        T_OK(gm_tier_get_stats(ctx, &b));
        T_CHECK(b.prefetch_hits > a.prefetch_hits); /* followed again: prefetching resumed */
        pr.lost = b.plan_lost;
        pr.departures = b.plan_departures;
    }
    T_EQ(gm_tier_set_phase(ctx, GM_TIER_PHASES), GM_ERR_INVALID_ARGUMENT);
    T_EQ(gm_tier_set_phase(ctx, -1), GM_ERR_INVALID_ARGUMENT);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
    return pr;
}

static void test_phases(void) {
    phase_run only = phase_loop(0), auto_ = phase_loop(1), named = phase_loop(2), lru = phase_loop(3);
    printf("phases: training misses after the first two steps: training only %lld, with evaluation recognised %lld, "
           "named %lld; MiB moved: learned recognised %.0f, named %.0f, LRU %.0f; prefetches wasted %lld / %lld; "
           "random acquires: %lld departures, lost %lld times; training only: MiB %.0f\n",
           (long long)only.train_misses, (long long)auto_.train_misses, (long long)named.train_misses,
           (double)auto_.bytes / (double)MiB, (double)named.bytes / (double)MiB, (double)lru.bytes / (double)MiB,
           (long long)auto_.wasted, (long long)named.wasted, (long long)auto_.departures, (long long)auto_.lost, (double)only.bytes / (double)MiB);
    T_CHECK(auto_.train_misses <= only.train_misses + 2);
    T_CHECK(named.train_misses <= only.train_misses + 2);
    T_CHECK(auto_.bytes <= lru.bytes); /* victims by their next use in this step or the next one's phase */
    T_CHECK(named.bytes <= lru.bytes);
}

/* log:debug shows the manager's decisions: evictions, prefetches, plans. */
static int dbg_left, dbg_prefetched, dbg_plan;
static void dbg_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level != GM_LOG_DEBUG) return;
    dbg_left += strstr(msg, "left the device") != NULL;
    dbg_prefetched += strstr(msg, "prefetched to the device") != NULL;
    dbg_plan += strstr(msg, "are the plan of phase") != NULL;
}

static void test_debug_log(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t[12];
    int i, k;
    d.device_budget = 4 * MiB + 64 * KiB;
    d.host_budget = 64 * MiB;
    d.log_fn = dbg_log;
    d.log_level = GM_LOG_DEBUG;
    ctx = t_setup(d);
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < 12; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 512 * KiB));
        fill(ctx, t[i], 512 * KiB, (unsigned)i + 1, NULL);
    }
    for (k = 0; k < 3; k++) {
        for (i = 0; i < 12; i++) verify_read(ctx, t[i], 512 * KiB, (unsigned)i + 1);
        T_OK(gm_tier_step(ctx));
    }
    T_CHECK(dbg_left > 0);
    T_CHECK(dbg_prefetched > 0);
    T_EQ(dbg_plan, 3);
    T_EQ(errors_now(ctx), 0);
    for (i = 0; i < 12; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    T_OK(gm_shutdown(ctx));
}

/* Regressions of the learned plan by phase, found by a GPT-shaped trainer:
   tensors made again each step keep their slots (the plan names tensors by
   slot) whatever order they were destroyed in; a named phase's recording
   is stored as that phase's plan even when its acquires followed another
   phase's plan for a while; a step with no acquires keeps the plans. */
static int64_t departures(gm_context* ctx) {
    gm_tier_stats ts;
    T_OK(gm_tier_get_stats(ctx, &ts));
    return ts.plan_departures;
}

static void test_phase_regressions(void) {
    gm_context* ctx = tier_ctx(64 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor w[4], a[4], ph[6];
    gm_stream s;
    int64_t d0;
    int i, step;
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    T_OK(gm_tier_set_phase(ctx, 0));
    for (i = 0; i < 4; i++) T_OK(gm_tensor_create(ctx, &w[i], MiB));
    for (step = 0; step < 6; step++) {
        d0 = departures(ctx);
        for (i = 0; i < 4; i++) {
            gm_use u[3];
            u[0].tensor = w[i], u[0].access = GM_ACCESS_READ;
            u[1].tensor = i ? a[i - 1] : w[0], u[1].access = GM_ACCESS_READ;
            T_OK(gm_tensor_create(ctx, &a[i], MiB));
            u[2].tensor = a[i], u[2].access = GM_ACCESS_OVERWRITE;
            T_OK(gm_tensor_acquire_many(ctx, u, 3, s));
            T_OK(gm_tensor_release_many(ctx, u, 3, s));
        }
        for (i = 0; i < 4; i++) T_OK(gm_tensor_destroy(ctx, a[i])); /* not in reverse */
        T_OK(gm_tier_step(ctx));
        if (step >= 2) T_EQ(departures(ctx) - d0, 0);
    }
    for (i = 0; i < 4; i++) T_OK(gm_tensor_destroy(ctx, w[i]));
    /* phase 0: A B C D; phase 1: X Y, later X B C (two of phase 0's in a row) */
    for (i = 0; i < 6; i++) {
        T_OK(gm_tensor_create(ctx, &ph[i], MiB));
        fill(ctx, ph[i], MiB, (unsigned)i + 1, NULL);
    }
    for (step = 0; step < 6; step++) {
        static const int seq1[2][3] = {{4, 5, -1}, {4, 1, 2}};
        T_OK(gm_tier_set_phase(ctx, 0));
        d0 = departures(ctx);
        for (i = 0; i < 4; i++) verify_read(ctx, ph[i], MiB, (unsigned)i + 1);
        if (step >= 2) T_EQ(departures(ctx) - d0, 0);
        T_OK(gm_tier_step(ctx));
        T_OK(gm_tier_step(ctx)); /* nothing acquired: the plan stays */
        T_OK(gm_tier_set_phase(ctx, 1));
        for (i = 0; i < 3; i++) {
            int j = seq1[step % 2][i];
            if (j >= 0) verify_read(ctx, ph[j], MiB, (unsigned)j + 1);
        }
    }
    T_EQ(errors_now(ctx), 0);
    for (i = 0; i < 6; i++) T_OK(gm_tensor_destroy(ctx, ph[i]));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

/* GM_DISCARD and GM_ACCESS_READ_LAST: the bytes are dead after this use,
   so the tensor leaves the device and comes back without a copy. */
static void test_discard(void) {
    gm_context* ctx = tier_ctx(8 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    const size_t n = 2 * MiB;
    gm_tensor g, h;
    gm_use u[1];
    gm_tier_stats a, b;
    void* p;
    T_OK(gm_tensor_create(ctx, &g, n));
    T_OK(gm_tensor_create(ctx, &h, n));
    fill(ctx, g, n, 5, NULL);
    fill(ctx, h, n, 6, NULL);
    T_OK(gm_tier_get_stats(ctx, &a));
    T_OK(gm_tensor_acquire_as(ctx, g, NULL, GM_ACCESS_READ, &p));
    T_OK(run(ctx, NULL, p, n, 5, 0));
    T_OK(gm_tensor_release(ctx, g, NULL, GM_DISCARD));
    T_EQ(info(ctx, g).written, 0);
    u[0].tensor = h, u[0].access = GM_ACCESS_READ_LAST;
    T_OK(gm_tensor_acquire_many(ctx, u, 1, NULL));
    T_OK(run(ctx, NULL, u[0].ptr, n, 6, 0));
    T_OK(gm_tensor_release_many(ctx, u, 1, NULL));
    T_EQ(info(ctx, h).written, 0);
    T_OK(gm_tensor_evict(ctx, g));
    T_OK(gm_tensor_evict(ctx, h));
    T_OK(gm_tensor_acquire_as(ctx, g, NULL, GM_ACCESS_READ_LAST, &p));
    T_OK(gm_tensor_release(ctx, g, NULL, GM_AS_ACQUIRED));
    T_OK(gm_tier_get_stats(ctx, &b));
    T_EQ(b.bytes_to_host, a.bytes_to_host); /* nothing copied out or in */
    T_EQ(b.bytes_to_device, a.bytes_to_device);
    overwrite(ctx, g, n, 9, GM_AS_ACQUIRED); /* written again: it holds bytes */
    T_OK(gm_tensor_evict(ctx, g));
    verify(ctx, g, n, 9, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, g));
    T_OK(gm_tensor_destroy(ctx, h));
    T_OK(gm_shutdown(ctx));
}

/* Acquires that keep jumping around the plan, as two threads' steps
   interleaved on one context: runs of 8..64 acquires from one half of the
   learned order, then from the other. Each switch is a departure that
   moves the plan position by about half the plan; a jump over 256
   positions used to clear the victims' heap and rebuild it at the next
   eviction, O(n) per switch. Now a rebuild comes at most once per n/8
   ticks of the tier's clock (two per acquire + release; LRU victims in
   between), O(1) amortized. gm_check holds throughout. */
static void test_learned_jumps(void) {
    enum { L = 8192, OPS = 12000 };
    gm_context* ctx = tier_ctx((size_t)L / 2 * 4 * KiB, (size_t)L * 8 * KiB, GM_FALLBACK_DEFAULT);
    gm__tier* tm;
    gm_tensor* t = (gm_tensor*)calloc(L, sizeof *t);
    unsigned long long seed = 11;
    uint64_t builds0;
    long k, at[2] = {0, 0}, switches = 0;
    int i, half = 0, run = 0;
    void* p;
    T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
    for (i = 0; i < L; i++) T_OK(gm_tensor_create(ctx, &t[i], 4 * KiB));
    for (k = 0; k < 2; k++) { /* learn the order 0 .. L-1 */
        for (i = 0; i < L; i++) {
            T_OK(gm_tensor_acquire(ctx, t[i], NULL, &p));
            T_OK(gm_tensor_release(ctx, t[i], NULL, 0));
        }
        T_OK(gm_tier_step(ctx));
    }
    tm = (gm__tier*)ctx->tier;
    builds0 = tm->vh_builds;
    for (k = 0; k < OPS; k++) {
        int j;
        if (run == 0) {
            half ^= 1;
            run = 8 + (int)(t_rand_r(&seed) % 57);
            switches++;
        }
        run--;
        j = half * (L / 2) + (int)(at[half]++ % (L / 2));
        T_OK(gm_tensor_acquire(ctx, t[j], NULL, &p));
        T_OK(gm_tensor_release(ctx, t[j], NULL, 0));
        if (k % 1000 == 999) T_EQ(gm_check(ctx), 0);
    }
    printf("learned order, jumping: %d ops, %ld switches between halves, %llu heap builds\n", OPS, switches,
           (unsigned long long)(tm->vh_builds - builds0));
    T_CHECK(tm->vh_builds - builds0 <= 2 * (uint64_t)OPS / (L / 2 / 8) + 4); /* about L / 2 listed */
    T_CHECK(tm->vh_builds - builds0 < (uint64_t)switches / 2);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < L; i++) T_OK(gm_tensor_destroy(ctx, t[i]));
    free(t);
    T_OK(gm_shutdown(ctx));
}

/* Threads on one manager, each acquiring, writing, reading back and
   releasing its own tensors on its own stream, while the budget (8 MiB for
   about 24 MiB of tensors; in the second run 24 MiB for about 96 MiB of
   tensors of 1 to 3 MiB, which also move within the device) makes them
   evict each other's, prefetching and
   evicting now and then, and a checker
   thread runs gm_check and asks where tensors are. Bytes go in and out by
   copies on the thread's stream (host code may not touch device memory on
   CUDA), so every thread checks what it wrote last survived every move. */
#define MT_THREADS 4
#define MT_TENSORS 12
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MT_STEPS 400
#else
#define MT_STEPS 1500
#endif
typedef struct mt_arg {
    gm_context* ctx;
    int id;
    gm_tensor* all; /* every thread's tensors, for the checker */
} mt_arg;
static int mt_err, mt_stop;
static size_t mt_lo = 64 * KiB, mt_span = 960 * KiB; /* the tensors' sizes: lo up to lo + span */
static int mt_steps = MT_STEPS;
static pthread_mutex_t mt_mu = PTHREAD_MUTEX_INITIALIZER;
static void mt_bad(int k, const char* what) {
    pthread_mutex_lock(&mt_mu);
    if (mt_err++ < 5) printf("thread %d: %s\n", k, what);
    pthread_mutex_unlock(&mt_mu);
}
static void* mt_worker(void* a) {
    mt_arg* ma = (mt_arg*)a;
    gm_context* ctx = ma->ctx;
    gm_stream s;
    gm_tensor* t = ma->all + ma->id * MT_TENSORS;
    size_t size[MT_TENSORS];
    unsigned seed[MT_TENSORS]; /* 0: never written */
    unsigned char* buf = (unsigned char*)malloc(mt_lo + mt_span);
    unsigned long long r = 0x9E3779B97F4A7C15ull * (unsigned long long)(ma->id + 1);
    int i, k;
    if (!buf || gm_stream_create(ctx, &s) != GM_OK) {
        mt_bad(ma->id, "setup");
        free(buf);
        return NULL;
    }
    for (k = 0; k < MT_TENSORS; k++) {
        gm_tensor h;
        size[k] = mt_lo + (size_t)(t_rand_r(&r) % mt_span);
        seed[k] = 0;
        if (gm_tensor_create(ctx, &h, size[k]) != GM_OK) mt_bad(ma->id, "create");
        pthread_mutex_lock(&mt_mu); /* published to the checker, which reads the array as it is made */
        t[k] = h;
        pthread_mutex_unlock(&mt_mu);
    }
    for (i = 0; i < mt_steps; i++) {
        unsigned long long x = t_rand_r(&r);
        void* p;
        size_t j;
        k = (int)(x % MT_TENSORS);
        if ((x >> 8) % 8 == 0) { /* another of its tensors: ahead, or away */
            int o = (int)((x >> 16) % MT_TENSORS);
            int pf = (x >> 24) % 2;
            gm_result e = pf ? gm_tensor_prefetch(ctx, t[o], s) : gm_tensor_evict(ctx, t[o]);
            /* a prefetch is a hint: with every thread's acquired tensor pinned in place, the
               budget may hold no hole of its size (the acquire that needs it then evicts more) */
            if (e != GM_OK && !(pf && e == GM_ERR_OUT_OF_MEMORY)) {
                char msg[96];
                snprintf(msg, sizeof msg, "%s: %s", pf ? "prefetch" : "evict", gm_result_string(e));
                mt_bad(ma->id, msg);
            }
        }
        if (gm_tensor_acquire(ctx, t[k], s, &p) != GM_OK) {
            mt_bad(ma->id, "acquire");
            continue;
        }
        if (seed[k] && (x >> 32) % 3) { /* read back what was written last */
            if (gm_memcpy_async(ctx, buf, p, size[k], GM_COPY_DEVICE_TO_HOST, s) != GM_OK || gm_stream_synchronize(ctx, s) != GM_OK)
                mt_bad(ma->id, "copy out");
            for (j = 0; j < size[k]; j += 97)
                if (buf[j] != pat(seed[k], j)) {
                    mt_bad(ma->id, "bytes lost");
                    break;
                }
            if (gm_tensor_release(ctx, t[k], s, 0) != GM_OK) mt_bad(ma->id, "release");
        } else { /* write it anew */
            seed[k] = (unsigned)(x >> 40) | 1u;
            for (j = 0; j < size[k]; j++) buf[j] = pat(seed[k], j);
            if (gm_memcpy_async(ctx, p, buf, size[k], GM_COPY_HOST_TO_DEVICE, s) != GM_OK || gm_stream_synchronize(ctx, s) != GM_OK)
                mt_bad(ma->id, "copy in");
            if (gm_tensor_release(ctx, t[k], s, 1) != GM_OK) mt_bad(ma->id, "release");
        }
    }
    if (gm_stream_synchronize(ctx, s) != GM_OK) mt_bad(ma->id, "synchronize");
    if (gm_stream_destroy(ctx, s) != GM_OK) mt_bad(ma->id, "stream destroy"); /* the caller's (gm_stream_create) */
    free(buf);
    return NULL;
}
static void* mt_checker(void* a) {
    mt_arg* ma = (mt_arg*)a;
    int stop = 0, n = 0;
    unsigned long long r = 7;
    while (!stop) {
        gm_tier w;
        gm_tensor x;
        gm_result e;
        pthread_mutex_lock(&mt_mu);
        x = ma->all[t_rand_r(&r) % (MT_THREADS * MT_TENSORS)];
        pthread_mutex_unlock(&mt_mu);
        if (gm_check(ma->ctx) != 0) mt_bad(-1, "gm_check");
        e = gm_tensor_where(ma->ctx, x, &w); /* a tensor not made yet is a stale handle */
        if (e != GM_OK && e != GM_ERR_STALE_HANDLE) mt_bad(-1, "where");
        n++;
        pthread_mutex_lock(&mt_mu);
        stop = mt_stop;
        pthread_mutex_unlock(&mt_mu);
    }
    return (void*)(intptr_t)n;
}
static void test_threads(size_t dev, size_t host, size_t lo, size_t span, int steps) {
    gm_context* ctx = tier_ctx(dev, host, GM_FALLBACK_DEFAULT);
    static gm_tensor all[MT_THREADS * MT_TENSORS];
    mt_arg args[MT_THREADS + 1];
    pthread_t th[MT_THREADS], ck;
    gm_tier_stats st;
    void* ret;
    int k;
    mt_err = mt_stop = 0;
    mt_lo = lo;
    mt_span = span;
    mt_steps = steps;
    memset(all, 0, sizeof all);
    for (k = 0; k <= MT_THREADS; k++) {
        args[k].ctx = ctx;
        args[k].id = k;
        args[k].all = all;
    }
    T_OK(gm_tensor_create(ctx, &all[0], 64)); /* the manager exists before the checker asks */
    T_OK(gm_tensor_destroy(ctx, all[0]));
    pthread_create(&ck, NULL, mt_checker, &args[MT_THREADS]);
    for (k = 0; k < MT_THREADS; k++) pthread_create(&th[k], NULL, mt_worker, &args[k]);
    for (k = 0; k < MT_THREADS; k++) pthread_join(th[k], NULL);
    pthread_mutex_lock(&mt_mu);
    mt_stop = 1;
    pthread_mutex_unlock(&mt_mu);
    pthread_join(ck, &ret);
    T_CHECK((intptr_t)ret > 0);
    T_EQ(mt_err, 0);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tier_get_stats(ctx, &st));
    T_CHECK(st.evictions > 0); /* the threads did evict each other's tensors */
    if (lo > MiB) T_CHECK(st.compactions > 0); /* and moved them on the device */
    printf("threads: %d threads, tensors of %zu to %zu KiB: %lld evictions, %lld compactions\n", MT_THREADS,
           lo / KiB, (lo + span) / KiB, (long long)st.evictions, (long long)st.compactions);
    for (k = 0; k < MT_THREADS * MT_TENSORS; k++) T_OK(gm_tensor_destroy(ctx, all[k]));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Six 2 MiB tensors in one segment of 12 MiB, the whole budget, written
   with seeds from `seed`; the second and fourth destroyed (two holes, not
   side by side). */
#define CN 6
static gm_context* compaction_layout(gm_tensor* t, unsigned seed) {
    gm_context* ctx = tier_ctx(12 * MiB, 64 * MiB, GM_FALLBACK_DEFAULT);
    gm_tensor seg;
    int i;
    T_OK(gm_tensor_create(ctx, &seg, 12 * MiB)); /* the segment, kept when freed */
    T_OK(gm_tensor_destroy(ctx, seg));
    for (i = 0; i < CN; i++) {
        T_OK(gm_tensor_create(ctx, &t[i], 2 * MiB));
        fill(ctx, t[i], 2 * MiB, seed + (unsigned)i, NULL);
        T_EQ(where(ctx, t[i]), GM_TIER_DEVICE);
    }
    T_OK(gm_tensor_destroy(ctx, t[1]));
    T_OK(gm_tensor_destroy(ctx, t[3]));
    return ctx;
}

/* The layout's four tensors read back and destroyed, then the context. */
static void compaction_done(gm_context* ctx, gm_tensor* t, unsigned seed) {
    int i;
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < CN; i++)
        if (i != 1 && i != 3) {
            verify(ctx, t[i], 2 * MiB, seed + (unsigned)i, NULL);
            T_OK(gm_tensor_destroy(ctx, t[i]));
        }
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* Compaction (gpumem.h, >>tier: compaction): with two 2 MiB holes in the
   device's one segment, a 4 MiB tensor finds its 4 MiB free in pieces,
   and a tensor beside a hole moves into the other instead of any leaving
   the device (before, one was evicted). With the tensors beside the holes
   pinned or acquired, none moves. Every tensor's bytes are checked. */
static void test_compaction(void) {
    gm_tensor t[CN], big;
    gm_tier_stats ts;
    gm_context* ctx = compaction_layout(t, 300);
    void* p;
    int i;
    T_OK(gm_tensor_create(ctx, &big, 4 * MiB));
    fill(ctx, big, 4 * MiB, 399, NULL);
    T_EQ(where(ctx, big), GM_TIER_DEVICE);
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.evictions, 0);
    T_EQ(ts.compactions, 1);
    T_EQ(ts.bytes_compacted, 2 * MiB);
    T_EQ(gm_check(ctx), 0);
    for (i = 0; i < CN; i++)
        if (i != 1 && i != 3) T_EQ(where(ctx, t[i]), GM_TIER_DEVICE);
    verify(ctx, big, 4 * MiB, 399, NULL);
    T_OK(gm_tensor_destroy(ctx, big));
    compaction_done(ctx, t, 300);

    ctx = compaction_layout(t, 500);
    T_OK(gm_tensor_set_priority(ctx, t[0], 0, 1));
    T_OK(gm_tensor_set_priority(ctx, t[2], 0, 1));
    T_OK(gm_tensor_acquire(ctx, t[4], NULL, &p));
    T_OK(gm_tensor_create(ctx, &big, 4 * MiB)); /* no place on the device: the host tier */
    T_OK(gm_tier_get_stats(ctx, &ts));
    T_EQ(ts.compactions, 0);
    T_EQ(where(ctx, big), GM_TIER_HOST);
    T_EQ(where(ctx, t[0]), GM_TIER_DEVICE);
    T_EQ(where(ctx, t[2]), GM_TIER_DEVICE);
    T_EQ(where(ctx, t[4]), GM_TIER_DEVICE);
    T_OK(gm_tensor_release(ctx, t[4], NULL, 0));
    T_OK(gm_tensor_destroy(ctx, big));
    compaction_done(ctx, t, 500);
}

/* Compaction under the differential walk: every tensor over the 1 MiB where
   compaction starts, of mixed sizes, so that the device's free room is
   mostly holes between them; on sim a copy fails now and then, compaction's
   moves among them (a failed move must leave its tensor where it was).
   Every byte checked, gm_check after every step, in LRU and learned order. */
static void test_random_compaction(long steps) {
    int learned;
    for (learned = 0; learned < 2; learned++) {
        gm_context* ctx = tier_ctx(40 * MiB, 512 * MiB, GM_FALLBACK_DEFAULT);
        gm_tier_stats ts;
        if (learned) T_OK(gm_tier_set_policy(ctx, GM_EVICT_LEARNED, 2, NULL, NULL));
        t_walk_nt = 48;
        t_walk_large = 1;
        t_walk_copy_faults = 1;
        t_walk_period = learned ? 61 : 0;
        ts = t_walk(ctx, steps, 4 * MiB, 0);
        t_walk_defaults();
        T_CHECK(ts.evictions > 0);
        T_CHECK(ts.compactions > 0);
        T_OK(gm_shutdown(ctx));
    }
}

int main(int argc, char** argv) {
    test_roundtrip();
    test_compaction();
    test_misuse();
    test_faults();
    test_full_and_alloc_evicts();
    test_swap_fails();
    test_host_pieces();
    test_host_pieces_grow();
    test_managed_fallback();
    test_priority_and_pinning();
    test_fallback_hook();
    test_prefetch();
    test_learned_order();
    test_write_behind_count();
    test_belady_heap();
    test_mark_wrap();
    test_learned_victims(argc > 1 ? atol(argv[1]) : WALK_STEPS);
    test_learned_jumps();
    test_regressions();
    test_host_giveback();
    test_custom_policy();
    test_modes();
    test_batch();
    test_launch_copy();
    test_phases();
    test_debug_log();
    test_phase_regressions();
    test_discard();
    test_random(argc > 1 ? atol(argv[1]) : WALK_STEPS);
    test_random_learned(argc > 1 ? atol(argv[1]) : WALK_STEPS);
    test_random_compaction(argc > 1 ? atol(argv[1]) / 2 : COMPACT_STEPS);
    test_threads(8 * MiB, 64 * MiB, 64 * KiB, 960 * KiB, MT_STEPS);
    test_threads(24 * MiB, 256 * MiB, MiB + 4 * KiB, 2 * MiB, MT_BIG_STEPS); /* compaction among the threads */
    return t_done();
}
