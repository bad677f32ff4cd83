/* basic.c -- the caching allocator in twenty lines.
   cc -std=c99 -I. examples/basic.c -pthread && ./a.out */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include <stdio.h>

int main(void) {
    gm_context* ctx;
    void *a, *b;
    char buf[8192];
    gm_desc desc = {0};
    desc.backend = GM_BACKEND_SIM;   /* a simulated device: runs anywhere */
    desc.device_budget = 1ull << 30; /* reserve at most 1 GiB */
    desc.log_fn = gm_log_stderr;
    if (gm_setup(&ctx, &desc) != GM_OK) return 1;
    if (gm_alloc(ctx, &a, 4 << 20, NULL) != GM_OK) return 1; /* 4 MiB, default stream */
    gm_free(ctx, a);                                          /* back to the cache */
    if (gm_alloc(ctx, &b, 4 << 20, NULL) != GM_OK) return 1; /* served from the cache */
    printf("first %p, second %p: %s\n", a, b, a == b ? "the block was reused" : "not reused");
    gm_free(ctx, b);
    gm_summary(ctx, buf, sizeof buf);
    fputs(buf, stdout);
    return gm_shutdown(ctx) == GM_OK ? 0 : 1;
}
