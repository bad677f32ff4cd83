/* The PyTorch allocator library (examples/torch_allocator/gm_torch.c), as
   PyTorch sees it: loaded with dlopen and called through its exported
   symbols. Requests within the budget, past it (unified memory), the
   failure path (NULL, counted and described; or abort), bad arguments, and
   threads. The sim build runs it on the simulated device (backend:sim in
   GPUMEM_CONF); the CUDA build on the GPU, or skips. */
#include "gm_test.h"
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void* (*t_malloc)(ssize_t, int, void*);
static void (*t_free)(void*, ssize_t, int, void*);
static unsigned long long (*t_failures)(void);
static const char* (*t_last_error)(void);
static int (*t_tstats)(int, long long*);
static size_t (*t_summary)(int, char*, size_t);
static int (*t_shutdown)(void);
static void (*t_record_stream)(void*, void*);
static void (*t_empty_cache)(void);
static void (*t_set_fraction)(double, int);
static void (*t_init)(int);
static int (*t_get_stats)(int, gm_stats*);
static size_t (*t_stats_size)(void);

/* The library beside the test (build/cuda/libgm_torch.so, linked with the
   runtime the CUDA tests link), else in the directory above it
   (build/libgm_torch.so): where the Makefile builds them. */
static void* load(void) {
    char exe[4096], path[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char* slash;
    void* h;
    if (n <= 0) return NULL;
    exe[n] = 0;
    slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(path, sizeof path, "%s/libgm_torch.so", exe);
    if (access(path, R_OK) != 0) snprintf(path, sizeof path, "%s/../libgm_torch.so", exe);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) printf("dlopen %s: %s\n", path, dlerror());
    return h;
}

#define SYM(var, name) (*(void**)&(var) = dlsym(lib, name), T_CHECK((var) != NULL))

static long long stat_of(int i) {
    long long v[6] = {-1, -1, -1, -1, -1, -1};
    if (t_tstats(0, v) != 0) return -1;
    return v[i];
}

/* A fresh start with these options (on sim in the sim build). */
static void conf(const char* c) {
    char full[256];
    T_EQ(t_shutdown(), 0);
    snprintf(full, sizeof full, "%s%s", t_sim ? "backend:sim," : "", c);
    setenv("GPUMEM_CONF", full, 1);
}

/* Within the budget, then past it: unified memory, not a failure. */
static void test_budget_then_unified(void) {
    void *a, *b, *c, *u;
    char buf[8192];
    conf("budget:64M");
    a = t_malloc((ssize_t)(16 * MiB), 0, NULL);
    b = t_malloc((ssize_t)(16 * MiB), 0, NULL);
    c = t_malloc((ssize_t)(16 * MiB), 0, NULL);
    T_CHECK(a && b && c);
    T_EQ(stat_of(0), (long long)(48 * MiB));
    u = t_malloc((ssize_t)(32 * MiB), 0, NULL); /* 48 + 32 > 64: unified memory */
    T_CHECK(u != NULL);
    T_EQ(stat_of(4), (long long)(32 * MiB));
    T_EQ(stat_of(5), 1);
    T_EQ(t_failures(), 0);
    if (t_sim && u) { /* sim: all of it is host memory */
        memset(u, 7, 32 * MiB);
        memset(a, 9, 16 * MiB);
        T_EQ(((unsigned char*)u)[32 * MiB - 1], 7);
    }
    T_CHECK(t_summary(0, buf, sizeof buf) > 0);
    T_CHECK(strstr(buf, "num_managed_fallbacks") != NULL);
    t_free(u, (ssize_t)(32 * MiB), 0, NULL);
    T_EQ(stat_of(4), 0);
    t_free(a, (ssize_t)(16 * MiB), 0, NULL);
    t_free(b, (ssize_t)(16 * MiB), 0, NULL);
    t_free(c, (ssize_t)(16 * MiB), 0, NULL);
    T_EQ(stat_of(0), 0);
    T_CHECK(stat_of(3) <= (long long)(64 * MiB)); /* the cache never passed the budget */
    /* shutting down under a live allocation is refused; its free still works */
    a = t_malloc(4096, 0, NULL);
    T_EQ(t_shutdown(), -1);
    t_free(a, 4096, 0, NULL);
    T_EQ(stat_of(0), 0);
}

/* fallback:fail: a request nothing can serve is NULL, counted, described. */
static void test_failure_path(void) {
    void *a, *b;
    conf("budget:64M,fallback:fail");
    a = t_malloc((ssize_t)(48 * MiB), 0, NULL);
    T_CHECK(a != NULL);
    b = t_malloc((ssize_t)(32 * MiB), 0, NULL);
    T_CHECK(b == NULL);
    T_EQ(t_failures(), 1);
    T_CHECK(strstr(t_last_error(), "cannot serve 33554432 bytes on device 0") != NULL);
    T_CHECK(strstr(t_last_error(), "out of memory") != NULL);
    T_EQ(stat_of(5), 0);
    /* empty tensors have no storage: NULL, and not a failure */
    T_CHECK(t_malloc(0, 0, NULL) == NULL);
    T_EQ(t_failures(), 1);
    /* a device that cannot exist */
    T_CHECK(t_malloc(4096, -1, NULL) == NULL);
    T_EQ(t_failures(), 2);
    T_CHECK(strstr(t_last_error(), "device -1") != NULL);
    /* frees that are not ours are reported and ignored */
    t_free(&a, 8, 0, NULL);
    t_free(a, (ssize_t)(48 * MiB), 5, NULL);
    t_free(NULL, 0, 0, NULL);
    t_free(a, (ssize_t)(48 * MiB), 0, NULL);
    T_EQ(stat_of(0), 0);
}

/* GM_TORCH_ON_FAIL=abort stops at the failing request. */
static void test_abort(void) {
    pid_t pid;
    int status = 0;
    conf("budget:16M,fallback:fail");
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        setenv("GM_TORCH_ON_FAIL", "abort", 1);
        (void)t_malloc((ssize_t)(32 * MiB), 0, NULL);
        _exit(0); /* not reached */
    }
    T_CHECK(pid > 0);
    T_EQ(waitpid(pid, &status, 0), pid);
    T_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

/* PyTorch calls from many threads. */
static void* churn(void* arg) {
    unsigned long long x = (unsigned long long)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    void* live[16];
    ssize_t size[16];
    int i, k;
    memset(live, 0, sizeof live);
    for (i = 0; i < 400; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        k = (int)(x % 16);
        if (live[k]) {
            t_free(live[k], size[k], 0, NULL);
            live[k] = NULL;
        } else {
            size[k] = (ssize_t)(x % (3 * MiB)) + 1;
            live[k] = t_malloc(size[k], 0, NULL);
        }
    }
    for (k = 0; k < 16; k++)
        if (live[k]) t_free(live[k], size[k], 0, NULL);
    return NULL;
}

static void test_threads(void) {
    pthread_t th[4];
    int i;
    conf("budget:96M");
    for (i = 0; i < 4; i++) pthread_create(&th[i], NULL, churn, (void*)(uintptr_t)(i + 1));
    for (i = 0; i < 4; i++) pthread_join(th[i], NULL);
    T_EQ(t_failures(), 0);
    T_EQ(stat_of(0), 0);
    T_EQ(stat_of(4), 0);
}

/* The device's memory as the library will see it (the sim's 16 GiB, or
   the GPU's): a fraction of it is what set_memory_fraction takes. */
static double device_total(void) {
    gm_context* ctx = t_setup(t_desc());
    size_t f = 0, t = 0;
    T_OK(gm_mem_info(ctx, &f, &t));
    gm_shutdown(ctx);
    return t ? (double)t : 16.0 * 1024 * MiB;
}

/* The hooks of global mode: record_stream, empty_cache, the memory
   fraction, init; and gpumem's own statistics. */
static void test_hooks(void) {
    void *a, *b;
    gm_stats s;
    conf("budget:256M");
    t_init(1);
    T_EQ(t_stats_size(), sizeof(gm_stats));
    T_EQ(t_get_stats(0, &s), -1); /* no context yet */
    t_set_fraction(32.0 * MiB / device_total(), 0); /* 32 MiB of the device, set before the context */
    a = t_malloc((ssize_t)(24 * MiB), 0, NULL);
    T_CHECK(a != NULL);
    T_EQ(t_get_stats(0, &s), 0);
    T_EQ(s.allocated_bytes[GM_STAT_ALL].current, 24 * (int64_t)MiB);
    b = t_malloc((ssize_t)(24 * MiB), 0, NULL); /* past the fraction: unified memory */
    T_CHECK(b != NULL);
    T_EQ(t_get_stats(0, &s), 0);
    T_EQ(s.managed_bytes, 24 * (int64_t)MiB);
    t_record_stream(a, NULL); /* its own stream: nothing to wait for */
    t_record_stream(&s, NULL);  /* not ours: reported, ignored */
    t_free(b, (ssize_t)(24 * MiB), 0, NULL);
    t_free(a, (ssize_t)(24 * MiB), 0, NULL);
    T_EQ(t_get_stats(0, &s), 0);
    T_CHECK(s.reserved_bytes[GM_STAT_ALL].current > 0); /* cached */
    t_empty_cache();
    T_EQ(t_get_stats(0, &s), 0);
    T_EQ(s.reserved_bytes[GM_STAT_ALL].current, 0);
    t_set_fraction(2.0, 0); /* out of range: ignored */
    T_EQ(t_failures(), 0);
}

#ifdef GM_TEST_CUDA
/* During graph capture (PyTorch switches the capturing thread to relaxed
   mode before it calls malloc for a new segment): no synchronization and
   no stream work on the capturing stream, so the capture stays valid; past
   the budget a request is refused at once. The stand-in invalidates the
   capture on any forbidden call. */
static void test_capture(void) {
    cudaStream_t s;
    cudaGraph_t graph = NULL;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    void *a, *b, *c, *d;
    conf("budget:64M");
    T_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    a = t_malloc((ssize_t)(4 * MiB), 0, s);
    T_CHECK(a != NULL);
    t_free(a, (ssize_t)(4 * MiB), 0, s); /* cached for s */
    T_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    T_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    b = t_malloc((ssize_t)(4 * MiB), 0, s);  /* from the cache */
    c = t_malloc((ssize_t)(16 * MiB), 0, s); /* a new segment */
    d = t_malloc((ssize_t)(128 * MiB), 0, s); /* past the budget: refused, nothing waited for */
    T_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    T_CHECK(b != NULL && c != NULL);
    T_CHECK(d == NULL);
    T_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    T_EQ(st, cudaStreamCaptureStatusActive);
    T_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    if (graph) T_EQ(cudaGraphDestroy(graph), cudaSuccess);
    t_free(b, (ssize_t)(4 * MiB), 0, s);
    t_free(c, (ssize_t)(16 * MiB), 0, s);
    T_EQ(cudaStreamSynchronize(s), cudaSuccess);
    T_EQ(cudaStreamDestroy(s), cudaSuccess);
}
#endif

int main(void) {
    void* lib;
    /* the library reports every failure on stderr, by design: quiet here */
    if (!getenv("GM_TEST_VERBOSE") && !freopen("/dev/null", "w", stderr)) return 1;
    lib = load();
    T_CHECK(lib != NULL);
    if (!lib) return t_done();
    if (!t_sim) { /* the CUDA build: skip where there is no device */
        gm_context* ctx = t_setup(t_desc());
        gm_shutdown(ctx);
    }
    SYM(t_malloc, "gm_torch_malloc");
    SYM(t_free, "gm_torch_free");
    SYM(t_failures, "gm_torch_failures");
    SYM(t_last_error, "gm_torch_last_error");
    SYM(t_tstats, "gm_torch_stats");
    SYM(t_summary, "gm_torch_summary");
    SYM(t_shutdown, "gm_torch_shutdown");
    SYM(t_record_stream, "gm_torch_record_stream");
    SYM(t_empty_cache, "gm_torch_empty_cache");
    SYM(t_set_fraction, "gm_torch_set_memory_fraction");
    SYM(t_init, "gm_torch_init");
    SYM(t_get_stats, "gm_torch_get_stats");
    SYM(t_stats_size, "gm_torch_stats_size");
    if (!t_malloc || !t_free || !t_failures || !t_last_error || !t_tstats || !t_summary || !t_shutdown ||
        !t_record_stream || !t_empty_cache || !t_set_fraction || !t_init || !t_get_stats || !t_stats_size)
        return t_done();
    /* only gm_torch_* is exported: the library's copy of gpumem stays inside */
    T_CHECK(dlsym(lib, "gm_alloc") == NULL);
    test_budget_then_unified();
    test_failure_path();
    test_abort();
    test_threads();
    test_hooks();
#ifdef GM_TEST_CUDA
    test_capture();
#endif
    T_EQ(t_shutdown(), 0);
    dlclose(lib);
    return t_done();
}
