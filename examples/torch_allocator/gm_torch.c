/* gm_torch.c -- gpumem as PyTorch's CUDA allocator, through
   torch.cuda.memory.CUDAPluggableAllocator (see train.py beside it).

   Build (make torch-allocator):
     cc -O2 -shared -fPIC -DGPUMEM_CUDA -I. -I$CUDA_HOME/include \
        examples/torch_allocator/gm_torch.c -o build/libgm_torch.so \
        -L$CUDA_HOME/lib64 -lcudart -pthread

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

   PyTorch does not check the pointer a pluggable allocator returns: a NULL
   becomes a tensor at address 0 and the first kernel that touches it
   faults. So a failure is logged here with its size and reason, counted in
   gm_torch_failures(), and described by gm_torch_last_error(); train.py
   checks the count after every step and raises a MemoryError with that
   text. GM_TORCH_ON_FAIL=abort stops at the failing request instead. */
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
    r = gm_alloc(ctx, &p, (size_t)size, __atomic_load_n(&gm_torch_sim, __ATOMIC_RELAXED) ? NULL : (gm_stream)stream);
    if (r != GM_OK || !p) return gm_torch_fail(size, device, gm_result_string(r));
    return p;
}

GM_TORCH_API void gm_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
    gm_context* ctx;
    gm_result r;
    (void)stream; /* the block belongs to the stream it was allocated on */
    if (!ptr || device < 0 || device >= GM_TORCH_MAX_DEVICES) return;
    pthread_mutex_lock(&gm_torch_mu);
    ctx = gm_torch_ctx[device];
    pthread_mutex_unlock(&gm_torch_mu);
    if (!ctx) {
        fprintf(stderr, "gpumem: gm_torch_free: %p on device %d, which has no context\n", ptr, device);
        return;
    }
    r = gm_free(ctx, ptr);
    if (r != GM_OK) fprintf(stderr, "gpumem: gm_torch_free(%p, %lld bytes): %s\n", ptr, (long long)size, gm_result_string(r));
}

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
    }
    pthread_mutex_unlock(&gm_torch_mu);
    if (busy) return -1;
    pthread_mutex_lock(&gm_torch_errmu);
    __atomic_store_n(&gm_torch_nfail, 0, __ATOMIC_RELAXED);
    gm_torch_err[0] = gm_torch_cause[0] = 0;
    pthread_mutex_unlock(&gm_torch_errmu);
    return 0;
}
