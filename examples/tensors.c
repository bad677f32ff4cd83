/* tensors.c -- the tiered manager in forty lines: eight 16 MiB tensors on a
   32 MiB device. Each is written on the device, spills to pinned host
   memory when room is needed, and comes back intact on acquire.
   cc -std=c99 -I. examples/tensors.c -pthread && ./a.out */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include <stdio.h>
#include <string.h>

enum { N = 8, MB = 1 << 20, SIZE = 16 * MB };
static void fill(void* p) { memset(p, 0x5a, SIZE); } /* a "kernel" (sim: host work on the stream) */
static int intact(const unsigned char* p) { int j = 0; while (j < SIZE && p[j] == 0x5a) j++; return j == SIZE; }

int main(void) {
    static const char* tier[] = {"none", "device", "host", "disk", "managed"};
    gm_context* ctx;
    gm_tensor t[N];
    gm_desc desc = {0};
    gm_tier where;
    void* p;
    int i, bad = 0;
    desc.backend = GM_BACKEND_SIM;     /* runs anywhere; on CUDA the kernel would be yours */
    desc.device_budget = 32 * MB;      /* room for two tensors */
    desc.host_budget = 256 * MB;       /* the pinned tier below it */
    desc.log_fn = gm_log_stderr;
    if (gm_setup(&ctx, &desc) != GM_OK) return 1;
    for (i = 0; i < N; i++) { /* create and write: older tensors spill to make room */
        if (gm_tensor_create(ctx, &t[i], SIZE) || gm_tensor_acquire(ctx, t[i], NULL, &p)) return 1;
        gm_launch_host(ctx, NULL, fill, p);
        gm_tensor_release(ctx, t[i], NULL, 1); /* 1: written, any copy below is stale */
    }
    for (i = 0; i < N; i++) { /* read back: each comes to the device before use */
        gm_tensor_where(ctx, t[i], &where);
        if (gm_tensor_acquire(ctx, t[i], NULL, &p)) return 1;
        gm_stream_synchronize(ctx, NULL); /* sim: device memory is readable from here */
        bad += !intact((const unsigned char*)p);
        printf("tensor %d: was on the %s, now on the device\n", i, tier[where]);
        gm_tensor_release(ctx, t[i], NULL, 0); /* 0: unchanged, the host copy stays valid */
    }
    for (i = 0; i < N; i++) gm_tensor_destroy(ctx, t[i]);
    printf("%s\n", bad ? "DATA LOST" : "all eight came back intact");
    return gm_shutdown(ctx) == GM_OK && !bad ? 0 : 1;
}
