/* train_mlp.c -- a multi-layer perceptron trained with Adam on synthetic
   data, every weight, gradient, optimizer moment and activation a gpumem
   tensor, under device budgets below its footprint.

   It trains once with room for everything (the reference), then again
   under budgets of a fraction of the reference's peak tensor memory. Same
   seed, same data, same order of arithmetic: a budgeted run must give the
   reference's losses bit for bit, because spilling moves bytes and never
   changes them. Prints the loss curves side by side, checks they are
   identical, and writes them as CSV and SVG.

   On sim the kernels are the plain C loops of mlp_kernels.h, run as stream
   work; the CUDA build (make build/train_mlp-cuda) runs cuBLAS and the kernels of
   mlp_kernels.cu where there is a device, and sim where there is not.

   usage: train_mlp [FRACTION ...]   (default 1 0.5 0.25)
   Each FRACTION is a budget, as a fraction of the reference run's peak
   tensor memory (its footprint). A budget below the largest set of tensors
   one kernel needs at once cannot run: the program says so in one line and
   exits 1. */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include "mlp_kernels.h"
#include "plot.h"
#include "pick_backend.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { L = 8, B = 16, STEPS = 40, NBATCH = 4, MAXRUNS = 6 };
static const int dims[L + 1] = {512, 768, 768, 768, 768, 768, 768, 768, 256};
static const float LR = 3e-4f;
#define MiB (1024.0 * 1024.0)

/* >>kernels ---------------------------------------------------------------
   One kernel launch: on sim a host function over device pointers (sim
   device memory is host memory), on CUDA the kernel or cuBLAS itself. */
enum { K_GEMM, K_BIAS_ACT, K_MSE, K_RELU_BACK, K_ROWSUM, K_ADAM };
typedef struct kop {
    int op, ta, tb, m, n, k, lda, ldb, ldc, relu, t;
    float alpha, beta;
    float *a, *b, *c, *d, *e;
} kop;

static void kop_run(void* arg) {
    const kop* k = (const kop*)arg;
    switch (k->op) {
    case K_GEMM: mlp_gemm(k->ta, k->tb, k->m, k->n, k->k, k->alpha, k->a, k->lda, k->b, k->ldb, k->beta, k->c, k->ldc); break;
    case K_BIAS_ACT: mlp_bias_act(k->a, k->b, k->m, k->n, k->relu); break;
    case K_MSE: mlp_mse(k->a, k->b, k->c, k->d, k->n); break;
    case K_RELU_BACK: mlp_relu_back(k->a, k->b, k->n); break;
    case K_ROWSUM: mlp_rowsum(k->a, k->b, k->m, k->n); break;
    case K_ADAM: mlp_adam(k->a, k->b, k->c, k->d, k->n, k->alpha, k->t); break;
    }
}

#ifdef GPUMEM_CUDA
static int kop_cuda(const kop* k, gm_stream s) {
    switch (k->op) {
    case K_GEMM:
        return mlp_cuda_gemm(k->ta, k->tb, k->m, k->n, k->k, k->alpha, k->a, k->lda, k->b, k->ldb, k->beta, k->c, k->ldc, s);
    case K_BIAS_ACT: return mlp_cuda_bias_act(k->a, k->b, k->m, k->n, k->relu, s);
    case K_MSE: return mlp_cuda_mse(k->a, k->b, k->c, k->d, k->n, s);
    case K_RELU_BACK: return mlp_cuda_relu_back(k->a, k->b, k->n, s);
    case K_ROWSUM: return mlp_cuda_rowsum(k->a, k->b, k->m, k->n, s);
    case K_ADAM: return mlp_cuda_adam(k->a, k->b, k->c, k->d, k->n, k->alpha, k->t, s);
    }
    return -1;
}
#endif

/* >>run -------------------------------------------------------------------
   One training run. Every failure lands in r->err (the first one wins) and
   the run stops at the end of the step. */
typedef struct layer {
    gm_tensor W, b, dW, db, mW, vW, mb, vb;
} layer;

typedef struct run {
    gm_context* ctx;
    gm_stream s;
    int sim;
    layer ly[L];
    gm_tensor act[L + 1];  /* act[0] the batch, act[l + 1] the output of layer l */
    gm_tensor grad[L + 1]; /* the loss's gradient with respect to act[l] */
    gm_tensor y, loss;
    kop* ops;              /* this step's kernel arguments (sim runs them later) */
    size_t nops, capops;
    float losses[STEPS], loss_host;
    double step_ms[STEPS];
    size_t live, peak;     /* tensor bytes */
    uint64_t held[16];     /* tensors acquired now (their ids) */
    size_t nheld, held_bytes, ws;  /* ws: the most bytes acquired at once (the working set) */
    gm_result err;
    char what[96];
} run;

static void fail(run* r, gm_result e, const char* what) {
    if (r->err == GM_OK && e != GM_OK) {
        r->err = e;
        snprintf(r->what, sizeof r->what, "%s", what);
    }
}

static void launch(run* r, kop k) {
    if (r->err) return;
#ifdef GPUMEM_CUDA
    if (!r->sim) {
        if (kop_cuda(&k, r->s) != 0) fail(r, GM_ERR_BACKEND, "a CUDA kernel");
        return;
    }
#endif
    if (r->nops == r->capops) {
        fail(r, GM_ERR_INTERNAL, "too many kernels in one step");
        return;
    }
    r->ops[r->nops] = k;
    fail(r, gm_launch_host(r->ctx, r->s, kop_run, &r->ops[r->nops++]), "gm_launch_host");
}

static void make(run* r, gm_tensor* t, size_t floats) {
    if (r->err) return;
    fail(r, gm_tensor_create(r->ctx, t, floats * sizeof(float)), "gm_tensor_create");
    if (r->err) return;
    r->live += floats * sizeof(float);
    if (r->live > r->peak) r->peak = r->live;
}

static void drop(run* r, gm_tensor* t, size_t floats) {
    if (!t->id) return;
    gm_tensor_destroy(r->ctx, *t);
    t->id = 0;
    r->live -= floats * sizeof(float);
}

/* The device pointer of an acquired tensor; NULL after a failure. */
static float* acq(run* r, gm_tensor t) {
    void* p = NULL;
    if (r->err) return NULL;
    fail(r, gm_tensor_acquire(r->ctx, t, r->s, &p), "gm_tensor_acquire");
    if (r->err) return NULL;
    if (r->nheld < sizeof r->held / sizeof r->held[0]) r->held[r->nheld++] = t.id;
    r->held_bytes += gm_tensor_size(r->ctx, t);
    if (r->held_bytes > r->ws) r->ws = r->held_bytes;
    return (float*)p;
}
/* Releases t if acq acquired it (a failed acquire is not released). */
static void rel(run* r, gm_tensor t, int written) {
    size_t i;
    for (i = 0; i < r->nheld && r->held[i] != t.id; i++) {}
    if (!t.id || i == r->nheld) return;
    r->held[i] = r->held[--r->nheld];
    r->held_bytes -= gm_tensor_size(r->ctx, t);
    gm_tensor_release(r->ctx, t, r->s, written);
}

/* Host values into a tensor (it stays valid: the stream is synchronized
   before src changes). */
static void upload(run* r, gm_tensor t, const float* src, size_t floats) {
    float* p = acq(r, t);
    if (!p) return;
    fail(r, gm_memcpy_async(r->ctx, p, src, floats * sizeof(float), GM_COPY_HOST_TO_DEVICE, r->s), "upload");
    rel(r, t, 1);
}

/* >>data ------------------------------------------------------------------
   A fixed random "teacher" maps inputs to targets: y = tanh(T x). */
static uint64_t rng_state;
static float urand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *teacher, *xbuf, *ybuf, *hostbuf;

static void make_batch(int step) {
    int i, j, p;
    rng_state = (uint64_t)1000003 * ((uint64_t)(unsigned)step + 1);
    for (i = 0; i < dims[0] * B; i++) xbuf[i] = urand();
    for (j = 0; j < B; j++)
        for (i = 0; i < dims[L]; i++) {
            float s = 0;
            for (p = 0; p < dims[0]; p++) s += teacher[MLP_IX(i, p, dims[L])] * xbuf[MLP_IX(p, j, dims[0])];
            ybuf[MLP_IX(i, j, dims[L])] = tanhf(s * 0.05f);
        }
}

/* >>train -----------------------------------------------------------------*/
static size_t wsize(int l) { return (size_t)dims[l] * (size_t)dims[l + 1]; }

static void init_model(run* r) {
    int l;
    size_t i;
    for (l = 0; l < L && !r->err; l++) {
        layer* y = &r->ly[l];
        float scale = sqrtf(6.0f / (float)(dims[l] + dims[l + 1]));
        make(r, &y->W, wsize(l)), make(r, &y->dW, wsize(l)), make(r, &y->mW, wsize(l)), make(r, &y->vW, wsize(l));
        make(r, &y->b, (size_t)dims[l + 1]), make(r, &y->db, (size_t)dims[l + 1]);
        make(r, &y->mb, (size_t)dims[l + 1]), make(r, &y->vb, (size_t)dims[l + 1]);
        rng_state = (uint64_t)7919 * ((uint64_t)(unsigned)l + 1);
        for (i = 0; i < wsize(l); i++) hostbuf[i] = urand() * scale;
        upload(r, y->W, hostbuf, wsize(l));
        gm_stream_synchronize(r->ctx, r->s);
        memset(hostbuf, 0, wsize(l) * sizeof(float));
        upload(r, y->mW, hostbuf, wsize(l)), upload(r, y->vW, hostbuf, wsize(l));
        upload(r, y->b, hostbuf, (size_t)dims[l + 1]), upload(r, y->mb, hostbuf, (size_t)dims[l + 1]);
        upload(r, y->vb, hostbuf, (size_t)dims[l + 1]);
        gm_stream_synchronize(r->ctx, r->s);
    }
    make(r, &r->loss, 64);
}

static void kgemm(run* r, int ta, int tb, int m, int n, int k, const float* A, int lda, const float* Bm, int ldb, float* C,
                  int ldc) {
    kop o;
    memset(&o, 0, sizeof o);
    o.op = K_GEMM, o.ta = ta, o.tb = tb, o.m = m, o.n = n, o.k = k, o.alpha = 1, o.beta = 0;
    o.a = (float*)A, o.lda = lda, o.b = (float*)Bm, o.ldb = ldb, o.c = C, o.ldc = ldc;
    if (A && Bm && C) launch(r, o);
}

static void kop5(run* r, int op, float* a, float* b, float* c, float* d, int m, int n, int relu, float alpha, int t) {
    kop o;
    memset(&o, 0, sizeof o);
    o.op = op, o.a = a, o.b = b, o.c = c, o.d = d, o.m = m, o.n = n, o.relu = relu, o.alpha = alpha, o.t = t;
    launch(r, o);
}

static void adam(run* r, gm_tensor p, gm_tensor g, gm_tensor m, gm_tensor v, int n, int t) {
    float *pp = acq(r, p), *gp = acq(r, g), *mp = acq(r, m), *vp = acq(r, v);
    if (pp && gp && mp && vp) kop5(r, K_ADAM, pp, gp, mp, vp, 0, n, 0, LR, t);
    rel(r, p, 1), rel(r, g, 0), rel(r, m, 1), rel(r, v, 1);
}

static void train_step(run* r, int step) {
    int l;
    float *in, *out, *w, *b, *lp;
    make_batch(step % NBATCH);
    make(r, &r->act[0], (size_t)dims[0] * B), make(r, &r->y, (size_t)dims[L] * B);
    upload(r, r->act[0], xbuf, (size_t)dims[0] * B), upload(r, r->y, ybuf, (size_t)dims[L] * B);
    for (l = 0; l < L && !r->err; l++) { /* forward */
        make(r, &r->act[l + 1], (size_t)dims[l + 1] * B);
        w = acq(r, r->ly[l].W), b = acq(r, r->ly[l].b), in = acq(r, r->act[l]), out = acq(r, r->act[l + 1]);
        kgemm(r, 0, 0, dims[l + 1], B, dims[l], w, dims[l + 1], in, dims[l], out, dims[l + 1]);
        if (out && b) kop5(r, K_BIAS_ACT, out, b, NULL, NULL, dims[l + 1], B, l < L - 1, 0, 0);
        rel(r, r->ly[l].W, 0), rel(r, r->ly[l].b, 0), rel(r, r->act[l], 0), rel(r, r->act[l + 1], 1);
    }
    make(r, &r->grad[L], (size_t)dims[L] * B); /* the loss */
    out = acq(r, r->act[L]), in = acq(r, r->y), w = acq(r, r->grad[L]), lp = acq(r, r->loss);
    if (out && in && w && lp) kop5(r, K_MSE, out, in, w, lp, 0, dims[L] * B, 0, 0, 0);
    if (lp) fail(r, gm_memcpy_async(r->ctx, &r->loss_host, lp, sizeof(float), GM_COPY_DEVICE_TO_HOST, r->s), "loss");
    rel(r, r->act[L], 0), rel(r, r->y, 0), rel(r, r->grad[L], 1), rel(r, r->loss, 1);
    drop(r, &r->y, (size_t)dims[L] * B);
    for (l = L - 1; l >= 0 && !r->err; l--) { /* backward, and Adam layer by layer */
        layer* y = &r->ly[l];
        float *dz = acq(r, r->grad[l + 1]), *h = acq(r, r->act[l + 1]), *x = acq(r, r->act[l]);
        float *dw = acq(r, y->dW), *db = acq(r, y->db);
        if (dz && h && l < L - 1) kop5(r, K_RELU_BACK, dz, h, NULL, NULL, 0, dims[l + 1] * B, 0, 0, 0);
        kgemm(r, 0, 1, dims[l + 1], dims[l], B, dz, dims[l + 1], x, dims[l], dw, dims[l + 1]);
        if (dz && db) kop5(r, K_ROWSUM, dz, db, NULL, NULL, dims[l + 1], B, 0, 0, 0);
        if (l > 0) {
            make(r, &r->grad[l], (size_t)dims[l] * B);
            w = acq(r, y->W), in = acq(r, r->grad[l]);
            kgemm(r, 1, 0, dims[l], B, dims[l + 1], w, dims[l + 1], dz, dims[l + 1], in, dims[l]);
            rel(r, y->W, 0), rel(r, r->grad[l], 1);
        }
        rel(r, r->grad[l + 1], 1), rel(r, r->act[l + 1], 0), rel(r, r->act[l], 0), rel(r, y->dW, 1), rel(r, y->db, 1);
        drop(r, &r->grad[l + 1], (size_t)dims[l + 1] * B), drop(r, &r->act[l + 1], (size_t)dims[l + 1] * B);
        adam(r, y->W, y->dW, y->mW, y->vW, (int)wsize(l), step + 1);
        adam(r, y->b, y->db, y->mb, y->vb, dims[l + 1], step + 1);
    }
    drop(r, &r->act[0], (size_t)dims[0] * B);
    fail(r, gm_stream_synchronize(r->ctx, r->s), "gm_stream_synchronize");
    r->nops = 0; /* the stream is idle: the kernels' arguments are free */
    r->losses[step] = r->loss_host;
    gm_tier_step(r->ctx);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct outcome {
    int ok, oom;                  /* oom: the budget could not hold a working set */
    double median_ms, moved_mib;
    int64_t evictions;
    size_t peak, reserved_peak, ws;
} outcome;

static int cmp_d(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static outcome train(run* r, gm_backend backend, size_t budget) {
    outcome o;
    gm_desc d;
    gm_tier_stats ts;
    gm_stats st;
    int k, l;
    memset(&o, 0, sizeof o);
    memset(r, 0, sizeof *r);
    memset(&d, 0, sizeof d);
    d.backend = backend;
    d.ignore_env = 1;
    d.device_budget = budget;
    d.log_fn = gm_log_stderr;
    if (gm_setup(&r->ctx, &d) != GM_OK) return o;
    r->sim = gm_query_desc(r->ctx).backend == GM_BACKEND_SIM;
    r->capops = 64 * L;
    r->ops = (kop*)calloc(r->capops, sizeof(kop));
    fail(r, r->ops ? GM_OK : GM_ERR_HOST_OUT_OF_MEMORY, "calloc");
    fail(r, gm_stream_create(r->ctx, &r->s), "gm_stream_create");
    gm_tier_set_policy(r->ctx, GM_EVICT_LEARNED, 4, NULL, NULL);
    init_model(r);
    for (k = 0; k < STEPS && !r->err; k++) {
        double t0 = now_ms();
        train_step(r, k);
        r->step_ms[k] = now_ms() - t0;
    }
    o.ok = !r->err;
    o.oom = r->err == GM_ERR_OUT_OF_MEMORY;
    if (r->err && !o.oom) fprintf(stderr, "train_mlp: %s failed: %s\n", r->what, gm_result_string(r->err));
    gm_device_synchronize(r->ctx);
    qsort(r->step_ms, STEPS, sizeof(double), cmp_d);
    o.median_ms = r->step_ms[STEPS / 2];
    if (gm_tier_get_stats(r->ctx, &ts) == GM_OK) {
        o.moved_mib = (double)(ts.bytes_to_host + ts.bytes_to_device) / MiB;
        o.evictions = ts.evictions;
    }
    if (gm_get_stats(r->ctx, &st) == GM_OK) o.reserved_peak = (size_t)st.reserved_bytes[GM_STAT_ALL].peak;
    o.peak = r->peak;
    o.ws = r->ws;
    if (gm_check(r->ctx) != 0) o.ok = 0;
    for (l = 0; l < L; l++) {
        layer* y = &r->ly[l];
        gm_tensor* all[8] = {&y->W, &y->b, &y->dW, &y->db, &y->mW, &y->vW, &y->mb, &y->vb};
        for (k = 0; k < 8; k++)
            if (all[k]->id) gm_tensor_destroy(r->ctx, *all[k]);
    }
    for (l = 0; l <= L; l++) {
        if (r->act[l].id) gm_tensor_destroy(r->ctx, r->act[l]);
        if (r->grad[l].id) gm_tensor_destroy(r->ctx, r->grad[l]);
    }
    if (r->y.id) gm_tensor_destroy(r->ctx, r->y);
    if (r->loss.id) gm_tensor_destroy(r->ctx, r->loss);
    gm_stream_destroy(r->ctx, r->s);
    gm_shutdown(r->ctx);
    free(r->ops);
    return o;
}

/* >>main ------------------------------------------------------------------*/
int main(int argc, char** argv) {
    static run runs[MAXRUNS];
    outcome out[MAXRUNS];
    double frac[MAXRUNS];
    int nruns = 1, i, k, same_all = 1;
    gm_backend be = pick_backend();
    size_t params = 0;
    const char* svg_path = "build/train_mlp.svg";
    FILE* svg;
    for (i = 1; i < argc && nruns < MAXRUNS; i++) frac[nruns++] = atof(argv[i]);
    if (nruns == 1) frac[1] = 1, frac[2] = 0.5, frac[3] = 0.25, nruns = 4;
    for (i = 0; i < L; i++) params += wsize(i) + (size_t)dims[i + 1];
    teacher = (float*)malloc((size_t)dims[L] * (size_t)dims[0] * sizeof(float));
    xbuf = (float*)malloc((size_t)dims[0] * B * sizeof(float));
    ybuf = (float*)malloc((size_t)dims[L] * B * sizeof(float));
    hostbuf = (float*)malloc(768 * 768 * sizeof(float));
    if (!teacher || !xbuf || !ybuf || !hostbuf) return 1;
    rng_state = 42;
    for (i = 0; i < dims[L] * dims[0]; i++) teacher[i] = urand();

    printf("train_mlp: %d layers (%d", L, dims[0]);
    for (i = 1; i <= L; i++) printf("-%d", dims[i]);
    printf("), ReLU, MSE against a random teacher, Adam (lr %g), batch %d, %d steps\n", (double)LR, B, STEPS);
    printf("%zu parameters; weights, gradients, both Adam moments and the activations are gpumem tensors\n", params);
    printf("backend: %s\n\n", be == GM_BACKEND_SIM ? "sim (kernels: C loops run as stream work)" : "cuda (cuBLAS)");

    frac[0] = 0;
    out[0] = train(&runs[0], be, 0);
    if (!out[0].ok) return 1;
    for (i = 1; i < nruns; i++) {
        size_t budget = (size_t)((double)out[0].peak * frac[i]);
        printf("budget %.0f%% of the footprint: %.1f MiB ...\n", 100 * frac[i], (double)budget / MiB);
        fflush(stdout);
        out[i] = train(&runs[i], be, budget);
        if (out[i].oom) {
            printf("train_mlp: a budget of %.1f MiB (%.0f%% of the footprint) is below the working set one kernel "
                   "needs (%.1f MiB, %.0f%%): stopping\n",
                   (double)budget / MiB, 100 * frac[i], (double)out[0].ws / MiB, 100.0 * (double)out[0].ws / (double)out[0].peak);
            return 1;
        }
        if (!out[i].ok) return 1;
    }

    printf("\nloss by step:\n%6s %14s", "step", "no budget");
    for (i = 1; i < nruns; i++) printf("   budget %4.0f%%", 100 * frac[i]);
    printf("\n");
    for (k = 0; k < STEPS; k++) {
        if (k % 3 && k != STEPS - 1) continue;
        printf("%6d %14.6f", k + 1, (double)runs[0].losses[k]);
        for (i = 1; i < nruns; i++) printf(" %14.6f", out[i].ok ? (double)runs[i].losses[k] : -1.0);
        printf("\n");
    }
    printf("\n%-16s %10s %12s %12s %12s %10s  %s\n", "run", "budget MiB", "peak resv", "step ms", "moved MiB",
           "evictions", "losses");
    for (i = 0; i < nruns; i++) {
        int same = out[i].ok && memcmp(runs[i].losses, runs[0].losses, sizeof runs[0].losses) == 0;
        char name[32];
        if (i) snprintf(name, sizeof name, "budget %.0f%%", 100 * frac[i]);
        else snprintf(name, sizeof name, "no budget");
        if (i && !same) same_all = 0;
        printf("%-16s %10.1f %12.1f %12.1f %12.0f %10lld  %s\n", name, i ? (double)out[0].peak * frac[i] / MiB : 0.0,
               (double)out[i].reserved_peak / MiB, out[i].median_ms, out[i].moved_mib, (long long)out[i].evictions,
               !out[i].ok ? "FAILED" : i == 0 ? "reference" : same ? "identical to the reference, bit for bit" : "DIFFER");
    }
    printf("(footprint: %.1f MiB of tensors at the peak of the unbudgeted run, %.1f MiB acquired at once at most; "
           "step ms: median)\n",
           (double)out[0].peak / MiB, (double)out[0].ws / MiB);

    svg = plot_open(svg_path, 760, 400);
    if (svg) {
        double xs[STEPS], ys[STEPS], ymax = 0;
        const char* names[MAXRUNS];
        const char* colors[MAXRUNS];
        static char labels[MAXRUNS][32];
        plot pl;
        for (k = 0; k < STEPS; k++)
            if (runs[0].losses[k] > ymax) ymax = runs[0].losses[k];
        pl = plot_panel(svg, 70, 40, 640, 300, 1, STEPS, 0, ymax * 1.05, "train_mlp: loss by step", "step", "MSE loss");
        for (i = 0; i < nruns; i++) {
            for (k = 0; k < STEPS; k++) xs[k] = k + 1, ys[k] = runs[i].losses[k];
            if (i) snprintf(labels[i], sizeof labels[i], "budget %.0f%%", 100 * frac[i]);
            else snprintf(labels[i], sizeof labels[i], "no budget");
            names[i] = labels[i];
            colors[i] = plot_colors[i];
            if (out[i].ok) plot_line(&pl, xs, ys, STEPS, colors[i], i > 0);
        }
        plot_legend(&pl, names, colors, nruns);
        plot_close(svg);
        printf("wrote %s%s\n", svg_path, same_all ? " (the curves lie on one another)" : "");
    }
#ifdef GPUMEM_CUDA
    mlp_cuda_done();
#endif
    free(teacher), free(xbuf), free(ybuf), free(hostbuf);
    for (i = 0; i < nruns; i++)
        if (!out[i].ok) return 1;
    return same_all ? 0 : 1;
}
