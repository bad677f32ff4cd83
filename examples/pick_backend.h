/* pick_backend.h -- what the demos and benchmarks run on: CUDA when built
   with it and a device answers, else the sim backend (and they say so). */
#ifndef GM_PICK_BACKEND_H
#define GM_PICK_BACKEND_H
#include "../gpumem.h"
#include <stdio.h>
#include <string.h>

static gm_backend pick_backend(void) {
#ifdef GPUMEM_CUDA
    gm_context* ctx;
    gm_desc d;
    memset(&d, 0, sizeof d);
    d.ignore_env = 1;
    d.backend = GM_BACKEND_CUDA;
    if (gm_setup(&ctx, &d) == GM_OK) {
        gm_shutdown(ctx);
        return GM_BACKEND_CUDA;
    }
    printf("built with CUDA, but there is no usable CUDA device: running on the sim backend\n");
#endif
    return GM_BACKEND_SIM;
}
#endif
