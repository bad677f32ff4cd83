/* pick_backend.h -- what the demos and benchmarks run on: CUDA when built
   with it and a device answers, else the sim backend, saying why. */
#ifndef GM_PICK_BACKEND_H
#define GM_PICK_BACKEND_H
#include "../gpumem.h"
#include <stdio.h>
#include <string.h>

#ifdef GPUMEM_CUDA
static char pick_backend_why[512];
static void pick_backend_log(gm_log_level level, const char* msg, void* user) {
    (void)user;
    if (level == GM_LOG_ERROR && !pick_backend_why[0]) snprintf(pick_backend_why, sizeof pick_backend_why, "%s", msg);
}
#endif

static gm_backend pick_backend(void) {
#ifdef GPUMEM_CUDA
    gm_context* ctx;
    gm_desc d;
    gm_result r;
    memset(&d, 0, sizeof d);
    d.ignore_env = 1;
    d.backend = GM_BACKEND_CUDA;
    d.log_fn = pick_backend_log;
    r = gm_setup(&ctx, &d);
    if (r == GM_OK) {
        gm_shutdown(ctx);
        return GM_BACKEND_CUDA;
    }
    printf("built with CUDA, but %s (%s): running on the sim backend\n",
           r == GM_ERR_NO_DEVICE ? "there is no usable CUDA device" : "CUDA cannot be used",
           pick_backend_why[0] ? pick_backend_why : gm_result_string(r));
#endif
    return GM_BACKEND_SIM;
}
#endif
