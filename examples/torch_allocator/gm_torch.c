/* gm_torch.c -- gpumem as PyTorch's CUDA allocator, through
   torch.cuda.memory.CUDAPluggableAllocator; gpumem_torch.py beside it
   installs it (train.py uses that).

   Build (make torch-allocator):
     cc -O2 -shared -fPIC -DGPUMEM_CUDA -I. -I$CUDA_HOME/include \
        examples/torch_allocator/gm_torch.c -o build/libgm_torch.so \
        -L$CUDA_HOME/lib64 -lcudart -pthread

   Two ways to install it (gpumem_torch.py does either):
     MemPool mode (the default): PyTorch's own caching allocator stays
       global, and a torch.cuda.MemPool backed by gm_torch_malloc and
       gm_torch_free takes the allocations made inside
       `with torch.cuda.use_mem_pool(pool)`. PyTorch asks us for whole
       segments and keeps record_stream, CUDA graphs, out-of-memory
       exceptions, statistics and snapshots working; gm_torch_malloc
       returns NULL only after gpumem's own eviction and fallback, and
       PyTorch raises torch.OutOfMemoryError.
     Global mode (opt-in): change_current_allocator makes gpumem PyTorch's
       only allocator. Then PyTorch ignores record_stream unless
       gm_torch_record_stream is set as its hook, empty_cache does nothing
       unless gm_torch_empty_cache is, set_per_process_memory_fraction needs
       gm_torch_set_memory_fraction, and memory_stats, memory_allocated,
       snapshots, cudnn.benchmark's cache info, CUDA graphs and IPC raise or
       break: those are PyTorch's limits for any pluggable allocator.

   gm_torch_malloc is safe while its stream captures a CUDA graph: it then
   serves only from the cache or a new segment, with no synchronization and
   no work on any stream (gm_alloc_ex with GM_ALLOC_NO_SYNC). gm_torch_free
   honours the stream it is given: the memory is reused on another stream
   only once the work queued there has completed.

   One gpumem context per device, made on the first request for it.
   Configure with the environment, read then:
     GPUMEM_CONF         gpumem's options, e.g. "budget:6G" (a budget below
                         the device makes a small GPU of a big one), or
                         "backend:sim" for gpumem's simulated device (tests
                         without a GPU; PyTorch's streams are ignored there)
     GM_TORCH_ON_FAIL    what a request nothing can serve does:
                           null   (default) log it, count it, return NULL
                           abort  log it and abort the process at once
   Unless GPUMEM_CONF says otherwise (fallback:fail), requests past the
   budget are served by unified memory instead of failing: the run gets
   slower, not killed.

   In global mode PyTorch does not check the pointer a pluggable allocator
   returns: a NULL becomes a tensor at address 0 and the first kernel that
   touches it faults. So a failure is logged here with its size and reason,
   counted in gm_torch_failures(), and described by gm_torch_last_error();
   train.py checks the count after every step and raises a MemoryError with
   that text. GM_TORCH_ON_FAIL=abort stops at the failing request instead. */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#ifdef GPUMEM_CUDA
#include <cuda_runtime_api.h>
#else
typedef void* cudaStream_t; /* a build without CUDA (sim only) */
#endif

#define GM_TORCH_API __attribute__((visibility("default")))
enum { GM_TORCH_MAX_DEVICES = 64 };

static pthread_mutex_t gm_torch_mu = PTHREAD_MUTEX_INITIALIZER;   /* the contexts */
static pthread_mutex_t gm_torch_errmu = PTHREAD_MUTEX_INITIALIZER; /* the error text */
static gm_context* gm_torch_ctx[GM_TORCH_MAX_DEVICES];
static double gm_torch_fraction[GM_TORCH_MAX_DEVICES]; /* set before the context was made; 0: none */
static gm__ptrmap gm_torch_dev; /* pointer -> device + 1 of the live blocks, for record_stream (under gm_torch_mu) */
static int gm_torch_sim;
static unsigned long long gm_torch_nfail;
static char gm_torch_err[640];   /* the last failure, for gm_torch_last_error */
static char gm_torch_cause[512]; /* the last error gpumem logged */

/* The log: warnings and errors go to stderr; the last error is kept as
   the cause of the next failure. */
static void gm_torch_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level == GM_LOG_ERROR) {
        pthread_mutex_lock(&gm_torch_errmu);
        snprintf(gm_torch_cause, sizeof gm_torch_cause, "%s", msg);
        pthread_mutex_unlock(&gm_torch_errmu);
    }
    fprintf(stderr, "gpumem: %s\n", msg);
}

/* A request that cannot be served: say so, then NULL or abort. */
static void* gm_torch_fail(ssize_t size, int device, const char* why) {
    const char* mode = getenv("GM_TORCH_ON_FAIL");
    pthread_mutex_lock(&gm_torch_errmu);
    snprintf(gm_torch_err, sizeof gm_torch_err, "gm_torch_malloc: cannot serve %lld bytes on device %d: %s%s%s%s",
             (long long)size, device, why, gm_torch_cause[0] ? " (" : "", gm_torch_cause,
             gm_torch_cause[0] ? ")" : "");
    gm_torch_cause[0] = 0;
    __atomic_add_fetch(&gm_torch_nfail, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "gpumem: %s\n", gm_torch_err);
    pthread_mutex_unlock(&gm_torch_errmu);
    if (mode && !strcmp(mode, "abort")) {
        fprintf(stderr, "gpumem: GM_TORCH_ON_FAIL=abort: stopping here\n");
        abort();
    }
    return NULL;
}

/* The device's context, made on first use; NULL (with gm_torch_err set)
   when it cannot be. Called with gm_torch_mu held. */
static gm_context* gm_torch_get(int device) {
    const char* conf = getenv("GPUMEM_CONF");
    gm_desc d;
    gm_result r;
    if (device < 0 || device >= GM_TORCH_MAX_DEVICES) return NULL;
    if (gm_torch_ctx[device]) return gm_torch_ctx[device];
    memset(&d, 0, sizeof d);
    d.device = device;
    d.log_fn = gm_torch_log;
    /* past the budget: unified memory, unless the options say fallback:... */
    if (!conf || !strstr(conf, "fallback:")) d.fallback = GM_FALLBACK_MANAGED;
    r = gm_setup(&gm_torch_ctx[device], &d);
    if (r != GM_OK) {
        gm_torch_log(GM_LOG_ERROR, gm_result_string(r), NULL);
        gm_torch_ctx[device] = NULL;
        return NULL;
    }
    __atomic_store_n(&gm_torch_sim, gm_query_desc(gm_torch_ctx[device]).backend == GM_BACKEND_SIM, __ATOMIC_RELAXED);
    if (gm_torch_fraction[device] > 0) {
        size_t f = 0, t = 0;
        if (gm_mem_info(gm_torch_ctx[device], &f, &t) == GM_OK)
            gm_set_budget(gm_torch_ctx[device], (size_t)(gm_torch_fraction[device] * (double)t));
    }
    return gm_torch_ctx[device];
}

GM_TORCH_API void* gm_torch_malloc(ssize_t size, int device, cudaStream_t stream) {
    gm_context* ctx;
    void* p = NULL;
    gm_result r;
    if (size <= 0) return NULL; /* an empty tensor has no storage */
    pthread_mutex_lock(&gm_torch_errmu); /* a cause logged before this request is not its cause */
    gm_torch_cause[0] = 0;
    pthread_mutex_unlock(&gm_torch_errmu);
    pthread_mutex_lock(&gm_torch_mu);
    ctx = gm_torch_get(device);
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx) return gm_torch_fail(size, device, "no gpumem context for this device");
    if (__atomic_load_n(&gm_torch_sim, __ATOMIC_RELAXED)) {
        r = gm_alloc(ctx, &p, (size_t)size, NULL);
    } else {
        unsigned flags = 0;
#ifdef GPUMEM_CUDA
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) (void)cudaGetLastError();
        if (cs != cudaStreamCaptureStatusNone) flags = GM_ALLOC_NO_SYNC; /* a graph is being captured */
#endif
        r = gm_alloc_ex(ctx, &p, (size_t)size, (gm_stream)stream, flags);
    }
    if (r != GM_OK || !p) return gm_torch_fail(size, device, gm_result_string(r));
    pthread_mutex_lock(&gm_torch_mu);
    if (!gm__map_put(&gm_torch_dev, (uintptr_t)p, (void*)(uintptr_t)(device + 1))) {
        pthread_mutex_unlock(&gm_torch_mu);
        gm_free(ctx, p);
        return gm_torch_fail(size, device, "out of host memory");
    }
    pthread_mutex_unlock(&gm_torch_mu);
    return p;
}

GM_TORCH_API void gm_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
    gm_context* ctx;
    gm_result r;
    if (!ptr || device < 0 || device >= GM_TORCH_MAX_DEVICES) return;
    pthread_mutex_lock(&gm_torch_mu);
    ctx = gm_torch_ctx[device];
    gm__map_del(&gm_torch_dev, (uintptr_t)ptr);
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx) {
        fprintf(stderr, "gpumem: gm_torch_free: %p on device %d, which has no context\n", ptr, device);
        return;
    }
    if (!__atomic_load_n(&gm_torch_sim, __ATOMIC_RELAXED)) { /* reused elsewhere only once the work queued here is done */
        int capturing = 0;
#ifdef GPUMEM_CUDA
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) (void)cudaGetLastError();
        capturing = cs != cudaStreamCaptureStatusNone; /* no event on a capturing stream: the graph's order holds */
#endif
        if (!capturing) (void)gm_record_stream(ctx, ptr, (gm_stream)stream);
    }
    r = gm_free(ctx, ptr);
    if (r != GM_OK) fprintf(stderr, "gpumem: gm_torch_free(%p, %lld bytes): %s\n", ptr, (long long)size, gm_result_string(r));
}

/* >>hooks -----------------------------------------------------------------
   The pluggable allocator's other hooks, for global mode (gpumem_torch.py
   sets them through the allocator's set_*_fn setters, private PyTorch API),
   and gpumem's own figures for either mode. */

/* record_stream: the block is not reused off its stream until the work
   queued on `stream` now has completed. */
GM_TORCH_API void gm_torch_record_stream(void* ptr, cudaStream_t stream) {
    gm_context* ctx = NULL;
    uintptr_t dev;
    if (!ptr || __atomic_load_n(&gm_torch_sim, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&gm_torch_mu);
    dev = (uintptr_t)gm__map_get(&gm_torch_dev, (uintptr_t)ptr);
    if (dev) ctx = gm_torch_ctx[dev - 1];
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx) {
        fprintf(stderr, "gpumem: gm_torch_record_stream: %p is not a live block of gm_torch_malloc\n", ptr);
        return;
    }
    if (gm_record_stream(ctx, ptr, (gm_stream)stream) != GM_OK)
        fprintf(stderr, "gpumem: gm_torch_record_stream(%p): refused (logged above)\n", ptr);
}

/* empty_cache: every device's cached memory goes back. */
GM_TORCH_API void gm_torch_empty_cache(void) {
    int i;
    pthread_mutex_lock(&gm_torch_mu);
    for (i = 0; i < GM_TORCH_MAX_DEVICES; i++)
        if (gm_torch_ctx[i]) gm_empty_cache(gm_torch_ctx[i]);
    pthread_mutex_unlock(&gm_torch_mu);
}

/* set_per_process_memory_fraction: the device's budget becomes that
   fraction of its memory (now, or when its context is made). */
GM_TORCH_API void gm_torch_set_memory_fraction(double fraction, int device) {
    if (device < 0 || device >= GM_TORCH_MAX_DEVICES || !(fraction > 0 && fraction <= 1)) return;
    pthread_mutex_lock(&gm_torch_mu);
    gm_torch_fraction[device] = fraction;
    if (gm_torch_ctx[device]) {
        size_t f = 0, t = 0;
        if (gm_mem_info(gm_torch_ctx[device], &f, &t) == GM_OK) gm_set_budget(gm_torch_ctx[device], (size_t)(fraction * (double)t));
    }
    pthread_mutex_unlock(&gm_torch_mu);
}

/* init: PyTorch says how many devices there are; contexts are made on first use. */
GM_TORCH_API void gm_torch_init(int device_count) { (void)device_count; }

/* gpumem's statistics of a device (gm_stats): 0, or -1 without a context. */
GM_TORCH_API int gm_torch_get_stats(int device, gm_stats* out) {
    gm_context* ctx = NULL;
    if (device < 0 || device >= GM_TORCH_MAX_DEVICES || !out) return -1;
    pthread_mutex_lock(&gm_torch_mu);
    ctx = gm_torch_ctx[device];
    pthread_mutex_unlock(&gm_torch_mu);
    return ctx && gm_get_stats(ctx, out) == GM_OK ? 0 : -1;
}

/* sizeof(gm_stats), for a caller that allocates one without the header. */
GM_TORCH_API size_t gm_torch_stats_size(void) { return sizeof(gm_stats); }

/* >>checks ----------------------------------------------------------------
   For the script: what failed, and the figures PyTorch's own statistics
   cannot see under a pluggable allocator. */
GM_TORCH_API unsigned long long gm_torch_failures(void) { return __atomic_load_n(&gm_torch_nfail, __ATOMIC_RELAXED); }
/* The last failure's text, copied for the calling thread. */
GM_TORCH_API const char* gm_torch_last_error(void) {
    static __thread char copy[sizeof gm_torch_err];
    pthread_mutex_lock(&gm_torch_errmu);
    memcpy(copy, gm_torch_err, sizeof copy);
    pthread_mutex_unlock(&gm_torch_errmu);
    return copy;
}

/* out[0..5]: allocated, peak allocated, reserved, peak reserved, bytes in
   unified memory, unified-memory fallbacks. 0, or -1 without a context. */
GM_TORCH_API int gm_torch_stats(int device, long long* out) {
    gm_context* ctx;
    gm_stats s;
    if (device < 0 || device >= GM_TORCH_MAX_DEVICES || !out) return -1;
    pthread_mutex_lock(&gm_torch_mu);
    ctx = gm_torch_ctx[device];
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx || gm_get_stats(ctx, &s) != GM_OK) return -1;
    out[0] = s.allocated_bytes[GM_STAT_ALL].current;
    out[1] = s.allocated_bytes[GM_STAT_ALL].peak;
    out[2] = s.reserved_bytes[GM_STAT_ALL].current;
    out[3] = s.reserved_bytes[GM_STAT_ALL].peak;
    out[4] = s.managed_bytes;
    out[5] = s.num_managed_fallbacks;
    return 0;
}

/* gpumem's text summary of the device's allocator into buf. */
GM_TORCH_API size_t gm_torch_summary(int device, char* buf, size_t cap) {
    gm_context* ctx = NULL;
    pthread_mutex_lock(&gm_torch_mu);
    if (device >= 0 && device < GM_TORCH_MAX_DEVICES) ctx = gm_torch_ctx[device];
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx) {
        if (cap) buf[0] = 0;
        return 0;
    }
    return gm_summary(ctx, buf, cap);
}

/* Shuts every context down, when nothing is allocated from any of them
   (0); otherwise it shuts nothing down, says what is still allocated, and
   returns -1: a later gm_torch_free must find the context that served its
   pointer. No other thread may call into the library meanwhile. */
GM_TORCH_API int gm_torch_shutdown(void) {
    int i, busy = 0;
    pthread_mutex_lock(&gm_torch_mu);
    for (i = 0; i < GM_TORCH_MAX_DEVICES; i++) {
        gm_stats s;
        if (!gm_torch_ctx[i] || gm_get_stats(gm_torch_ctx[i], &s) != GM_OK) continue;
        if (s.allocation[GM_STAT_ALL].current || s.managed_bytes) {
            fprintf(stderr, "gpumem: gm_torch_shutdown: device %d still has %lld allocations and %lld bytes of "
                            "unified memory; nothing is shut down\n",
                    i, (long long)s.allocation[GM_STAT_ALL].current, (long long)s.managed_bytes);
            busy = 1;
        }
    }
    for (i = 0; i < GM_TORCH_MAX_DEVICES && !busy; i++) {
        if (gm_torch_ctx[i]) gm_shutdown(gm_torch_ctx[i]);
        gm_torch_ctx[i] = NULL;
        gm_torch_fraction[i] = 0;
    }
    if (!busy) {
        GPUMEM_FREE(gm_torch_dev.e);
        memset(&gm_torch_dev, 0, sizeof gm_torch_dev);
    }
    pthread_mutex_unlock(&gm_torch_mu);
    if (busy) return -1;
    pthread_mutex_lock(&gm_torch_errmu);
    __atomic_store_n(&gm_torch_nfail, 0, __ATOMIC_RELAXED);
    gm_torch_err[0] = gm_torch_cause[0] = 0;
    pthread_mutex_unlock(&gm_torch_errmu);
    return 0;
}
