/* Contexts that gm_shutdown lets go are kept allocated (until t_kept_free)
   instead of going back to the host allocator, so that a test can call
   into a shut-down context without undefined behaviour and see the call
   refused. Include before gm_test.h, in place of the allocation hooks. */
#ifndef GM_KEPT_H
#define GM_KEPT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the header's system names, asked for before the first system header */
#endif
#include <malloc.h>
#include <stdlib.h>

static void* t_kept[64];
static int t_nkept;
static void t_free_hook(void* p);
#define GPUMEM_MALLOC(n) malloc(n)
#define GPUMEM_FREE(p) t_free_hook(p)
#include "gm_test.h"

static void t_free_hook(void* p) {
    if (p && t_nkept < 64 && malloc_usable_size(p) >= sizeof(gm_context) && ((gm_context*)p)->magic == GM__CTX_DEAD) {
        t_kept[t_nkept++] = p;
        return;
    }
    free(p);
}

static void t_kept_free(void) {
    while (t_nkept) free(t_kept[--t_nkept]);
}
#endif
