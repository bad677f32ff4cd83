/* bench/vmm: what the driver charges for the calls under expandable
   segments, on a real GPU: making and mapping physical memory
   (cuMemCreate + cuMemMap, then one cuMemSetAccess for the run) and
   unmapping and releasing it (cuMemUnmap + cuMemRelease), per handle size
   and for a run of 2 MiB handles, beside cudaMalloc and cudaFree of the
   same bytes. Microseconds, median of 15. Needs a GPU machine: it links
   the driver's library (no device there: says so, exit 0).

   usage: vmm [CSV] */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

#include "bench.h"

#define REPS 15
#define MiB ((size_t)1 << 20)

static double now_us(void) { return bench_now_ns() / 1e3; }
static double med(double* v) { return bench_median(v, REPS); }
#define CK(x)                                                              \
    do {                                                                   \
        CUresult r_ = (x);                                                 \
        if (r_ != CUDA_SUCCESS) {                                          \
            fprintf(stderr, "vmm: %s failed (%d)\n", #x, (int)r_);         \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

int main(int argc, char** argv) {
    int args_rc = bench_args(argc, argv, "bench-vmm [CSV]", NULL);
    if (args_rc >= 0) return args_rc;
    static const size_t handle[] = {2, 20, 64, 256};
    static const size_t runs[] = {10, 32};
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    CUdeviceptr va;
    size_t gran = 0, span = 512 * MiB, i;
    int n = 0;
    FILE* csv = fopen(argc > 1 ? argv[1] : "build/vmm.csv", "w");
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("vmm: no CUDA device: nothing measured\n");
        return 0;
    }
    cudaSetDevice(0);
    cudaFree(0); /* the primary context */
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CK(cuMemAddressReserve(&va, span, gran, 0, 0));
    printf("granularity %zu KiB; microseconds, median of %d\n\n", gran >> 10, REPS);
    printf("%-28s %10s %12s %14s %14s\n", "what", "MiB", "map us", "unmap us", "us per MiB");
    if (csv) fprintf(csv, "what,mib,map_us,unmap_us\n");
    for (i = 0; i < sizeof handle / sizeof *handle; i++) {
        size_t sz = handle[i] * MiB;
        double m[REPS], u[REPS], cm[REPS], cf[REPS];
        int k;
        for (k = 0; k < REPS; k++) {
            CUmemGenericAllocationHandle h;
            void* p;
            double t0 = now_us();
            CK(cuMemCreate(&h, sz, &prop, 0));
            CK(cuMemMap(va, sz, 0, h, 0));
            CK(cuMemSetAccess(va, sz, &acc, 1));
            m[k] = now_us() - t0;
            t0 = now_us();
            CK(cuMemUnmap(va, sz));
            CK(cuMemRelease(h));
            u[k] = now_us() - t0;
            t0 = now_us();
            if (cudaMalloc(&p, sz) != cudaSuccess) exit(1);
            cm[k] = now_us() - t0;
            t0 = now_us();
            cudaFree(p);
            cf[k] = now_us() - t0;
        }
        printf("%-28s %10zu %12.1f %14.1f %14.2f\n", "one handle", handle[i], med(m), med(u), (med(m) + med(u)) / (double)handle[i]);
        printf("%-28s %10zu %12.1f %14.1f %14.2f\n", "cudaMalloc / cudaFree", handle[i], med(cm), med(cf),
               (med(cm) + med(cf)) / (double)handle[i]);
        if (csv) {
            fprintf(csv, "handle,%zu,%.1f,%.1f\n", handle[i], med(m), med(u));
            fprintf(csv, "cudaMalloc,%zu,%.1f,%.1f\n", handle[i], med(cm), med(cf));
        }
    }
    for (i = 0; i < sizeof runs / sizeof *runs; i++) {
        size_t np = runs[i], j;
        double m[REPS], u[REPS];
        int k;
        CUmemGenericAllocationHandle h[64];
        for (k = 0; k < REPS; k++) {
            double t0 = now_us();
            for (j = 0; j < np; j++) {
                CK(cuMemCreate(&h[j], gran, &prop, 0));
                CK(cuMemMap(va + j * gran, gran, 0, h[j], 0));
            }
            CK(cuMemSetAccess(va, np * gran, &acc, 1));
            m[k] = now_us() - t0;
            t0 = now_us();
            for (j = 0; j < np; j++) {
                CK(cuMemUnmap(va + j * gran, gran));
                CK(cuMemRelease(h[j]));
            }
            u[k] = now_us() - t0;
        }
        printf("%-20s x%-7zu %10zu %12.1f %14.1f %14.2f\n", "run of pages", np, np * gran / MiB, med(m), med(u),
               (med(m) + med(u)) / (double)(np * gran / MiB));
        if (csv) fprintf(csv, "run%zu,%zu,%.1f,%.1f\n", np, np * gran / MiB, med(m), med(u));
    }
    CK(cuMemAddressFree(va, span));
    if (csv) fclose(csv);
    return 0;
}
