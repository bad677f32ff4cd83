/* The backend contract: what CUDA's documented rules demand of gpumem, on
   both backends, and on the CUDA runtime stand-in (tests/cudart) the cases
   only it can produce: a second device, concurrentManagedAccess 0, sticky
   device errors, a driver too old, reused stream handles. Each case is a
   defect the stand-in found in the CUDA backend. */
#include "gm_tier_test.h"
#include <unistd.h>
#include <sys/wait.h>

/* Every message at every level, for the lines that say what happened. */
static char logbuf[16384];
static size_t loglen;
static void log_all(gm_log_level level, const char* msg, void* user) {
    (void)level, (void)user;
    if (loglen + strlen(msg) + 2 < sizeof logbuf) {
        memcpy(logbuf + loglen, msg, strlen(msg));
        loglen += strlen(msg);
        logbuf[loglen++] = '\n';
        logbuf[loglen] = 0;
    }
    if (getenv("GM_TEST_VERBOSE")) gm_log_stderr(level, msg, NULL);
}
static void log_clear(void) { loglen = 0, logbuf[0] = 0; }

/* gm_alloc promises 512-byte alignment where CUDA gives 256: every segment
   base is raised, with caching on and off (one segment per block). */
static void test_alignment(void) {
    int caching;
    for (caching = 0; caching < 2; caching++) {
        gm_desc d = t_desc();
        gm_context* ctx;
        void* p[64];
        int i, ok = 1;
        d.caching = caching ? GM_TOGGLE_ON : GM_TOGGLE_OFF;
        ctx = t_setup(d);
        for (i = 0; i < 64; i++) {
            size_t n = (size_t)1 + (size_t)(t_rand() % (3 * MiB));
            if (gm_alloc(ctx, &p[i], n, NULL) != GM_OK) p[i] = NULL;
            ok &= p[i] && (uintptr_t)p[i] % 512 == 0;
        }
        T_CHECK(ok);
        T_EQ(gm_check(ctx), 0);
        for (i = 0; i < 64; i++) T_OK(gm_free(ctx, p[i]));
        T_OK(gm_empty_cache(ctx));
        T_EQ(t_stats(ctx).reserved_bytes[GM_STAT_ALL].current, 0);
        T_OK(gm_shutdown(ctx));
    }
}

/* A handle gm_stream_destroy destroyed is not touched again, and when the
   driver hands it out again it is a new stream; gm_stream_detach forgets a
   stream made elsewhere before its owner destroys it. */
static void test_stream_handles(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s, s2;
    gm_tensor t;
    void* p;
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_tensor_create(ctx, &t, MiB));
    fill(ctx, t, MiB, 3, s); /* the tensor remembers s */
    T_OK(gm_alloc(ctx, &p, 4096, s));
    T_OK(gm_free(ctx, p));
    T_OK(gm_stream_destroy(ctx, s));
    T_EQ(gm_stream_destroy(ctx, s), GM_ERR_INVALID_STREAM); /* refused without touching it */
    T_OK(gm_tensor_evict(ctx, t));                          /* no wait on the dead handle */
    T_OK(gm_stream_create(ctx, &s2));
    if (t_standin()) T_CHECK(s2 == s); /* CUDA reuses the newest freed handle */
    T_OK(gm_alloc(ctx, &p, 4096, s2));   /* a new stream: accepted */
    T_OK(gm_free(ctx, p));
    verify(ctx, t, MiB, 3, s2);
    T_EQ(errors_now(ctx), 0);
    T_OK(gm_stream_detach(ctx, s2));
    T_OK(gm_stream_detach(ctx, s2)); /* nothing left to forget */
    T_OK(gm_stream_destroy(ctx, s2)); /* detached, still alive: destroy works */
    T_EQ(gm_stream_detach(ctx, NULL), GM_ERR_INVALID_STREAM);
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_tensor_destroy(ctx, t));
#ifdef GM_TEST_CUDA
    {   /* a stream of the caller's, detached then destroyed with CUDA's call
           while gpumem cached a block for it; the handle comes back */
        cudaStream_t u, u2;
        t_gate g;
        t_gate_init(&g);
        T_EQ(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking), cudaSuccess);
        T_OK(gm_alloc(ctx, &p, 8192, (gm_stream)u));
        T_OK(gm_launch_host(ctx, (gm_stream)u, t_gate_wait, &g)); /* work on u still running */
        T_OK(gm_free(ctx, p));
        t_open_later(&g, 100);
        T_OK(gm_stream_detach(ctx, (gm_stream)u)); /* waits for u's work */
        T_CHECK(g.open && t_now() >= g.opened_at);
        T_EQ(cudaStreamDestroy(u), cudaSuccess);
        T_EQ(cudaStreamCreateWithFlags(&u2, cudaStreamNonBlocking), cudaSuccess);
        if (t_standin()) T_CHECK(u2 == u);
        T_OK(gm_alloc(ctx, &p, 8192, (gm_stream)u2)); /* a fresh state; u's block is free for all */
        T_OK(gm_free(ctx, p));
        T_EQ(gm_check(ctx), 0);
        T_OK(gm_stream_detach(ctx, (gm_stream)u2));
        T_EQ(cudaStreamDestroy(u2), cudaSuccess);
        t_gate_done(&g, 1);
    }
#endif
    T_OK(gm_shutdown(ctx));
}

/* Freeing unified memory waits for no stream: it is reused after events on
   the streams that used it. */
typedef struct freer { gm_context* ctx; void* p; gm_result r; int done; } freer;
static void* free_in_thread(void* arg) {
    freer* f = (freer*)arg;
    f->r = gm_free(f->ctx, f->p);
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}
static void test_managed_free(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream s;
    t_gate g;
    freer f;
    pthread_t th;
    int i;
    d.device_budget = 4 * MiB;
    d.fallback = GM_FALLBACK_MANAGED;
    ctx = t_setup(d);
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    T_OK(gm_alloc(ctx, &f.p, 8 * MiB, NULL)); /* past the budget: unified memory */
    T_EQ(t_stats(ctx).num_managed_fallbacks, 1);
    T_OK(gm_stream_create(ctx, &s));
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g)); /* unrelated work that does not end yet */
    pthread_create(&th, NULL, free_in_thread, &f);
    for (i = 0; i < 200 && !__atomic_load_n(&f.done, __ATOMIC_ACQUIRE); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    T_CHECK(__atomic_load_n(&f.done, __ATOMIC_ACQUIRE)); /* returned while the other stream still runs */
    t_gate_open(&g);
    pthread_join(th, NULL);
    T_OK(f.r);
    T_OK(gm_alloc(ctx, &f.p, 8 * MiB, NULL)); /* cached unified memory comes back */
    T_OK(gm_free(ctx, f.p));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
}

/* cudaFree waits for the whole device: gpumem calls it with the context
   lock dropped, so another thread's allocation goes on meanwhile. */
static void test_free_outside_lock(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_stream other;
    t_gate g;
    freer f;
    pthread_t th;
    void* q = NULL;
    double t0;
    d.caching = GM_TOGGLE_OFF; /* every free goes to the backend */
    ctx = t_setup(d);
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    T_OK(gm_alloc(ctx, &f.p, MiB, NULL));
    T_OK(gm_stream_create(ctx, &other));
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, other, t_gate_wait, &g)); /* the device stays busy */
    t_open_later(&g, 2000);                            /* (were the lock held, the check below fails, not hangs) */
    pthread_create(&th, NULL, free_in_thread, &f);     /* its cudaFree waits for that */
    {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    t0 = t_now();
    T_EQ(gm_check(ctx), 0); /* takes the context's lock, and no driver call: not stuck behind the free */
    T_CHECK(t_now() - t0 < 1.0);
    t0 = t_now();
    T_OK(gm_alloc(ctx, &q, MiB, NULL));
    /* On a GPU the driver itself may hold a cudaMalloc behind another
       thread's cudaFree that waits for the device (an H100 did): the
       allocation's own time is gpumem's only on the sim and the stand-in. */
    if (t_sim || t_standin()) T_CHECK(t_now() - t0 < 1.0);
    pthread_join(th, NULL);
    T_OK(f.r);
    T_OK(gm_free(ctx, q));
    T_OK(gm_stream_destroy(ctx, other));
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 1);
}

/* Host functions make no CUDA call (the stand-in counts any as a
   violation, which fails the program). */
static volatile int host_fn_ran, host_fn_inside;
static void host_fn(void* arg) {
    (void)arg;
    host_fn_ran = 1;
#ifdef GM_TEST_CUDA
    host_fn_inside = gmcudart_in_host_func ? gmcudart_in_host_func() : 1;
#else
    host_fn_inside = 1;
#endif
}
static void test_host_functions(void) {
    gm_context* ctx = t_setup(t_desc());
    gm_stream s;
    T_OK(gm_stream_create(ctx, &s));
    T_OK(gm_launch_host(ctx, s, host_fn, NULL));
    T_OK(gm_stream_synchronize(ctx, s));
    T_EQ(host_fn_ran, 1);
    T_EQ(host_fn_inside, 1);
    T_OK(gm_stream_destroy(ctx, s));
    T_OK(gm_shutdown(ctx));
}

#ifdef GPUMEM_URING
/* The disk tier's staging is memory io_uring can register (an anonymous
   mapping registered with the backend, not cudaHostAlloc's file mapping),
   and the log says so. */
static void test_staging_registered(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t;
    char dir[] = "/tmp/gm-backend-XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(0);
        return;
    }
    d.device_budget = 8 * MiB;
    d.host_budget = 4 * MiB;
    d.disk_dir = dir;
    d.disk_io = GM_DISK_IO_URING;
    d.log_fn = log_all;
    d.log_level = GM_LOG_INFO;
    log_clear();
    ctx = t_setup(d);
    T_OK(gm_tensor_create(ctx, &t, 2 * MiB));
    fill(ctx, t, 2 * MiB, 5, NULL);
    T_OK(gm_tensor_evict_to(ctx, t, GM_TIER_DISK));
    verify(ctx, t, 2 * MiB, 5, NULL);
    T_EQ(errors_now(ctx), 0);
    if (strstr(logbuf, "io_uring unavailable")) {
        printf("note: io_uring is not available here: buffer registration not checked\n");
    } else {
        T_CHECK(strstr(logbuf, "registered its staging") != NULL);
        T_CHECK(strstr(logbuf, "refused registered buffers") == NULL);
        if (!strstr(logbuf, "registered its staging")) printf("log:\n%s", logbuf);
    }
    T_OK(gm_tensor_destroy(ctx, t));
    T_OK(gm_shutdown(ctx));
    rmdir(dir);
}
#endif

#ifdef GM_TEST_CUDA
/* gpumem on device 1 makes no context on device 0: the device guard gives
   the caller's device back only where it has a context (cudaSetDevice makes
   one since CUDA 12). In a child, before anything touched a device. */
static void test_device1_contexts(void) {
    int st;
    pid_t pid;
    if (!t_standin()) return;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        gm_desc d = t_desc();
        gm_context* ctx = NULL;
        gm_tensor t;
        void* p;
        int ok = 1;
        d.backend = GM_BACKEND_CUDA;
        d.device = 1;
        d.ignore_env = 1;
        d.log_fn = t_log;
        ok &= gm_setup(&ctx, &d) == GM_OK;
        ok &= ctx && gm_alloc(ctx, &p, MiB, NULL) == GM_OK && gm_free(ctx, p) == GM_OK;
        ok &= ctx && gm_tensor_create(ctx, &t, MiB) == GM_OK && gm_tensor_acquire(ctx, t, NULL, &p) == GM_OK &&
              gm_tensor_release(ctx, t, NULL, 1) == GM_OK && gm_tensor_evict(ctx, t) == GM_OK &&
              gm_tensor_destroy(ctx, t) == GM_OK;
        ok &= ctx && gm_empty_cache(ctx) == GM_OK && gm_shutdown(ctx) == GM_OK;
        ok &= gmcudart_contexts(1) == 1;
        if (gmcudart_contexts(0)) printf("FAIL: a context was made on device 0\n");
        ok &= gmcudart_contexts(0) == 0;
        _exit(ok ? 0 : 1);
    }
    T_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A sticky device fault stops the ladder: GM_ERR_BACKEND with CUDA's
   message, not a climb to unified memory and out of memory. */
static void test_sticky_error(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    void *p, *q = NULL;
    if (!t_standin()) return;
    d.fallback = GM_FALLBACK_MANAGED;
    d.device_budget = 64 * MiB;
    d.log_fn = log_all;
    ctx = t_setup(d);
    T_OK(gm_alloc(ctx, &p, MiB, NULL));
    log_clear();
    gmcudart_inject_sticky(cudaErrorIllegalAddress);
    T_EQ(gm_alloc(ctx, &q, 32 * MiB, NULL), GM_ERR_BACKEND); /* a cache miss */
    if (!T_CHECK(strstr(logbuf, "illegal memory access") != NULL)) printf("  log: %s\n", logbuf);
    T_CHECK(strstr(logbuf, "out of memory") == NULL);
    T_EQ(t_stats(ctx).num_managed_fallbacks, 0);
    T_EQ(t_stats(ctx).num_ooms, 0);
    gmcudart_reset(); /* a real process would have to end here */
    T_OK(gm_free(ctx, p));
    T_OK(gm_alloc(ctx, &q, 32 * MiB, NULL)); /* the next request is not refused for the old fault */
    T_OK(gm_free(ctx, q));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
}

/* A driver older than the runtime is an error that says so, never "no
   device" (which the suite would read as a skip). */
static void test_old_driver(void) {
    gm_desc d = t_desc();
    gm_context* ctx = NULL;
    if (!t_standin()) return;
    d.backend = GM_BACKEND_CUDA;
    d.ignore_env = 1;
    d.log_fn = log_all;
    gmcudart_set_driver_version(CUDART_VERSION - 10);
    log_clear();
    T_EQ(gm_setup(&ctx, &d), GM_ERR_BACKEND);
    T_CHECK(ctx == NULL);
    if (!T_CHECK(strstr(logbuf, "driver") != NULL)) printf("  log: %s\n", logbuf);
    gmcudart_set_driver_version(CUDART_VERSION);
    (void)cudaGetLastError();
}

/* concurrentManagedAccess 0 (WSL2 and others): while any kernel runs, the
   host may not touch unified memory. Bringing a tensor back into unified
   memory copies on the copy stream; advice and prefetch are skipped
   without an error per call. On the stand-in a host copy would fault. */
static void test_managed_no_cma(void) {
    gm_desc d = t_desc();
    gm_context* ctx;
    gm_tensor t;
    gm_stream s;
    t_gate g;
    void* p;
    if (!t_standin()) return;
    gmcudart_set_cma(0);
    d.device_budget = 32 * MiB;
    d.fallback = GM_FALLBACK_MANAGED;
    ctx = t_setup(d);
    t_log_count = 0;
    T_OK(gm_tensor_create(ctx, &t, 6 * MiB));
    fill(ctx, t, 6 * MiB, 7, NULL);
    T_OK(gm_tensor_evict(ctx, t));
    T_EQ(where(ctx, t), GM_TIER_HOST);
    T_OK(gm_empty_cache(ctx));
    T_OK(gm_set_budget(ctx, 2 * MiB)); /* now it comes back into unified memory */
    T_OK(gm_stream_create(ctx, &s));
    t_gate_init(&g);
    T_OK(gm_launch_host(ctx, s, t_gate_wait, &g)); /* a kernel runs: unified memory is off limits */
    T_OK(gm_tensor_acquire(ctx, t, NULL, &p));     /* host -> unified, on the device's side */
    T_EQ(where(ctx, t), GM_TIER_MANAGED);
    T_OK(gm_tensor_release(ctx, t, NULL, 0));
    t_gate_open(&g);
    verify(ctx, t, 6 * MiB, 7, NULL);
    T_EQ(errors_now(ctx), 0);
    T_EQ(t_log_count, 0); /* no advice or prefetch error per call */
    T_OK(gm_tensor_destroy(ctx, t));
    T_OK(gm_stream_destroy(ctx, s));
    T_EQ(gm_check(ctx), 0);
    T_OK(gm_shutdown(ctx));
    t_gate_done(&g, 0);
    gmcudart_set_cma(1);
}
#endif

int main(void) {
    (void)t_walk, (void)where, (void)log_all, (void)log_clear;
#ifdef GM_TEST_CUDA
    test_device1_contexts(); /* first: before this process touches a device */
#endif
    test_alignment();
    test_stream_handles();
    test_managed_free();
    test_free_outside_lock();
    test_host_functions();
#ifdef GPUMEM_URING
    test_staging_registered();
#endif
#ifdef GM_TEST_CUDA
    test_sticky_error();
    test_old_driver();
    test_managed_no_cma();
#endif
    return t_done();
}
