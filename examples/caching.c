/* caching.c -- what the caching allocator buys on a training loop, and
   where it stops. `make caching` builds and runs it.

   One workload, replayed three times: a small transformer (12 layers, fp16)
   trained for a few steps. Weights live for the whole run; each step
   allocates activations layer by layer in the forward pass, frees them in
   reverse in the backward pass while it allocates gradients and
   temporaries, and frees the gradients after the optimizer step. No kernel
   runs and no byte is touched: only the allocator is measured.

     A. every request straight to the device (gm_raw_alloc / gm_raw_free);
     B. the caching allocator (gm_alloc / gm_free);
     C. the caching allocator under a budget of 60% of the workload's peak,
        where it must fail with GM_ERR_OUT_OF_MEMORY. */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* >>workload --------------------------------------------------------------
   The model's shape and the tensors of one layer. */
enum { LAYERS = 12, STEPS = 20 };
#define BATCH ((size_t)2)
#define SEQ ((size_t)512)
#define HID ((size_t)1024)
#define HEADS ((size_t)16)
#define VOCAB ((size_t)32000)
#define ACT (BATCH * SEQ * HID * 2)            /* one fp16 activation: 2 MiB */
#define SCORES (BATCH * HEADS * SEQ * SEQ * 2) /* attention scores: 16 MiB */
#define LOGITS (BATCH * SEQ * VOCAB * 2)       /* 62.5 MiB */
#define STATS (BATCH * SEQ * 2 * 4)            /* layer-norm mean and rstd: 8 KiB */

typedef struct tensor_def {
    const char* name;
    size_t size;
} tensor_def;

/* A layer's weights, and their gradients in the same order. */
enum { NW = 12 };
static const tensor_def weights[NW] = {
    {"ln1.weight", HID * 2},           {"ln1.bias", HID * 2},           {"attn.qkv.weight", 3 * HID * HID * 2},
    {"attn.qkv.bias", 3 * HID * 2},    {"attn.proj.weight", HID * HID * 2}, {"attn.proj.bias", HID * 2},
    {"ln2.weight", HID * 2},           {"ln2.bias", HID * 2},           {"mlp.fc1.weight", 4 * HID * HID * 2},
    {"mlp.fc1.bias", 4 * HID * 2},     {"mlp.fc2.weight", 4 * HID * HID * 2}, {"mlp.fc2.bias", HID * 2}};
static const char* const grad_names[NW] = {
    "ln1.weight.grad", "ln1.bias.grad", "attn.qkv.weight.grad", "attn.qkv.bias.grad",
    "attn.proj.weight.grad", "attn.proj.bias.grad", "ln2.weight.grad", "ln2.bias.grad",
    "mlp.fc1.weight.grad", "mlp.fc1.bias.grad", "mlp.fc2.weight.grad", "mlp.fc2.bias.grad"};

/* A layer's saved activations, in forward order. */
enum {
    A_LN1_STATS, A_LN1_OUT, A_QKV, A_RNG, A_SCORES, A_PROBS, A_ATTN_MASK, A_CTX, A_PROJ, A_RESID1,
    A_LN2_STATS, A_LN2_OUT, A_FC1, A_GELU, A_FC2, A_MLP_MASK, A_RESID2, NA
};
static const tensor_def acts[NA] = {
    {"ln1.stats", STATS},      {"ln1.out", ACT},       {"attn.qkv", 3 * ACT},      {"attn.rng_state", 512},
    {"attn.scores", SCORES},   {"attn.probs", SCORES}, {"attn.dropout_mask", SCORES / 2},
    {"attn.context", ACT},     {"attn.proj", ACT},     {"residual1", ACT},         {"ln2.stats", STATS},
    {"ln2.out", ACT},          {"mlp.fc1", 4 * ACT},   {"mlp.gelu", 4 * ACT},      {"mlp.fc2", ACT},
    {"mlp.dropout_mask", ACT / 2}, {"residual2", ACT}};

/* >>trace -----------------------------------------------------------------
   The workload as a list of operations, built once and replayed by every
   part, so all three see exactly the same requests. */
enum { P_SETUP, P_FORWARD, P_BACKWARD, P_OPTIMIZER, P_TEARDOWN };
static const char* const phase_names[] = {"setup", "forward pass", "backward pass", "optimizer step", "teardown"};

typedef struct op {
    const char* name; /* the tensor; NULL for a free */
    unsigned slot;    /* which tensor: an index into the slot arrays */
    int step, phase, layer; /* layer -1: outside the layers */
} op;

typedef struct trace {
    op* ops;
    size_t nops, capops;
    size_t* slot_size;
    unsigned nslots, capslots;
    size_t nallocs, live, peak, min_req, max_req, per_step;
    int step, phase, layer; /* where the builder is; stamped on each op */
} trace;

static void* grow(void* p, size_t n) {
    void* q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "caching: out of host memory\n");
        exit(1);
    }
    return q;
}

static void push(trace* t, const char* name, unsigned slot) {
    op* o;
    if (t->nops == t->capops) {
        t->capops = t->capops ? t->capops * 2 : 4096;
        t->ops = (op*)grow(t->ops, t->capops * sizeof *t->ops);
    }
    o = &t->ops[t->nops++];
    o->name = name;
    o->slot = slot;
    o->step = t->step;
    o->phase = t->phase;
    o->layer = t->layer;
}

static unsigned tr_alloc(trace* t, const char* name, size_t size) {
    unsigned s;
    if (t->nslots == t->capslots) {
        t->capslots = t->capslots ? t->capslots * 2 : 4096;
        t->slot_size = (size_t*)grow(t->slot_size, t->capslots * sizeof *t->slot_size);
    }
    s = t->nslots++;
    t->slot_size[s] = size;
    push(t, name, s);
    t->nallocs++;
    t->live += size;
    if (t->live > t->peak) t->peak = t->live;
    if (!t->min_req || size < t->min_req) t->min_req = size;
    if (size > t->max_req) t->max_req = size;
    return s;
}

static void tr_free(trace* t, unsigned slot) {
    push(t, NULL, slot);
    t->live -= t->slot_size[slot];
}

static void build_workload(trace* t) {
    unsigned w[LAYERS][NW], a[LAYERS][NA], g[LAYERS][NW];
    unsigned embed, lnf_w, lnf_b;
    int l, i, step;
    size_t before;
    memset(t, 0, sizeof *t);
    t->layer = -1;
    t->phase = P_SETUP;
    embed = tr_alloc(t, "embedding.weight", VOCAB * HID * 2);
    for (l = 0; l < LAYERS; l++) {
        t->layer = l;
        for (i = 0; i < NW; i++) w[l][i] = tr_alloc(t, weights[i].name, weights[i].size);
    }
    t->layer = -1;
    lnf_w = tr_alloc(t, "final_ln.weight", HID * 2);
    lnf_b = tr_alloc(t, "final_ln.bias", HID * 2);

    for (step = 1; step <= STEPS; step++) {
        unsigned ids, labels, emb_out, lnf_out, logits, loss, d_logits, hgrad, gnorm, embed_grad, lnf_gw, lnf_gb;
        before = t->nallocs;
        t->step = step;
        t->phase = P_FORWARD;
        t->layer = -1;
        ids = tr_alloc(t, "input_ids", BATCH * SEQ * 4);
        labels = tr_alloc(t, "labels", BATCH * SEQ * 4);
        emb_out = tr_alloc(t, "embedding.out", ACT);
        for (l = 0; l < LAYERS; l++) {
            t->layer = l;
            for (i = 0; i < NA; i++) a[l][i] = tr_alloc(t, acts[i].name, acts[i].size);
        }
        t->layer = -1;
        lnf_out = tr_alloc(t, "final_ln.out", ACT);
        logits = tr_alloc(t, "logits", LOGITS);
        loss = tr_alloc(t, "loss", 4);

        t->phase = P_BACKWARD;
        d_logits = tr_alloc(t, "logits.grad", LOGITS);
        lnf_gw = tr_alloc(t, "final_ln.weight.grad", HID * 2);
        lnf_gb = tr_alloc(t, "final_ln.bias.grad", HID * 2);
        hgrad = tr_alloc(t, "hidden.grad", ACT);
        tr_free(t, d_logits);
        tr_free(t, logits);
        tr_free(t, lnf_out);
        for (l = LAYERS - 1; l >= 0; l--) {
            unsigned g_mlp, g_probs, g_scores, g_qkv, next;
            t->layer = l;
            /* the MLP half */
            g_mlp = tr_alloc(t, "mlp.grad_tmp", 4 * ACT);
            for (i = NW - 1; i >= 8; i--) g[l][i] = tr_alloc(t, grad_names[i], weights[i].size);
            for (i = A_RESID2; i >= A_LN2_OUT; i--) tr_free(t, a[l][i]);
            g[l][7] = tr_alloc(t, grad_names[7], weights[7].size);
            g[l][6] = tr_alloc(t, grad_names[6], weights[6].size);
            tr_free(t, a[l][A_LN2_STATS]);
            tr_free(t, a[l][A_RESID1]);
            tr_free(t, g_mlp);
            /* the attention half */
            g_probs = tr_alloc(t, "attn.probs.grad", SCORES);
            g_scores = tr_alloc(t, "attn.scores.grad", SCORES);
            for (i = 5; i >= 2; i--) g[l][i] = tr_alloc(t, grad_names[i], weights[i].size);
            for (i = A_PROJ; i >= A_RNG; i--) tr_free(t, a[l][i]);
            tr_free(t, g_probs);
            g_qkv = tr_alloc(t, "attn.qkv.grad", 3 * ACT);
            tr_free(t, g_scores);
            tr_free(t, a[l][A_QKV]);
            g[l][1] = tr_alloc(t, grad_names[1], weights[1].size);
            g[l][0] = tr_alloc(t, grad_names[0], weights[0].size);
            tr_free(t, a[l][A_LN1_OUT]);
            tr_free(t, a[l][A_LN1_STATS]);
            next = tr_alloc(t, "hidden.grad", ACT);
            tr_free(t, hgrad);
            tr_free(t, g_qkv);
            hgrad = next;
        }
        t->layer = -1;
        embed_grad = tr_alloc(t, "embedding.weight.grad", VOCAB * HID * 2);
        tr_free(t, hgrad);
        tr_free(t, emb_out);
        tr_free(t, ids);

        /* gradients are freed after the step (zero_grad(set_to_none)), in
           the order they were made: not the reverse of it */
        t->phase = P_OPTIMIZER;
        gnorm = tr_alloc(t, "grad_norm", 4);
        tr_free(t, lnf_gw);
        tr_free(t, lnf_gb);
        for (l = LAYERS - 1; l >= 0; l--)
            for (i = NW - 1; i >= 0; i--) tr_free(t, g[l][i]);
        tr_free(t, embed_grad);
        tr_free(t, gnorm);
        tr_free(t, loss);
        tr_free(t, labels);
        t->per_step = t->nallocs - before;
    }

    t->step = STEPS + 1;
    t->phase = P_TEARDOWN;
    tr_free(t, lnf_b);
    tr_free(t, lnf_w);
    for (l = LAYERS - 1; l >= 0; l--) {
        t->layer = l;
        for (i = NW - 1; i >= 0; i--) tr_free(t, w[l][i]);
    }
    t->layer = -1;
    tr_free(t, embed);
}

/* >>helpers ---------------------------------------------------------------*/
static const char* fmt_bytes(char* buf, size_t cap, size_t v) {
    if (v >= GIB) snprintf(buf, cap, "%.2f GiB", (double)v / (double)GIB);
    else if (v >= MIB) snprintf(buf, cap, "%.2f MiB", (double)v / (double)MIB);
    else if (v >= KIB) snprintf(buf, cap, "%.2f KiB", (double)v / (double)KIB);
    else snprintf(buf, cap, "%zu B", v);
    return buf;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* what, gm_result r) {
    printf("\ncaching: unexpected error from %s: %s (%d)\n", what, gm_result_string(r), (int)r);
    exit(1);
}

/* The log: messages are kept (and echoed when asked), so the program can show
   the allocator's own words. Called with the context's lock held: it must
   not call back into gpumem. */
enum { LOG_LINES = 8 };
static char log_lines[LOG_LINES][1024];
static int log_count, log_echo;

static void on_log(gm_log_level level, const char* message, void* user) {
    (void)user;
    if (log_echo) printf("  gpumem log (%s): %s\n", level == GM_LOG_ERROR ? "error" : "warn", message);
    if (log_count < LOG_LINES) snprintf(log_lines[log_count], sizeof log_lines[0], "%s", message);
    log_count++;
}

/* The OOM hook, the ladder's last rung before failure. Plain gm_alloc
   memory cannot move, so it has nothing to free; tensors of the tiered
   manager can (bench/spill). */
static int oom_calls;
static size_t oom_size;

static gm_oom_action on_oom(gm_context* ctx, size_t size, gm_stream stream, void* user) {
    (void)ctx; (void)stream; (void)user;
    oom_calls++;
    oom_size = size;
    return GM_OOM_FAIL;
}

static gm_backend backend = GM_BACKEND_DEFAULT;

static gm_context* open_ctx(size_t budget) {
    gm_context* ctx;
    gm_desc d;
    gm_result r;
    memset(&d, 0, sizeof d);
    d.backend = backend;
    d.device_budget = budget;     /* 0: the whole device */
    d.sim.capacity = 8 * GIB;     /* sim memory is mapped, never touched */
    d.log_fn = on_log;
    d.oom_fn = on_oom;
    r = gm_setup(&ctx, &d);
    if (r != GM_OK) die("gm_setup", r);
    return ctx;
}

static void close_ctx(gm_context* ctx) {
    gm_result r = gm_shutdown(ctx);
    if (r != GM_OK) die("gm_shutdown", r);
}

static void report_check(gm_context* ctx) {
    int bad = gm_check(ctx);
    printf("  gm_check              %d broken invariants\n", bad);
    if (bad != 0) {
        printf("\ncaching: gm_check found broken invariants\n");
        exit(1);
    }
}

/* >>replay ----------------------------------------------------------------
   Runs the trace through the raw backend or the cache. Stops at the first
   failed allocation and says where (fail < nops); every live pointer stays
   in ptrs for the caller to free. */
typedef struct result {
    double seconds;
    size_t allocs;          /* allocations made */
    int64_t dev_setup;      /* device allocations by the end of setup */
    int64_t dev_step1;      /* ... by the end of step 1 */
    int64_t dev_steps;      /* ... by the end of the last step */
    size_t fail;            /* index of the failed op; nops when none */
    gm_result fail_result;
    size_t live;            /* requested bytes live when it stopped */
} result;

static int64_t device_allocs(gm_context* ctx, int raw, size_t allocs) {
    gm_stats st;
    gm_result r;
    if (raw) return (int64_t)allocs;
    r = gm_get_stats(ctx, &st);
    if (r != GM_OK) die("gm_get_stats", r);
    return st.num_device_alloc;
}

static result replay(gm_context* ctx, const trace* t, void** ptrs, int raw) {
    result res;
    size_t i;
    int step = 0;
    double t0;
    memset(&res, 0, sizeof res);
    res.fail = t->nops;
    t0 = now_s();
    for (i = 0; i < t->nops; i++) {
        const op* o = &t->ops[i];
        size_t size = t->slot_size[o->slot];
        gm_result r;
        if (o->step != step) { /* a step ends: note the device allocations so far */
            if (step == 0) res.dev_setup = device_allocs(ctx, raw, res.allocs);
            if (step == 1) res.dev_step1 = device_allocs(ctx, raw, res.allocs);
            if (step == STEPS) res.dev_steps = device_allocs(ctx, raw, res.allocs);
            step = o->step;
        }
        if (o->name) {
            r = raw ? gm_raw_alloc(ctx, &ptrs[o->slot], size) : gm_alloc(ctx, &ptrs[o->slot], size, NULL);
            if (r != GM_OK) {
                res.fail = i;
                res.fail_result = r;
                break;
            }
            res.allocs++;
            res.live += size;
        } else {
            r = raw ? gm_raw_free(ctx, ptrs[o->slot], size) : gm_free(ctx, ptrs[o->slot]);
            if (r != GM_OK) die(raw ? "gm_raw_free" : "gm_free", r);
            ptrs[o->slot] = NULL;
            res.live -= size;
        }
    }
    res.seconds = now_s() - t0;
    return res;
}

static void print_timing(const result* res) {
    printf("  wall time             %.1f ms\n", res->seconds * 1e3);
    printf("  per alloc+free        %.2f us (%zu allocations, each freed)\n",
           res->seconds * 1e6 / (double)res->allocs, res->allocs);
}

/* >>main ------------------------------------------------------------------*/
int main(void) {
    trace t;
    void** ptrs;
    gm_context* ctx;
    gm_stats st;
    gm_result r;
    result ra, rc, rb;
    char b1[32], b2[32], b3[32];
    char* summary;
    size_t n, budget, i;
    const op* f;

    build_workload(&t);
    ptrs = (void**)calloc(t.nslots, sizeof *ptrs);
    if (!ptrs) {
        fprintf(stderr, "caching: out of host memory\n");
        return 1;
    }

    printf("gpumem caching: a transformer-like training loop, allocator only\n\n");

    /* The backend: CUDA when built with it and a device answers, else sim. */
#ifdef GPUMEM_CUDA
    {
        gm_desc d;
        memset(&d, 0, sizeof d);
        d.log_fn = on_log;
        r = gm_setup(&ctx, &d);
        if (r == GM_ERR_NO_DEVICE) {
            printf("backend: built with GPUMEM_CUDA, but there is no usable CUDA device:\n");
            for (i = 0; i < (size_t)log_count && i < LOG_LINES; i++) printf("  gpumem log: %s\n", log_lines[i]);
            printf("  falling back to the sim backend (a simulated device in host memory).\n");
            backend = GM_BACKEND_SIM;
        } else if (r != GM_OK) {
            die("gm_setup (cuda)", r);
        } else {
            backend = gm_query_desc(ctx).backend;
            close_ctx(ctx);
        }
        log_count = 0;
    }
#endif
    log_echo = 1; /* from here on, any log line is unexpected: show it */
    ctx = open_ctx(0);
    backend = gm_query_desc(ctx).backend;
    {
        size_t fr, tot;
        r = gm_mem_info(ctx, &fr, &tot);
        if (r != GM_OK) die("gm_mem_info", r);
        if (backend == GM_BACKEND_SIM)
            printf("backend: sim, a simulated device of %s. A device allocation here is an\n"
                   "  mmap of host memory, never touched: part A times mmap/munmap, not cudaMalloc.\n",
                   fmt_bytes(b1, sizeof b1, tot));
        else
            printf("backend: cuda, device %d with %s (%s free). A device allocation is cudaMalloc.\n",
                   gm_query_desc(ctx).device, fmt_bytes(b1, sizeof b1, tot), fmt_bytes(b2, sizeof b2, fr));
    }
    printf("workload: %d layers (hidden %zu, %zu heads, sequence %zu, batch %zu, fp16), %d steps.\n", LAYERS, HID,
           HEADS, SEQ, BATCH, STEPS);
    printf("  %zu long-lived weight tensors; per step %zu allocations of %s (rounded\n"
           "  up to 512 B) to %s: activations layer by layer, freed in reverse during\n"
           "  backward; gradients freed after the optimizer step. Peak live: %s requested.\n",
           (size_t)(LAYERS * NW + 3), t.per_step, fmt_bytes(b1, sizeof b1, t.min_req),
           fmt_bytes(b2, sizeof b2, t.max_req), fmt_bytes(b3, sizeof b3, t.peak));

    /* A: the raw backend */
    printf("\nA. raw device allocation (gm_raw_alloc / gm_raw_free): every request goes to the device\n");
    ra = replay(ctx, &t, ptrs, 1);
    if (ra.fail < t.nops) die("gm_raw_alloc", ra.fail_result);
    print_timing(&ra);
    printf("  device allocations    %zu (one per request)\n", ra.allocs);
    report_check(ctx);
    close_ctx(ctx);

    /* B: the caching allocator */
    printf("\nB. caching allocator (gm_alloc / gm_free)\n");
    ctx = open_ctx(0);
    rb = replay(ctx, &t, ptrs, 0);
    if (rb.fail < t.nops) die("gm_alloc", rb.fail_result);
    r = gm_get_stats(ctx, &st);
    if (r != GM_OK) die("gm_get_stats", r);
    print_timing(&rb);
    printf("  device allocations    %lld: %lld for the weights, %lld in step 1, %lld in steps 2-%d\n",
           (long long)st.num_device_alloc, (long long)rb.dev_setup, (long long)(rb.dev_step1 - rb.dev_setup),
           (long long)(rb.dev_steps - rb.dev_step1), STEPS);
    printf("  reuse rate            %.2f%% of allocations served from the cache (1 - %lld / %zu)\n",
           100.0 * (1.0 - (double)st.num_device_alloc / (double)rb.allocs), (long long)st.num_device_alloc,
           rb.allocs);
    printf("  speed-up over A       %.1fx per alloc+free\n", ra.seconds / rb.seconds);
    printf("  peak reserved         %s for %s peak requested\n",
           fmt_bytes(b1, sizeof b1, (size_t)st.reserved_bytes[GM_STAT_ALL].peak),
           fmt_bytes(b2, sizeof b2, (size_t)st.requested_bytes[GM_STAT_ALL].peak));
    report_check(ctx);
    n = gm_summary(ctx, NULL, 0);
    summary = (char*)malloc(n + 1);
    if (!summary) {
        fprintf(stderr, "caching: out of host memory\n");
        return 1;
    }
    gm_summary(ctx, summary, n + 1);
    printf("\ngm_summary after part B (everything freed; the cache keeps its segments):\n%s", summary);
    free(summary);
    close_ctx(ctx);

    /* C: a budget below the peak */
    budget = t.peak / 10 * 6;
    printf("\nC. the same workload with desc.device_budget = %s (60%% of the %s peak)\n",
           fmt_bytes(b1, sizeof b1, budget), fmt_bytes(b2, sizeof b2, t.peak));
    ctx = open_ctx(budget);
    log_echo = 0; /* the OOM message is expected: keep it and show it below */
    log_count = 0;
    rc = replay(ctx, &t, ptrs, 0);
    log_echo = 1;
    if (rc.fail == t.nops) {
        printf("\ncaching: the workload fit in a budget below its peak; that cannot be right\n");
        return 1;
    }
    if (rc.fail_result != GM_ERR_OUT_OF_MEMORY) die("gm_alloc", rc.fail_result);
    f = &t.ops[rc.fail];
    r = gm_get_stats(ctx, &st);
    if (r != GM_OK) die("gm_get_stats", r);
    printf("  gm_alloc returned GM_ERR_OUT_OF_MEMORY (\"%s\")\n", gm_result_string(rc.fail_result));
    printf("  where                 step %d, %s", f->step, phase_names[f->phase]);
    if (f->layer >= 0) printf(", layer %d", f->layer);
    printf(": '%s' (%s),\n", f->name, fmt_bytes(b1, sizeof b1, t.slot_size[f->slot]));
    printf("                        allocation %zu of the run, with %s live and %s reserved\n", rc.allocs + 1,
           fmt_bytes(b2, sizeof b2, rc.live),
           fmt_bytes(b3, sizeof b3, (size_t)st.reserved_bytes[GM_STAT_ALL].current));
    printf("  the ladder            %lld %s (release the cache, wait for the streams, search again);\n"
           "                        the OOM hook (desc.oom_fn) was called %d %s for %s and answered\n"
           "                        GM_OOM_FAIL: it has nothing to evict\n",
           (long long)st.num_alloc_retries, st.num_alloc_retries == 1 ? "retry" : "retries", oom_calls,
           oom_calls == 1 ? "time" : "times", fmt_bytes(b1, sizeof b1, oom_size));
    printf("  the log said:\n");
    for (i = 0; i < (size_t)log_count && i < LOG_LINES; i++) printf("    %s\n", log_lines[i]);
    if (log_count == 0) {
        printf("\ncaching: the OOM was not logged\n");
        return 1;
    }
    for (i = 0; i < t.nslots; i++) {
        if (!ptrs[i]) continue;
        r = gm_free(ctx, ptrs[i]);
        if (r != GM_OK) die("gm_free", r);
        ptrs[i] = NULL;
    }
    printf("  after freeing what was live:\n");
    report_check(ctx);
    close_ctx(ctx);
    printf("\n  Raw pointers from gm_alloc cannot move, so the allocator alone stops here.\n"
           "  Held as tensors of the tiered manager (gm_tensor_create / acquire /\n"
           "  release), the same workload spills cold tensors to pinned host memory and\n"
           "  brings them back before use: it runs slower instead of stopping. make demo\n"
           "  shows that, and bench/spill_vs_oom sweeps it over budgets.\n");

    free(ptrs);
    free(t.ops);
    free(t.slot_size);
    return 0;
}
