/* bench/alloc: the cost of a cached gm_alloc + gm_free pair against the
   backend's own allocation (sim: mmap/munmap; CUDA: cudaMalloc/cudaFree and
   cudaMallocAsync/cudaFreeAsync from a pool that never releases), and
   against glibc malloc/free as the host reference. Median over batches,
   nanoseconds per pair, one thread. Prints a table; writes CSV to the path
   given as the first argument (default build/bench-alloc.csv). */
#define GPUMEM_IMPLEMENTATION
#include "../gpumem.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCHES 31

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

typedef int (*pair_fn)(void* env, size_t size, int reps);

static double measure(pair_fn fn, void* env, size_t size, int reps) {
    double t[BATCHES];
    int b;
    if (fn(env, size, reps)) return -1; /* warm: the cache holds the block */
    for (b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        if (fn(env, size, reps)) return -1;
        t[b] = (now_ns() - t0) / reps;
    }
    return median(t, BATCHES);
}

static int pair_gm(void* env, size_t size, int reps) {
    gm_context* ctx = (gm_context*)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (gm_alloc(ctx, &p, size, NULL) != GM_OK) return 1;
        if (gm_free(ctx, p) != GM_OK) return 1;
    }
    return 0;
}

static int pair_raw(void* env, size_t size, int reps) {
    gm_context* ctx = (gm_context*)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (gm_raw_alloc(ctx, &p, size) != GM_OK) return 1;
        if (gm_raw_free(ctx, p, size) != GM_OK) return 1;
    }
    return 0;
}

static int pair_malloc(void* env, size_t size, int reps) {
    int i;
    (void)env;
    for (i = 0; i < reps; i++) {
        void* volatile p = malloc(size);
        if (!p) return 1;
        free(p);
    }
    return 0;
}

#ifdef GPUMEM_CUDA
static int pair_cuda_async(void* env, size_t size, int reps) {
    cudaStream_t s = (cudaStream_t)env;
    int i;
    for (i = 0; i < reps; i++) {
        void* p;
        if (cudaMallocAsync(&p, size, s) != cudaSuccess) return 1;
        if (cudaFreeAsync(p, s) != cudaSuccess) return 1;
    }
    return cudaStreamSynchronize(s) != cudaSuccess;
}
#endif

int main(int argc, char** argv) {
    static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 8 << 20, 64 << 20};
    const char* csv_path = argc > 1 ? argv[1] : "build/bench-alloc.csv";
    gm_context* ctx = NULL;
    gm_desc d;
    FILE* csv;
    size_t i;
    memset(&d, 0, sizeof d);
    d.log_fn = gm_log_stderr;
    if (gm_setup(&ctx, &d) != GM_OK) {
        d.backend = GM_BACKEND_SIM;
        printf("no CUDA device: measuring the sim backend\n");
        if (gm_setup(&ctx, &d) != GM_OK) return 1;
    }
    csv = fopen(csv_path, "w");
    if (csv) fprintf(csv, "backend,size,gm_pair_ns,backend_pair_ns,malloc_pair_ns,cuda_async_pair_ns\n");
    printf("backend %s; median ns per alloc+free pair, one thread\n", gm_backend_name(ctx));
    printf("%10s %14s %16s %14s %18s %12s\n", "size", "gm (cached)", "backend (raw)", "glibc malloc",
           "cudaMallocAsync", "raw / gm");
#ifdef GPUMEM_CUDA
    cudaStream_t s = NULL;
    int have_async = strcmp(gm_backend_name(ctx), "cuda") == 0;
    if (have_async) {
        cudaMemPool_t pool;
        unsigned long long thr = ~0ull;
        int dev = gm_query_desc(ctx).device;
        have_async = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                     cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess &&
                     cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr) == cudaSuccess;
    }
#endif
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        double g = measure(pair_gm, ctx, n, 10000);
        double r = measure(pair_raw, ctx, n, n >= (8u << 20) ? 20 : 200);
        double m = measure(pair_malloc, NULL, n, 10000);
        double a = -1;
#ifdef GPUMEM_CUDA
        if (have_async) a = measure(pair_cuda_async, s, n, 10000);
#endif
        printf("%10zu %14.1f %16.1f %14.1f %18.1f %11.0fx\n", n, g, r, m, a, g > 0 ? r / g : 0);
        if (csv) fprintf(csv, "%s,%zu,%.1f,%.1f,%.1f,%.1f\n", gm_backend_name(ctx), n, g, r, m, a);
    }
    if (csv) {
        fclose(csv);
        printf("wrote %s\n", csv_path);
    }
    gm_shutdown(ctx);
    return 0;
}
