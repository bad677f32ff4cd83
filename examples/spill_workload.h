/* spill_workload.h -- the training-shaped workload that the demo and
   bench/spill_vs_oom run, and the five ways they run it.

   The model: `layers` layers, each with a weight W (persistent), optimizer
   state M (persistent, twice W: Adam's two moments), an activation A saved
   by the forward pass for the backward pass, and a gradient G that lives
   from its layer's backward to its optimizer update. One step:

     forward   for l = 0..L-1:  create A[l]; read W[l] and A[l-1], write A[l]
     backward  for l = L-1..0:  create G[l]; read A[l] and W[l], write G[l];
                                destroy A[l];
                                read G[l], write W[l] and M[l]; destroy G[l]

   Peak live memory is L(W + M + A) + W. Every byte is real: each "kernel"
   checks what it reads against the values last written there and writes
   new values into what it writes, so a byte lost or mixed up on its way
   through the host or the disk is counted (bad_words). The timed steps
   check and write one word in every 4 KiB page (and the last word) of
   every tensor at every use; one more step after them, untimed, checks
   and writes every word of every tensor at every use, so a loss anywhere
   is found by the end. On sim a kernel is a host function run as stream
   work, and takes a modelled compute time (`compute`: the bytes it reads
   and writes over that rate) however little its real work takes, so the
   steps of every way compare a device doing the same compute; on CUDA,
   where host functions cannot touch device memory, a kernel copies the
   tensor to the host, checks or fills it there, and copies it back.

   The figures: the first step warms up (first touch of fresh memory, the
   learned order's recording), so step_ms is the median of the steps after
   it. Every way runs the same steps, so its step time against the
   in-memory way's is the cost of running on the smaller device.

   The ways:
     WAY_MEMORY   the reference: a device with room for it all (no budget)
     WAY_RAW      every tensor from the device itself (gm_raw_alloc), on a
                  device of `budget` bytes (on CUDA a bigger device is made
                  to refuse past the budget)
     WAY_CACHING  every tensor from the caching allocator under the budget
     WAY_SPILL    gpumem tensors under the budget: cold ones spill to a
                  pinned host tier of host_budget and below it to a spill
                  file in disk_dir, and come back before use
     WAY_UNIFIED  gpumem tensors under the budget with no room below: what
                  does not fit is served by unified (managed) memory */
#ifndef GM_SPILL_WORKLOAD_H
#define GM_SPILL_WORKLOAD_H
#include "../gpumem.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WL_MIB ((size_t)1 << 20)

typedef enum wl_way { WAY_MEMORY, WAY_RAW, WAY_CACHING, WAY_SPILL, WAY_UNIFIED, WAYS } wl_way;
static const char* const wl_way_names[WAYS] = {"in memory", "raw", "caching", "spill", "unified"};

typedef struct wl_params {
    int layers, steps;
    size_t weight, state, act; /* bytes of one layer's W, M and A; G is the size of W */
    size_t budget;             /* the device budget of every way but WAY_MEMORY */
    size_t host_budget;        /* WAY_SPILL's pinned host tier */
    const char* disk_dir;      /* WAY_SPILL's spill file */
    double link;               /* sim: host<->device bytes per second, each way */
    double compute;            /* sim: bytes a kernel reads and writes per second; 0: its real time */
    gm_backend backend;
    int timeline;              /* record memory by tier after every operation */
} wl_params;

/* Memory by tier, after one operation. */
typedef struct wl_sample {
    double ms, device, host, disk, managed;
} wl_sample;

typedef struct wl_result {
    int ok;                    /* every step ran */
    char why[200];             /* where it failed */
    double fail_ms;            /* when */
    int fail_op;               /* operations done before the failure */
    double fail_live;          /* tensor bytes live then */
    double seconds;            /* the whole run */
    double step_ms;            /* median step after the first */
    double link_rate;          /* sim: bytes per second the link achieved while busy */
    double moved, disk_moved;  /* bytes over the link (both ways) and through the spill file */
    double peak_device, peak_host, peak_disk, peak_managed;
    uint64_t checked_bytes, bad_words;
    wl_sample* tl;             /* the timeline, when asked for */
    int ntl, captl;
} wl_result;

enum { WL_W, WL_M, WL_A, WL_G, WL_KINDS };

static size_t wl_bytes(const wl_params* p, int kind) {
    return kind == WL_W || kind == WL_G ? p->weight : kind == WL_M ? p->state : p->act;
}

/* The demo's model (bench/spill_vs_oom runs the same): 12 layers of 8 MiB
   weights, 16 MiB of Adam state, 48 MiB activations; a 256 MiB host tier,
   the spill file in /var/tmp; on sim a 12 GB/s link (what PCIe 3.0 x16
   achieves; the sim's memmove may fall short of it, and link_rate says by
   how much) and kernels that process 20 GB/s. The budget and the number
   of steps are the caller's. */
static wl_params wl_defaults(void) {
    wl_params p;
    memset(&p, 0, sizeof p);
    p.layers = 12;
    p.steps = 3;
    p.weight = 8 * WL_MIB;
    p.state = 16 * WL_MIB;
    p.act = 48 * WL_MIB;
    p.host_budget = 256 * WL_MIB;
    p.disk_dir = "/var/tmp";
    p.link = 12e9;
    p.compute = 20e9;
    p.backend = GM_BACKEND_SIM;
    return p;
}

static size_t wl_peak_live(const wl_params* p) {
    return (size_t)p->layers * (p->weight + p->state + p->act) + p->weight;
}

static double wl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* >>run -------------------------------------------------------------------
   One run: the context, the slots (one per tensor of the model), and the
   kernels' arguments (never reused, so a kernel's argument outlives it). */
typedef struct wl_touch {
    uint64_t* p;
    size_t words;
    uint64_t expect, next; /* first word of the old and the new contents */
    uint64_t base;         /* first word of the words off the sieve, when has_base */
    int check, fill, full, has_base;
    uint64_t model_ns;     /* the kernel's modelled time (sim) */
    struct wl_run* run;
} wl_touch;

typedef struct wl_run {
    const wl_params* p;
    wl_way way;
    gm_context* ctx;
    gm_stream s;
    int sim;
    void** ptr;          /* flat ways: the slot's memory */
    gm_tensor* t;        /* tensor ways: the slot's tensor */
    uint32_t* ver;       /* the version last written into each slot */
    uint32_t* full_ver;  /* the version last written into every word (WL_NONE: words off the sieve unknown) */
    int full;            /* this step checks and writes every word */
    size_t live;         /* tensor bytes live */
    int ops;             /* operations done */
    wl_touch* args;
    size_t nargs, capargs;
    uint64_t* stage;     /* CUDA: where a kernel checks and fills */
    uint64_t checked, bad;
    double t0;
    wl_result* r;
} wl_run;

#define WL_K 0x9E3779B97F4A7C15ull
static uint64_t wl_first(unsigned slot, uint32_t ver) {
    return (((uint64_t)slot << 40) ^ ((uint64_t)ver << 8) ^ 0x5bd1e995ull) * WL_K;
}

#define WL_NONE UINT32_MAX
#define WL_SIEVE 512 /* words: one in every 4 KiB page */

/* Checks the words against the old contents, then writes the new: every
   word (full), or the sieve (word 0 of every page, and the last word).
   Word i of a version holds first + i * WL_K: the sieve's words the last
   version's, the others that of the last full write (unknown without
   one). */
static void wl_touch_words(uint64_t* w, size_t n, const wl_touch* k, uint64_t* bad, uint64_t* checked) {
    size_t i, step = k->full ? 1 : WL_SIEVE;
    uint64_t b = 0, c = 0;
    if (k->check && k->full) {
        for (i = 0; i < n; i++) {
            int on = i % WL_SIEVE == 0 || i == n - 1; /* words off the sieve: the last full write's */
            if (!on && !k->has_base) continue;
            b += w[i] != (on ? k->expect : k->base) + i * WL_K;
            c++;
        }
    } else if (k->check) {
        for (i = 0; i < n; i += step, c++) b += w[i] != k->expect + i * WL_K;
        if (n && (n - 1) % step) b += w[n - 1] != k->expect + (n - 1) * WL_K, c++;
    }
    if (k->fill) {
        for (i = 0; i < n; i += step) w[i] = k->next + i * WL_K;
        if (n) w[n - 1] = k->next + (n - 1) * WL_K;
    }
    *bad += b;
    *checked += c * 8;
}

static uint64_t wl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A kernel: its work, then the rest of its modelled time. */
static void wl_touch_fn(void* arg) {
    wl_touch* k = (wl_touch*)arg;
    uint64_t bad = 0, checked = 0, t0 = wl_now_ns();
    wl_touch_words(k->p, k->words, k, &bad, &checked);
    __atomic_add_fetch(&k->run->bad, bad, __ATOMIC_RELAXED);
    __atomic_add_fetch(&k->run->checked, checked, __ATOMIC_RELAXED);
    if (k->model_ns) {
        uint64_t end = t0 + k->model_ns, now;
        while ((now = wl_now_ns()) < end) {
            struct timespec ts;
            ts.tv_sec = (time_t)((end - now) / 1000000000u);
            ts.tv_nsec = (long)((end - now) % 1000000000u);
            nanosleep(&ts, NULL);
        }
    }
}

/* A kernel on slot's memory at ptr: check it holds its last version, and
   (fill) write the next. */
static gm_result wl_kernel(wl_run* w, unsigned slot, void* ptr, size_t bytes, int check, int fill) {
    wl_touch* k;
    if (w->nargs == w->capargs) return GM_ERR_INTERNAL;
    k = &w->args[w->nargs++];
    k->p = (uint64_t*)ptr;
    k->words = bytes / 8;
    k->expect = wl_first(slot, w->ver[slot]);
    k->has_base = w->full_ver[slot] != WL_NONE;
    k->base = k->has_base ? wl_first(slot, w->full_ver[slot]) : 0;
    if (fill) w->ver[slot]++;
    if (fill && w->full) w->full_ver[slot] = w->ver[slot];
    k->next = wl_first(slot, w->ver[slot]);
    k->check = check;
    k->fill = fill;
    k->full = w->full;
    k->model_ns = w->p->compute > 0 ? (uint64_t)((double)bytes * (check + fill) / w->p->compute * 1e9) : 0;
    k->run = w;
    if (w->sim) return gm_launch_host(w->ctx, w->s, wl_touch_fn, k);
    { /* CUDA: through the host, in order on the stream */
        gm_result r = check ? gm_memcpy_async(w->ctx, w->stage, ptr, bytes, GM_COPY_DEVICE_TO_HOST, w->s) : GM_OK;
        if (r == GM_OK) r = gm_stream_synchronize(w->ctx, w->s);
        if (r != GM_OK) return r;
        k->p = w->stage;
        k->model_ns = 0; /* a real device computes */
        wl_touch_fn(k);
        if (fill) r = gm_memcpy_async(w->ctx, ptr, w->stage, bytes, GM_COPY_HOST_TO_DEVICE, w->s);
        if (r == GM_OK) r = gm_stream_synchronize(w->ctx, w->s);
        return r;
    }
}

static int wl_tensors(const wl_run* w) { return w->way == WAY_SPILL || w->way == WAY_UNIFIED; }
static unsigned wl_slot(const wl_run* w, int kind, int layer) { return (unsigned)(kind * w->p->layers + layer); }

/* Stream work: stamps a sample with the time the device reached it. The
   sample's ms holds the run's start until then. */
static void wl_stamp_fn(void* arg) {
    wl_sample* s = (wl_sample*)arg;
    s->ms = wl_now_ms() - s->ms;
}

/* Memory by tier as the last operation left it, stamped when the stream
   gets there (so the time axis is the device's, not the host's, which runs
   ahead). The timeline's room is set at the start: stream work writes into
   it. */
static void wl_sample_now(wl_run* w) {
    wl_sample s, *slot;
    gm_stats st;
    gm_tier_stats ts;
    wl_result* r = w->r;
    memset(&s, 0, sizeof s);
    memset(&st, 0, sizeof st);
    if (w->way == WAY_RAW || w->way == WAY_MEMORY) {
        s.device = (double)w->live;
    } else {
        gm_get_stats(w->ctx, &st);
        s.device = (double)st.reserved_bytes[GM_STAT_ALL].current;
    }
    if (wl_tensors(w) && gm_tier_get_stats(w->ctx, &ts) == GM_OK) {
        s.host = (double)ts.host_bytes;
        s.disk = (double)ts.disk_bytes;
        s.managed = (double)ts.managed_bytes;
    }
    w->ops++;
    if (s.device > r->peak_device) r->peak_device = s.device;
    if (s.host > r->peak_host) r->peak_host = s.host;
    if (s.disk > r->peak_disk) r->peak_disk = s.disk;
    if (s.managed > r->peak_managed) r->peak_managed = s.managed;
    if (r->ntl == r->captl) return;
    slot = &r->tl[r->ntl++];
    *slot = s;
    slot->ms = w->t0;
    if (gm_launch_host(w->ctx, w->s, wl_stamp_fn, slot) != GM_OK) slot->ms = wl_now_ms() - w->t0;
}

/* >>ops -------------------------------------------------------------------
   The three operations of the workload, for both kinds of way. Each fails
   only with the gm_result of the call that failed; `what` names it. */
static gm_result wl_create(wl_run* w, int kind, int layer) {
    unsigned slot = wl_slot(w, kind, layer);
    size_t n = wl_bytes(w->p, kind);
    gm_result r;
    void* ptr;
    w->full_ver[slot] = WL_NONE; /* new contents: only what the kernel writes is known */
    if (wl_tensors(w)) {
        r = gm_tensor_create(w->ctx, &w->t[slot], n);
        if (r == GM_OK) r = gm_tensor_acquire(w->ctx, w->t[slot], w->s, &ptr);
        if (r != GM_OK) return r;
        w->live += n;
        r = wl_kernel(w, slot, ptr, n, 0, 1);
        gm_tensor_release(w->ctx, w->t[slot], w->s, 1);
        return r;
    }
    if (w->way == WAY_RAW) {
        /* a device of `budget` bytes: the sim's capacity is the budget;
           a CUDA device is made to refuse past it */
        if (!w->sim && w->live + n > w->p->budget) return GM_ERR_OUT_OF_MEMORY;
        r = gm_raw_alloc(w->ctx, &ptr, n);
    } else {
        r = gm_alloc(w->ctx, &ptr, n, w->s);
    }
    if (r != GM_OK) return r;
    w->ptr[slot] = ptr;
    w->live += n;
    return wl_kernel(w, slot, ptr, n, 0, 1);
}

static gm_result wl_destroy(wl_run* w, int kind, int layer) {
    unsigned slot = wl_slot(w, kind, layer);
    size_t n = wl_bytes(w->p, kind);
    if (wl_tensors(w)) {
        gm_result r = gm_tensor_destroy(w->ctx, w->t[slot]);
        w->t[slot].id = 0;
        w->live -= n;
        return r;
    }
    if (!w->ptr[slot]) return GM_OK;
    w->live -= n;
    if (w->way == WAY_RAW) { /* cudaFree waits for the device; so does this */
        gm_stream_synchronize(w->ctx, w->s);
        gm_raw_free(w->ctx, w->ptr[slot], n);
    } else {
        gm_free(w->ctx, w->ptr[slot]);
    }
    w->ptr[slot] = NULL;
    return GM_OK;
}

/* One kernel over n tensors: each is checked against what was last
   written into it, and those with write[i] set get new contents. */
static gm_result wl_use(wl_run* w, const int* kinds, const int* layers, const int* write, int n) {
    void* ptr[3];
    gm_result r = GM_OK;
    int i, got = 0;
    for (i = 0; i < n && r == GM_OK; i++) {
        unsigned slot = wl_slot(w, kinds[i], layers[i]);
        if (wl_tensors(w)) {
            r = gm_tensor_acquire(w->ctx, w->t[slot], w->s, &ptr[i]);
            if (r == GM_OK) got++;
        } else {
            ptr[i] = w->ptr[slot];
        }
    }
    for (i = 0; i < n && r == GM_OK; i++)
        r = wl_kernel(w, wl_slot(w, kinds[i], layers[i]), ptr[i], wl_bytes(w->p, kinds[i]), 1, write[i]);
    for (i = 0; i < got; i++)
        gm_tensor_release(w->ctx, w->t[wl_slot(w, kinds[i], layers[i])], w->s, write[i]);
    return r;
}

/* >>step ------------------------------------------------------------------ */
static void wl_fail(wl_run* w, gm_result e, int step, const char* what, int layer) {
    wl_result* r = w->r;
    char when[32];
    r->fail_op = w->ops;
    r->fail_live = (double)w->live;
    if (step < 0) snprintf(when, sizeof when, "before the first step");
    else snprintf(when, sizeof when, "in step %d", step + 1);
    snprintf(r->why, sizeof r->why, "%s %s layer %d, %s (%.0f MiB of tensors live)",
             e == GM_ERR_OUT_OF_MEMORY ? "out of memory" : gm_result_string(e), what, layer, when,
             (double)w->live / (double)WL_MIB);
}

#define WL_TRY(call, what, layer)                 \
    do {                                          \
        gm_result e_ = (call);                    \
        if (e_ != GM_OK) {                        \
            wl_fail(w, e_, step, what, layer);    \
            return e_;                            \
        }                                         \
        wl_sample_now(w);                         \
    } while (0)

static gm_result wl_step(wl_run* w, int step) {
    int L = w->p->layers, l;
    for (l = 0; l < L; l++) {
        int k[3] = {WL_A, WL_W, WL_A}, ly[3] = {l, l, l - 1}, wr[3] = {1, 0, 0};
        WL_TRY(wl_create(w, WL_A, l), "creating the forward activation of", l);
        WL_TRY(wl_use(w, k, ly, wr, l ? 3 : 2), "in the forward pass at", l);
    }
    for (l = L - 1; l >= 0; l--) {
        int k[3] = {WL_G, WL_A, WL_W}, ly[3] = {l, l, l}, wr[3] = {1, 0, 0};
        int ko[3] = {WL_W, WL_M, WL_G}, wo[3] = {1, 1, 0};
        WL_TRY(wl_create(w, WL_G, l), "creating the gradient of", l);
        WL_TRY(wl_use(w, k, ly, wr, 3), "in the backward pass at", l);
        WL_TRY(wl_destroy(w, WL_A, l), "freeing the activation of", l);
        WL_TRY(wl_use(w, ko, ly, wo, 3), "in the optimizer step at", l);
        WL_TRY(wl_destroy(w, WL_G, l), "freeing the gradient of", l);
    }
    return gm_stream_synchronize(w->ctx, w->s);
}

static int wl_cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* >>way -------------------------------------------------------------------
   Runs the workload one way. The result owns r->tl (free it). */
static gm_context* wl_setup(const wl_params* p, wl_way way) {
    gm_context* ctx = NULL;
    gm_desc d;
    size_t big = 4 * wl_peak_live(p);
    memset(&d, 0, sizeof d);
    d.backend = p->backend;
    d.ignore_env = 1;
    d.device_budget = way == WAY_MEMORY ? big : p->budget;
    d.sim.capacity = way == WAY_MEMORY ? big : p->budget;
    d.sim.link_bytes_per_s = p->link;
    /* spill: the host tier and the disk below it; unified: no room below
       the device (a host tier too small for any tensor), managed memory */
    d.host_budget = way == WAY_SPILL ? p->host_budget : 4096;
    d.disk_dir = way == WAY_SPILL ? p->disk_dir : NULL;
    d.fallback = way == WAY_UNIFIED ? GM_FALLBACK_MANAGED : GM_FALLBACK_FAIL;
    if (gm_setup(&ctx, &d) != GM_OK) return NULL;
    return ctx;
}

static double wl_link_bytes(gm_context* ctx, int sim) {
    uint64_t b0 = 0, b1 = 0, t = 0;
    gm_tier_stats ts;
    if (sim) {
        gm_sim_link_stats(ctx, 0, &b0, &t);
        gm_sim_link_stats(ctx, 1, &b1, &t);
        return (double)(b0 + b1);
    }
    if (gm_tier_get_stats(ctx, &ts) != GM_OK) return 0;
    return (double)(ts.bytes_to_host + ts.bytes_to_device);
}

static wl_result wl_run_way(const wl_params* p, wl_way way) {
    wl_result r;
    wl_run w;
    gm_tier_stats ts;
    size_t nslots = (size_t)p->layers * WL_KINDS, i;
    double* steps = (double*)calloc((size_t)p->steps, sizeof(double));
    double link0 = 0;
    int k, done = 0;
    memset(&r, 0, sizeof r);
    memset(&w, 0, sizeof w);
    w.p = p;
    w.way = way;
    w.r = &r;
    w.ctx = wl_setup(p, way);
    if (!w.ctx || !steps) {
        snprintf(r.why, sizeof r.why, "setup failed");
        free(steps);
        if (w.ctx) gm_shutdown(w.ctx);
        return r;
    }
    w.sim = gm_query_desc(w.ctx).backend == GM_BACKEND_SIM;
    w.ptr = (void**)calloc(nslots, sizeof(void*));
    w.t = (gm_tensor*)calloc(nslots, sizeof(gm_tensor));
    w.ver = (uint32_t*)calloc(nslots, sizeof(uint32_t));
    w.full_ver = (uint32_t*)malloc(nslots * sizeof(uint32_t));
    for (i = 0; w.full_ver && i < nslots; i++) w.full_ver[i] = WL_NONE;
    w.capargs = (size_t)p->layers * 16 * (size_t)(p->steps + 2);
    w.args = (wl_touch*)calloc(w.capargs, sizeof(wl_touch));
    w.stage = w.sim ? NULL : (uint64_t*)malloc(p->state > p->act ? p->state : p->act);
    gm_stream_create(w.ctx, &w.s);
    if (way == WAY_SPILL) gm_tier_set_policy(w.ctx, GM_EVICT_LEARNED, 2, NULL, NULL);
    if (p->timeline) {
        r.captl = 2 * p->layers + 8 * p->layers * (p->steps + 1) + 8;
        r.tl = (wl_sample*)calloc((size_t)r.captl, sizeof(wl_sample));
        if (!r.tl) r.captl = 0;
    }
    w.t0 = wl_now_ms();
    link0 = wl_link_bytes(w.ctx, w.sim);
    /* the persistent tensors: weights, then optimizer state, every word written */
    w.full = 1;
    for (k = 0; k < 2 * p->layers; k++) {
        int kind = k < p->layers ? WL_W : WL_M, l = k % p->layers;
        gm_result e = wl_create(&w, kind, l);
        if (e != GM_OK) {
            wl_fail(&w, e, -1, kind == WL_W ? "creating the weights of" : "creating the optimizer state of", l);
            goto out;
        }
        wl_sample_now(&w);
    }
    /* the timed steps (the sieve), then one more that checks every word */
    for (k = 0; k <= p->steps; k++) {
        double t = wl_now_ms();
        w.full = k == p->steps;
        if (wl_step(&w, k) != GM_OK) goto out;
        if (k < p->steps) steps[k] = wl_now_ms() - t;
        if (wl_tensors(&w)) gm_tier_step(w.ctx);
        w.nargs = 0; /* the stream is idle: the kernels' arguments are free */
    }
    done = 1;
out:
    gm_device_synchronize(w.ctx);
    if (!done && r.ntl) r.fail_ms = r.tl[r.ntl - 1].ms;
    r.seconds = (wl_now_ms() - w.t0) / 1e3;
    r.moved = wl_link_bytes(w.ctx, w.sim) - link0;
    if (w.sim) {
        uint64_t b0 = 0, t0 = 0, b1 = 0, t1 = 0;
        gm_sim_link_stats(w.ctx, 0, &b0, &t0);
        gm_sim_link_stats(w.ctx, 1, &b1, &t1);
        r.link_rate = t0 + t1 ? (double)(b0 + b1) / ((double)(t0 + t1) / 1e9) : 0;
    }
    if (gm_tier_get_stats(w.ctx, &ts) == GM_OK) r.disk_moved = (double)(ts.bytes_to_disk + ts.bytes_from_disk);
    r.checked_bytes = w.checked;
    r.bad_words = w.bad;
    r.ok = done && w.bad == 0;
    if (done && w.bad) snprintf(r.why, sizeof r.why, "%llu words differ from what was written", (unsigned long long)w.bad);
    if (done) { /* the median of the steps after the first (warm-up) */
        int m = p->steps > 1 ? p->steps - 1 : 1;
        double* st = p->steps > 1 ? steps + 1 : steps;
        qsort(st, (size_t)m, sizeof *st, wl_cmp);
        r.step_ms = st[m / 2];
    }
    for (i = 0; i < nslots; i++) {
        if (w.t[i].id) gm_tensor_destroy(w.ctx, w.t[i]);
        if (w.ptr[i]) {
            if (way == WAY_RAW) gm_raw_free(w.ctx, w.ptr[i], wl_bytes(p, (int)(i / (size_t)p->layers)));
            else gm_free(w.ctx, w.ptr[i]);
        }
    }
    gm_stream_destroy(w.ctx, w.s);
    gm_shutdown(w.ctx);
    free(w.ptr), free(w.t), free(w.ver), free(w.full_ver), free(w.args), free(w.stage), free(steps);
    return r;
}
#endif
