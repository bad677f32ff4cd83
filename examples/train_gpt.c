/* train_gpt.c -- a small GPT-shaped transformer trained with Adam on
   synthetic tokens, every parameter, gradient, optimizer moment and
   activation a gpumem tensor, under device budgets below its footprint,
   written with access modes and batches.

   usage: train_gpt [FRACTION ...]   (default 0.5 0.25)
   Each FRACTION is a budget, as a fraction of the reference run's peak
   tensor bytes on the device. A budget below the tensors one layer needs
   at once cannot run: the program says so in one line and exits 1.

   The model: token and position embeddings, NL blocks (layernorm, causal
   multi-head attention with one fused q/k/v projection, output projection,
   residual; layernorm, a GELU MLP, residual), a final layernorm and an
   output projection tied to the token embedding, softmax cross-entropy.
   It trains once with no budget (the reference), then under each FRACTION
   of the reference's peak device tensor bytes, with learned order, and
   checks that every loss, training and evaluation (a forward pass on a
   held-out batch every few steps, in a learned-order phase of its own),
   is the reference's bit for bit: spilling moves bytes and never changes
   them. Exits 0 only then. The budgeted runs and a second unbudgeted one
   take their steps in turn, so that another program's load on the machine
   falls on all of them alike, and each step's time is compared with the
   unbudgeted run's same step.

   Each budget runs two ways, to show what the access modes save:
     modes    one gm_tensor_acquire_many per layer, forward and backward,
              each tensor with its gm_access: READ for weights in forward
              and saved activations in backward, OVERWRITE for what a
              kernel writes completely (activations, and parameter
              gradients at their first contribution, which writes rather
              than accumulates, so no zeroing pass), READ_WRITE for
              accumulations and Adam's updates, READ_LAST for the
              gradients Adam consumes (their bytes are dead until the next
              step overwrites them: nothing copies them out);
              gm_tensor_release_many.
     old      as a port without modes: every acquire READ_WRITE, every
              release written, and a zeroing kernel for every gradient at
              the start of the step (the kernels then accumulate).
   The batches are the same in both, and so is every number computed.

   Kernels are the plain C loops of gpt_kernels.h, run as stream work with
   gm_launch_host_copy (the argument block is copied at launch). There is
   no CUDA version of them: every run asks for the sim backend, also in a
   build with GPUMEM_CUDA. The pinned host tier holds the whole model, so
   there is no disk tier. */
#define GPUMEM_IMPLEMENTATION
#include "gpumem.h"
#include "gpt_kernels.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The model and the run. GPT_SMALL (for the sanitizer build) shrinks it. */
#ifdef GPT_SMALL
enum { NL = 2, D = 32, NH = 2, T = 16, NB = 2, V = 64, STEPS = 4, EVAL_EVERY = 2 };
#else
enum { NL = 4, D = 256, NH = 4, T = 64, NB = 4, V = 512, STEPS = 16, EVAL_EVERY = 4 };
#endif
enum { F = 4 * D, N = NB * T, NEVAL = STEPS / EVAL_EVERY, MAXFRAC = 4 };
/* Prefetch ahead, in acquires of the learned plan: a layer's batch is 4 to
   24 of them (an attention or MLP layer's Adam step: 6 parameters x 4), so
   24 brings in the whole next batch while the current one computes.
   Measured at 50% (25%): at 4, 2300 (3137) acquires of 2700 (3850) wait
   for their copy, at 24 only 258 (316), mostly in the first step, which
   has no plan yet; 40 changes nothing more. Early room costs some bytes:
   75 (112) MiB moved per step at 4, 83 (121) at 24. */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 24
#endif
static const float LR = 2e-3f;
#define MiB (1024.0 * 1024.0)
#define RD GM_ACCESS_READ
#define RW GM_ACCESS_READ_WRITE
#define OW GM_ACCESS_OVERWRITE
#define RL GM_ACCESS_READ_LAST /* read for the last time: the bytes are dead after it */

enum { MODES, OLD, NSTYLES };
enum { PHASE_TRAIN, PHASE_EVAL, PHASE_INIT }; /* the learned plans (gm_tier_set_phase) */
static const char* const style_name[] = {"modes", "old"};

/* >>kernels ---------------------------------------------------------------
   One launch: an op and its arguments, copied by gm_launch_host_copy. */
enum { K_NN, K_NT, K_TN, K_BIAS, K_COLSUM, K_LN, K_LN_BACK, K_GELU, K_GELU_BACK, K_ATT, K_ATT_BACK, K_EMBED,
       K_EMBED_BACK, K_XENT, K_ADAM, K_FILL };
typedef struct karg {
    int op, m, n, k, acc, acc2, step;
    float f;
    size_t len;
    void* p[8];
} karg;
typedef char karg_fits[sizeof(karg) <= GM_LAUNCH_ARG_MAX ? 1 : -1];

static void kernel_run(void* arg) {
    const karg* a = (const karg*)arg;
    float* const* p = (float* const*)a->p;
    switch (a->op) {
    case K_NN: gpt_gemm_nn(a->m, a->n, a->k, p[0], p[1], p[2], a->acc); break;
    case K_NT: gpt_gemm_nt(a->m, a->n, a->k, p[0], p[1], p[2], a->acc); break;
    case K_TN: gpt_gemm_tn(a->m, a->n, a->k, p[0], p[1], p[2], a->acc); break;
    case K_BIAS: gpt_bias_res(p[0], p[1], p[2], a->m, a->n); break;
    case K_COLSUM: gpt_colsum(p[0], p[1], a->m, a->n, a->acc); break;
    case K_LN: gpt_layernorm(p[0], p[1], p[2], p[3], a->m, a->n); break;
    case K_LN_BACK: gpt_layernorm_back(p[0], p[1], p[2], p[3], p[4], p[5], p[6], a->m, a->n, a->acc); break;
    case K_GELU: gpt_gelu(p[0], p[1], a->len); break;
    case K_GELU_BACK: gpt_gelu_back(p[0], p[1], a->len); break;
    case K_ATT: gpt_attention(p[0], p[1], p[2], NB, T, D, NH); break;
    case K_ATT_BACK: gpt_attention_back(p[0], p[1], p[2], p[3], p[4], NB, T, D, NH); break;
    case K_EMBED: gpt_embed((const int32_t*)a->p[0], p[1], p[2], p[3], NB, T, D); break;
    case K_EMBED_BACK: gpt_embed_back(p[0], (const int32_t*)a->p[1], p[2], p[3], NB, T, D, V, a->acc, a->acc2); break;
    case K_XENT: gpt_xent(p[0], (const int32_t*)a->p[1], p[2], p[3], N, V); break;
    case K_ADAM: gpt_adam(p[0], p[1], p[2], p[3], a->len, a->f, a->step); break;
    case K_FILL: gpt_fill(p[0], a->len, a->f); break;
    }
}

/* >>run -------------------------------------------------------------------
   One training run. Every failure lands in r->err (the first one wins);
   after one, nothing more is launched and the run stops at the step's end. */
typedef struct prm { /* a parameter, its gradient and Adam's two moments */
    gm_tensor w, g, m, v;
    size_t n;
} prm;

enum { P_LN1G, P_LN1B, P_WQKV, P_BQKV, P_WO, P_BO, P_LN2G, P_LN2B, P_W1, P_B1, P_W2, P_B2, NBP };
typedef struct block {
    prm p[NBP];
    gm_tensor h1, qkv, P, att, xmid, h2, u, a; /* saved for the backward pass */
} block;

typedef struct run {
    gm_context* ctx;
    gm_stream s;
    int style;
    prm wte, wpe, lnfg, lnfb;
    block bk[NL];
    gm_tensor x[NL + 1]; /* the residual stream: x[l] enters block l */
    gm_tensor tok;       /* N input tokens, then N targets (int32) */
    gm_tensor hf, logits, dlogits, loss;
    gm_tensor dx;        /* the loss's gradient w.r.t. the residual stream, going down */
    float loss_host;
    float losses[STEPS], evals[NEVAL];
    double step_ms[STEPS];
    gm_tier_stats t0; /* at the first step */
    gm_result err;
    char what[96];
    size_t ws;             /* the most bytes one acquire_many took (the working set) */
} run;

static void fail(run* r, gm_result e, const char* what) {
    if (r->err == GM_OK && e != GM_OK) {
        r->err = e;
        snprintf(r->what, sizeof r->what, "%s", what);
    }
}

static void launch(run* r, karg a) {
    if (!r->err) fail(r, gm_launch_host_copy(r->ctx, r->s, kernel_run, &a, sizeof a), "gm_launch_host_copy");
}

static karg kop(int op, int m, int n, int k, int acc) {
    karg a;
    memset(&a, 0, sizeof a);
    a.op = op, a.m = m, a.n = n, a.k = k, a.acc = acc;
    return a;
}

static void kgemm(run* r, int op, int m, int n, int k, const float* A, const float* B, float* C, int acc) {
    karg a = kop(op, m, n, k, acc);
    a.p[0] = (void*)A, a.p[1] = (void*)B, a.p[2] = C;
    launch(r, a);
}
static void kbias(run* r, float* y, const float* b, const float* res, int rows, int cols) {
    karg a = kop(K_BIAS, rows, cols, 0, 0);
    a.p[0] = y, a.p[1] = (void*)b, a.p[2] = (void*)res;
    launch(r, a);
}
static void kcolsum(run* r, const float* dy, float* db, int rows, int cols, int acc) {
    karg a = kop(K_COLSUM, rows, cols, 0, acc);
    a.p[0] = (void*)dy, a.p[1] = db;
    launch(r, a);
}
static void kln(run* r, const float* x, const float* g, const float* b, float* y) {
    karg a = kop(K_LN, N, D, 0, 0);
    a.p[0] = (void*)x, a.p[1] = (void*)g, a.p[2] = (void*)b, a.p[3] = y;
    launch(r, a);
}
static void kln_back(run* r, const float* dy, const float* x, const float* g, const float* res, float* dx, float* dg,
                     float* db, int acc) {
    karg a = kop(K_LN_BACK, N, D, 0, acc);
    a.p[0] = (void*)dy, a.p[1] = (void*)x, a.p[2] = (void*)g, a.p[3] = (void*)res, a.p[4] = dx, a.p[5] = dg, a.p[6] = db;
    launch(r, a);
}
static void kunary(run* r, int op, float* p0, const float* p1, size_t len) {
    karg a = kop(op, 0, 0, 0, 0);
    a.p[0] = p0, a.p[1] = (void*)p1, a.len = len;
    launch(r, a);
}
static void kfill(run* r, float* p, size_t len, float value) {
    karg a = kop(K_FILL, 0, 0, 0, 0);
    a.p[0] = p, a.len = len, a.f = value;
    launch(r, a);
}
static void kptrs(run* r, int op, int acc, int acc2, void* p0, void* p1, void* p2, void* p3, void* p4) {
    karg a = kop(op, 0, 0, 0, acc);
    a.acc2 = acc2, a.p[0] = p0, a.p[1] = p1, a.p[2] = p2, a.p[3] = p3, a.p[4] = p4;
    launch(r, a);
}

/* Tensors come and go; a failed create leaves {0}, which every later call
   refuses (the error is already recorded). */
static void make(run* r, gm_tensor* t, size_t bytes) {
    if (!r->err) fail(r, gm_tensor_create(r->ctx, t, bytes), "gm_tensor_create");
}
static void drop(run* r, gm_tensor* t) {
    if (t->id) gm_tensor_destroy(r->ctx, *t);
    t->id = 0;
}
#define FL(n) ((size_t)(n) * sizeof(float))

/* >>batch -----------------------------------------------------------------
   A layer's tensors, each with the access its kernels make, acquired and
   released together; each use names the pointer that receives the device
   address. The old style acquires every one READ_WRITE and releases every
   one written (and zeroes the gradients beforehand: see zero_grads); the
   kernels are the same. */
enum { MAXUSE = 32 };
typedef struct batch {
    gm_use u[MAXUSE];
    gm_access asked[MAXUSE];
    float** f[MAXUSE];
    int32_t** i[MAXUSE];
    size_t n;
} batch;

static void use(batch* b, gm_tensor t, gm_access a, float** out) {
    if (b->n == MAXUSE) return; /* acquire() refuses the batch */
    b->u[b->n].tensor = t, b->asked[b->n] = a, b->f[b->n] = out, b->i[b->n] = NULL;
    *out = NULL;
    b->n++;
}
static void use_i32(batch* b, gm_tensor t, gm_access a, int32_t** out) {
    if (b->n == MAXUSE) return;
    b->u[b->n].tensor = t, b->asked[b->n] = a, b->f[b->n] = NULL, b->i[b->n] = out;
    *out = NULL;
    b->n++;
}

/* Returns non-zero when every tensor is acquired. */
static int acquire(run* r, batch* b) {
    size_t k;
    if (b->n == MAXUSE) fail(r, GM_ERR_INTERNAL, "a batch of more than MAXUSE tensors");
    if (r->err) {
        b->n = 0; /* none is acquired: release() has nothing to do */
        return 0;
    }
    for (k = 0; k < b->n; k++) b->u[k].access = r->style == MODES ? b->asked[k] : RW;
    fail(r, gm_tensor_acquire_many(r->ctx, b->u, b->n, r->s), "gm_tensor_acquire_many");
    if (r->err) {
        b->n = 0; /* none is acquired */
        return 0;
    }
    {
        size_t bytes = 0;
        for (k = 0; k < b->n; k++) {
            if (b->f[k]) *b->f[k] = (float*)b->u[k].ptr;
            else *b->i[k] = (int32_t*)b->u[k].ptr;
            bytes += gm_tensor_size(r->ctx, b->u[k].tensor);
        }
        if (bytes > r->ws) r->ws = bytes;
    }
    return 1;
}

/* Written unless acquired READ (old: none is). */
static void release(run* r, batch* b) {
    if (b->n) fail(r, gm_tensor_release_many(r->ctx, b->u, b->n, r->s), "gm_tensor_release_many");
    b->n = 0;
}

/* A parameter gradient's first contribution in a step: with modes it
   overwrites (nothing to bring in, no zeroing pass); the old style zeroed
   it at the start of the step and accumulates. */
static gm_access first_grad(const run* r) { return r->style == MODES ? OW : RW; }
static int first_acc(const run* r) { return r->style != MODES; }

/* >>data ------------------------------------------------------------------
   Sequences that mostly follow a fixed rule (the next token is 5 t + 3 mod
   V; one in ten is random), so the loss has something to learn. Inputs are
   the first T tokens of T + 1, targets the last T. */
static uint64_t rng_state;
static uint32_t rng(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float urand(void) { return (float)((double)rng() / 2147483648.0 - 1.0); } /* in [-1, 1) */

static int32_t train_tok[2 * N], eval_tok[2 * N];

static void make_tokens(int32_t* buf, uint64_t seed) {
    int b, i;
    rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (b = 0; b < NB; b++) {
        int32_t s[T + 1];
        s[0] = (int32_t)(rng() % V);
        for (i = 1; i <= T; i++) s[i] = rng() % 10 ? (s[i - 1] * 5 + 3) % V : (int32_t)(rng() % V);
        for (i = 0; i < T; i++) buf[b * T + i] = s[i], buf[N + b * T + i] = s[i + 1];
    }
}

/* Host bytes into a tensor (overwritten whole). The source must stay until
   the stream passes the copy: the callers synchronize before changing it. */
static void upload(run* r, gm_tensor t, const void* src, size_t bytes) {
    batch b = {0};
    float* p;
    use(&b, t, OW, &p);
    if (acquire(r, &b)) fail(r, gm_memcpy_async(r->ctx, p, src, bytes, GM_COPY_HOST_TO_DEVICE, r->s), "upload");
    release(r, &b);
}

/* >>model -----------------------------------------------------------------*/
static void make_prm(run* r, prm* p, size_t n, float scale, float fill, uint64_t seed, float* host) {
    batch b = {0};
    float *m, *v, *w;
    size_t i;
    p->n = n;
    make(r, &p->w, FL(n)), make(r, &p->g, FL(n)), make(r, &p->m, FL(n)), make(r, &p->v, FL(n));
    use(&b, p->m, OW, &m), use(&b, p->v, OW, &v);
    if (scale == 0) use(&b, p->w, OW, &w);
    if (acquire(r, &b)) {
        kfill(r, m, n, 0), kfill(r, v, n, 0);
        if (scale == 0) kfill(r, w, n, fill);
    }
    release(r, &b);
    if (scale != 0) {
        rng_state = seed;
        for (i = 0; i < n; i++) host[i] = urand() * scale;
        upload(r, p->w, host, FL(n));
        fail(r, gm_stream_synchronize(r->ctx, r->s), "gm_stream_synchronize"); /* host changes next */
    }
}

static void init_model(run* r) {
    static float host[D * F > V * D ? D * F : V * D];
    const float s = 0.0346f, sres = s / sqrtf(2.0f * NL); /* uniform: std 0.02; residual projections less */
    static const size_t nb[NBP] = {D, D, (size_t)D * 3 * D, 3 * D, (size_t)D * D, D, D, D, (size_t)D * F, F, (size_t)F * D, D};
    int l, k;
    make_prm(r, &r->wte, (size_t)V * D, s, 0, 1, host);
    make_prm(r, &r->wpe, (size_t)T * D, s / 2, 0, 2, host);
    for (l = 0; l < NL; l++)
        for (k = 0; k < NBP; k++) {
            int weight = k == P_WQKV || k == P_WO || k == P_W1 || k == P_W2;
            make_prm(r, &r->bk[l].p[k], nb[k], !weight ? 0 : k == P_WO || k == P_W2 ? sres : s,
                     k == P_LN1G || k == P_LN2G ? 1.0f : 0.0f, (uint64_t)(100 + l * NBP + k), host);
        }
    make_prm(r, &r->lnfg, D, 0, 1, 0, host);
    make_prm(r, &r->lnfb, D, 0, 0, 0, host);
    make(r, &r->loss, sizeof(float));
}

static void free_model(run* r) {
    prm* all[4 + NL * NBP];
    int l, k, n = 0;
    all[n++] = &r->wte, all[n++] = &r->wpe, all[n++] = &r->lnfg, all[n++] = &r->lnfb;
    for (l = 0; l < NL; l++)
        for (k = 0; k < NBP; k++) all[n++] = &r->bk[l].p[k];
    for (k = 0; k < n; k++) drop(r, &all[k]->w), drop(r, &all[k]->g), drop(r, &all[k]->m), drop(r, &all[k]->v);
    for (l = 0; l < NL; l++) {
        block* b = &r->bk[l];
        drop(r, &b->h1), drop(r, &b->qkv), drop(r, &b->P), drop(r, &b->att);
        drop(r, &b->xmid), drop(r, &b->h2), drop(r, &b->u), drop(r, &b->a);
    }
    for (l = 0; l <= NL; l++) drop(r, &r->x[l]);
    drop(r, &r->tok), drop(r, &r->hf), drop(r, &r->logits), drop(r, &r->dlogits), drop(r, &r->loss), drop(r, &r->dx);
}

/* >>forward ---------------------------------------------------------------
   train: keep what the backward pass reads and compute the loss's
   gradient; else (evaluation) drop each layer's tensors once used. */
static void attention_forward(run* r, int l, int train) {
    block* k = &r->bk[l];
    batch b = {0};
    float *x, *g, *be, *wqkv, *bqkv, *wo, *bo, *h1, *qkv, *P, *att, *xm;
    make(r, &k->h1, FL(N * D)), make(r, &k->qkv, FL(N * 3 * D)), make(r, &k->P, FL(NB * NH * T * T));
    make(r, &k->att, FL(N * D)), make(r, &k->xmid, FL(N * D));
    use(&b, r->x[l], RD, &x), use(&b, k->p[P_LN1G].w, RD, &g), use(&b, k->p[P_LN1B].w, RD, &be);
    use(&b, k->p[P_WQKV].w, RD, &wqkv), use(&b, k->p[P_BQKV].w, RD, &bqkv);
    use(&b, k->p[P_WO].w, RD, &wo), use(&b, k->p[P_BO].w, RD, &bo);
    use(&b, k->h1, OW, &h1), use(&b, k->qkv, OW, &qkv), use(&b, k->P, OW, &P), use(&b, k->att, OW, &att);
    use(&b, k->xmid, OW, &xm);
    if (acquire(r, &b)) {
        kln(r, x, g, be, h1);
        kgemm(r, K_NN, N, 3 * D, D, h1, wqkv, qkv, 0);
        kbias(r, qkv, bqkv, NULL, N, 3 * D);
        kptrs(r, K_ATT, 0, 0, qkv, P, att, NULL, NULL);
        kgemm(r, K_NN, N, D, D, att, wo, xm, 0);
        kbias(r, xm, bo, x, N, D); /* + the residual */
    }
    release(r, &b);
    if (!train) drop(r, &r->x[l]), drop(r, &k->h1), drop(r, &k->qkv), drop(r, &k->P), drop(r, &k->att);
}

static void mlp_forward(run* r, int l, int train) {
    block* k = &r->bk[l];
    batch b = {0};
    float *xm, *g, *be, *w1, *b1, *w2, *b2, *h2, *u, *a, *y;
    make(r, &k->h2, FL(N * D)), make(r, &k->u, FL(N * F)), make(r, &k->a, FL(N * F)), make(r, &r->x[l + 1], FL(N * D));
    use(&b, k->xmid, RD, &xm), use(&b, k->p[P_LN2G].w, RD, &g), use(&b, k->p[P_LN2B].w, RD, &be);
    use(&b, k->p[P_W1].w, RD, &w1), use(&b, k->p[P_B1].w, RD, &b1);
    use(&b, k->p[P_W2].w, RD, &w2), use(&b, k->p[P_B2].w, RD, &b2);
    use(&b, k->h2, OW, &h2), use(&b, k->u, OW, &u), use(&b, k->a, OW, &a), use(&b, r->x[l + 1], OW, &y);
    if (acquire(r, &b)) {
        kln(r, xm, g, be, h2);
        kgemm(r, K_NN, N, F, D, h2, w1, u, 0);
        kbias(r, u, b1, NULL, N, F);
        kunary(r, K_GELU, a, u, (size_t)N * F);
        kgemm(r, K_NN, N, D, F, a, w2, y, 0);
        kbias(r, y, b2, xm, N, D);
    }
    release(r, &b);
    if (!train) drop(r, &k->xmid), drop(r, &k->h2), drop(r, &k->u), drop(r, &k->a);
}

/* The whole forward pass; the loss lands in r->loss_host once the stream
   is synchronized. */
static void forward(run* r, const int32_t* tokens, int train) {
    batch b = {0};
    float *wte, *wpe, *x, *g, *be, *hf, *logits, *dlogits = NULL, *loss;
    int32_t* tok;
    int l;
    make(r, &r->tok, 2 * N * sizeof(int32_t));
    upload(r, r->tok, tokens, 2 * N * sizeof(int32_t));
    make(r, &r->x[0], FL(N * D));
    use_i32(&b, r->tok, RD, &tok), use(&b, r->wte.w, RD, &wte), use(&b, r->wpe.w, RD, &wpe), use(&b, r->x[0], OW, &x);
    if (acquire(r, &b)) kptrs(r, K_EMBED, 0, 0, tok, wte, wpe, x, NULL);
    release(r, &b);
    for (l = 0; l < NL; l++) attention_forward(r, l, train), mlp_forward(r, l, train);
    make(r, &r->hf, FL(N * D)), make(r, &r->logits, FL(N * V));
    if (train) make(r, &r->dlogits, FL(N * V));
    use(&b, r->x[NL], RD, &x), use(&b, r->lnfg.w, RD, &g), use(&b, r->lnfb.w, RD, &be), use(&b, r->wte.w, RD, &wte);
    use_i32(&b, r->tok, RD, &tok);
    use(&b, r->hf, OW, &hf), use(&b, r->logits, OW, &logits), use(&b, r->loss, OW, &loss);
    if (train) use(&b, r->dlogits, OW, &dlogits);
    if (acquire(r, &b)) {
        kln(r, x, g, be, hf);
        kgemm(r, K_NT, N, V, D, hf, wte, logits, 0); /* the tied output projection: hf wte^T */
        kptrs(r, K_XENT, 0, 0, logits, tok + N, dlogits, loss, NULL);
        fail(r, gm_memcpy_async(r->ctx, &r->loss_host, loss, sizeof(float), GM_COPY_DEVICE_TO_HOST, r->s), "loss");
    }
    release(r, &b);
    drop(r, &r->logits);
    if (!train) drop(r, &r->x[NL]), drop(r, &r->hf), drop(r, &r->tok);
}

/* >>backward --------------------------------------------------------------
   Layer by layer, from the loss down, each layer's Adam step right after
   its gradients are complete (the tied embedding's after the embedding's
   backward). */
static void adam(run* r, prm* const* ps, int n, int step) {
    batch b = {0};
    float *w[NBP], *g[NBP], *m[NBP], *v[NBP];
    int k;
    for (k = 0; k < n; k++) {
        use(&b, ps[k]->w, RW, &w[k]), use(&b, ps[k]->g, RL, &g[k]); /* consumed: overwritten next step */
        use(&b, ps[k]->m, RW, &m[k]), use(&b, ps[k]->v, RW, &v[k]);
    }
    if (acquire(r, &b))
        for (k = 0; k < n; k++) {
            karg a = kop(K_ADAM, 0, 0, 0, 0);
            a.p[0] = w[k], a.p[1] = g[k], a.p[2] = m[k], a.p[3] = v[k];
            a.len = ps[k]->n, a.f = LR, a.step = step + 1;
            launch(r, a);
        }
    release(r, &b);
}

static void adam_block(run* r, block* k, int first, int step) {
    prm* ps[NBP / 2];
    int i;
    for (i = 0; i < NBP / 2; i++) ps[i] = &k->p[first + i];
    adam(r, ps, NBP / 2, step);
}

/* The old style's zeroing pass (optimizer.zero_grad()), a batch per block. */
static void zero_grads(run* r) {
    batch b = {0};
    float* g[NBP];
    prm* top[4];
    int l, k;
    top[0] = &r->wte, top[1] = &r->wpe, top[2] = &r->lnfg, top[3] = &r->lnfb;
    for (k = 0; k < 4; k++) use(&b, top[k]->g, OW, &g[k]);
    if (acquire(r, &b))
        for (k = 0; k < 4; k++) kfill(r, g[k], top[k]->n, 0);
    release(r, &b);
    for (l = 0; l < NL; l++) {
        for (k = 0; k < NBP; k++) use(&b, r->bk[l].p[k].g, OW, &g[k]);
        if (acquire(r, &b))
            for (k = 0; k < NBP; k++) kfill(r, g[k], r->bk[l].p[k].n, 0);
        release(r, &b);
    }
}

static void head_backward(run* r, int step) {
    batch b = {0};
    gm_tensor dhf = {0, 0}, dx = {0, 0};
    float *dlogits, *hf, *wte, *x, *g, *dwte, *dg, *db, *dh, *dxp;
    prm* ps[2];
    gm_access ga = first_grad(r);
    int acc = first_acc(r);
    make(r, &dhf, FL(N * D)), make(r, &dx, FL(N * D));
    use(&b, r->dlogits, RD, &dlogits), use(&b, r->hf, RD, &hf), use(&b, r->wte.w, RD, &wte);
    use(&b, r->x[NL], RD, &x), use(&b, r->lnfg.w, RD, &g);
    use(&b, r->wte.g, ga, &dwte), use(&b, r->lnfg.g, ga, &dg), use(&b, r->lnfb.g, ga, &db);
    use(&b, dhf, OW, &dh), use(&b, dx, OW, &dxp);
    if (acquire(r, &b)) {
        kgemm(r, K_TN, V, D, N, dlogits, hf, dwte, acc); /* the embedding's first contribution */
        kgemm(r, K_NN, N, D, V, dlogits, wte, dh, 0);
        kln_back(r, dh, x, g, NULL, dxp, dg, db, acc);
    }
    release(r, &b);
    drop(r, &dhf), drop(r, &r->dlogits), drop(r, &r->hf), drop(r, &r->x[NL]);
    r->dx = dx;
    ps[0] = &r->lnfg, ps[1] = &r->lnfb;
    adam(r, ps, 2, step);
}

static void mlp_backward(run* r, int l, int step) {
    block* k = &r->bk[l];
    batch b = {0};
    gm_tensor da = {0, 0}, dh2 = {0, 0}, dxm = {0, 0};
    float *dy, *a, *u, *h2, *xm, *w2, *w1, *g, *dw2, *db2, *dw1, *db1, *dg, *db, *dap, *dhp, *dxp;
    gm_access ga = first_grad(r);
    int acc = first_acc(r);
    make(r, &da, FL(N * F)), make(r, &dh2, FL(N * D)), make(r, &dxm, FL(N * D));
    use(&b, r->dx, RD, &dy), use(&b, k->a, RD, &a), use(&b, k->u, RD, &u), use(&b, k->h2, RD, &h2);
    use(&b, k->xmid, RD, &xm), use(&b, k->p[P_W2].w, RD, &w2), use(&b, k->p[P_W1].w, RD, &w1);
    use(&b, k->p[P_LN2G].w, RD, &g);
    use(&b, k->p[P_W2].g, ga, &dw2), use(&b, k->p[P_B2].g, ga, &db2), use(&b, k->p[P_W1].g, ga, &dw1);
    use(&b, k->p[P_B1].g, ga, &db1), use(&b, k->p[P_LN2G].g, ga, &dg), use(&b, k->p[P_LN2B].g, ga, &db);
    use(&b, da, OW, &dap), use(&b, dh2, OW, &dhp), use(&b, dxm, OW, &dxp);
    if (acquire(r, &b)) {
        kgemm(r, K_TN, F, D, N, a, dy, dw2, acc);
        kcolsum(r, dy, db2, N, D, acc);
        kgemm(r, K_NT, N, F, D, dy, w2, dap, 0);
        kunary(r, K_GELU_BACK, dap, u, (size_t)N * F);
        kgemm(r, K_TN, D, F, N, h2, dap, dw1, acc);
        kcolsum(r, dap, db1, N, F, acc);
        kgemm(r, K_NT, N, D, F, dap, w1, dhp, 0);
        kln_back(r, dhp, xm, g, dy, dxp, dg, db, acc); /* + the residual's gradient */
    }
    release(r, &b);
    drop(r, &da), drop(r, &dh2), drop(r, &r->dx);
    drop(r, &k->a), drop(r, &k->u), drop(r, &k->h2), drop(r, &k->xmid), drop(r, &r->x[l + 1]);
    r->dx = dxm;
    adam_block(r, k, P_LN2G, step);
}

static void attention_backward(run* r, int l, int step) {
    block* k = &r->bk[l];
    batch b = {0};
    gm_tensor datt = {0, 0}, dS = {0, 0}, dqkv = {0, 0}, dh1 = {0, 0}, dx = {0, 0};
    float *dy, *att, *P, *qkv, *h1, *x, *wo, *wqkv, *g, *dwo, *dbo, *dwqkv, *dbqkv, *dg, *db;
    float *datp, *dSp, *dqp, *dhp, *dxp;
    gm_access ga = first_grad(r);
    int acc = first_acc(r);
    make(r, &datt, FL(N * D)), make(r, &dS, FL(NB * NH * T * T)), make(r, &dqkv, FL(N * 3 * D));
    make(r, &dh1, FL(N * D)), make(r, &dx, FL(N * D));
    use(&b, r->dx, RD, &dy), use(&b, k->att, RD, &att), use(&b, k->P, RD, &P), use(&b, k->qkv, RD, &qkv);
    use(&b, k->h1, RD, &h1), use(&b, r->x[l], RD, &x), use(&b, k->p[P_WO].w, RD, &wo);
    use(&b, k->p[P_WQKV].w, RD, &wqkv), use(&b, k->p[P_LN1G].w, RD, &g);
    use(&b, k->p[P_WO].g, ga, &dwo), use(&b, k->p[P_BO].g, ga, &dbo), use(&b, k->p[P_WQKV].g, ga, &dwqkv);
    use(&b, k->p[P_BQKV].g, ga, &dbqkv), use(&b, k->p[P_LN1G].g, ga, &dg), use(&b, k->p[P_LN1B].g, ga, &db);
    use(&b, datt, OW, &datp), use(&b, dS, OW, &dSp), use(&b, dqkv, OW, &dqp), use(&b, dh1, OW, &dhp);
    use(&b, dx, OW, &dxp);
    if (acquire(r, &b)) {
        kgemm(r, K_TN, D, D, N, att, dy, dwo, acc);
        kcolsum(r, dy, dbo, N, D, acc);
        kgemm(r, K_NT, N, D, D, dy, wo, datp, 0);
        kptrs(r, K_ATT_BACK, 0, 0, qkv, P, datp, dSp, dqp);
        kgemm(r, K_TN, D, 3 * D, N, h1, dqp, dwqkv, acc);
        kcolsum(r, dqp, dbqkv, N, 3 * D, acc);
        kgemm(r, K_NT, N, D, 3 * D, dqp, wqkv, dhp, 0);
        kln_back(r, dhp, x, g, dy, dxp, dg, db, acc);
    }
    release(r, &b);
    drop(r, &datt), drop(r, &dS), drop(r, &dqkv), drop(r, &dh1), drop(r, &r->dx);
    drop(r, &k->att), drop(r, &k->P), drop(r, &k->qkv), drop(r, &k->h1), drop(r, &r->x[l]);
    r->dx = dx;
    adam_block(r, k, P_LN1G, step);
}

static void embedding_backward(run* r, int step) {
    batch b = {0};
    float *dy, *dwte, *dwpe;
    int32_t* tok;
    prm* ps[2];
    use(&b, r->dx, RD, &dy), use_i32(&b, r->tok, RD, &tok);
    use(&b, r->wte.g, RW, &dwte), use(&b, r->wpe.g, first_grad(r), &dwpe); /* wte's second contribution: accumulated */
    if (acquire(r, &b)) kptrs(r, K_EMBED_BACK, 1, first_acc(r), dy, tok, dwte, dwpe, NULL);
    release(r, &b);
    drop(r, &r->dx), drop(r, &r->tok);
    ps[0] = &r->wte, ps[1] = &r->wpe;
    adam(r, ps, 2, step);
}

/* >>train -----------------------------------------------------------------*/
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void train_step(run* r, int step) {
    int l;
    if (r->style != MODES) zero_grads(r);
    make_tokens(train_tok, (uint64_t)step + 1);
    forward(r, train_tok, 1);
    head_backward(r, step);
    for (l = NL - 1; l >= 0; l--) mlp_backward(r, l, step), attention_backward(r, l, step);
    embedding_backward(r, step);
    fail(r, gm_stream_synchronize(r->ctx, r->s), "gm_stream_synchronize");
    r->losses[step] = r->loss_host;
    fail(r, gm_tier_step(r->ctx), "gm_tier_step");
}

/* Forward only, on the held-out batch. Its acquires follow another order
   than a training step's, so it is a phase of its own, with its own
   learned plan, and the training step's plan stays as it was (each
   gm_tier_set_phase ends the step of the phase it leaves). The phases are
   named from the context's start: steps taken before the first
   gm_tier_set_phase are matched to plans by how they begin, and those
   plans keep the numbers the matching gave them (the training plan would
   be phase 1 here). */
static void evaluate(run* r, int k) {
    fail(r, gm_tier_set_phase(r->ctx, PHASE_EVAL), "gm_tier_set_phase");
    forward(r, eval_tok, 0);
    fail(r, gm_stream_synchronize(r->ctx, r->s), "gm_stream_synchronize");
    r->evals[k] = r->loss_host;
    fail(r, gm_tier_set_phase(r->ctx, PHASE_TRAIN), "gm_tier_set_phase");
}

typedef struct outcome {
    int ok, oom;           /* oom: the budget could not hold a layer's working set */
    size_t ws;
    double median_ms;
    double moved_per_step; /* bytes over the training loop, evaluation included, per training step */
    double to_dev, to_host, disk;
    int64_t peak_dev, hits, misses, wasted;
} outcome;

static int cmp_d(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* The median over the steps of ms[k], or of ms[k] / over[k]. */
static double median(const double* ms, const double* over) {
    double v[STEPS];
    int k;
    for (k = 0; k < STEPS; k++) v[k] = over ? ms[k] / over[k] : ms[k];
    qsort(v, STEPS, sizeof(double), cmp_d);
    return v[STEPS / 2];
}

/* A run in three parts, so that several can take their steps in turn. */
static void start(run* r, int style, size_t budget) {
    gm_desc d;
    memset(r, 0, sizeof *r);
    memset(&d, 0, sizeof d);
    r->style = style;
    d.backend = GM_BACKEND_SIM;
    d.ignore_env = 1;
    d.device_budget = budget;
    d.host_budget = (size_t)256 << 20; /* the whole model fits in the pinned host tier: no disk tier needed */
    d.log_fn = gm_log_stderr;
    fail(r, gm_setup(&r->ctx, &d), "gm_setup");
    if (r->err) return;
    fail(r, gm_stream_create(r->ctx, &r->s), "gm_stream_create");
    fail(r, gm_tier_set_policy(r->ctx, GM_EVICT_LEARNED, PREFETCH_AHEAD, NULL, NULL), "gm_tier_set_policy");
    fail(r, gm_tier_set_phase(r->ctx, PHASE_INIT), "gm_tier_set_phase"); /* named from the start (see evaluate) */
    init_model(r);
    fail(r, gm_stream_synchronize(r->ctx, r->s), "gm_stream_synchronize");
    fail(r, gm_tier_set_phase(r->ctx, PHASE_TRAIN), "gm_tier_set_phase");
    gm_tier_reset_peaks(r->ctx);
    gm_tier_get_stats(r->ctx, &r->t0);
}

/* Training step k, timed from its first call to its stream's synchronize,
   then the evaluation when one is due. The device is idle when it returns
   (a copy still under way would land in the next run's step). */
static void step(run* r, int k) {
    double s0 = now_ms();
    if (r->err) return;
    train_step(r, k);
    r->step_ms[k] = now_ms() - s0;
    if ((k + 1) % EVAL_EVERY == 0) evaluate(r, k / EVAL_EVERY);
    fail(r, gm_device_synchronize(r->ctx), "gm_device_synchronize");
}

static outcome finish(run* r) {
    outcome o;
    gm_tier_stats t1;
    memset(&o, 0, sizeof o);
    if (!r->ctx) return o;
    o.ok = !r->err;
    o.oom = r->err == GM_ERR_OUT_OF_MEMORY;
    o.ws = r->ws;
    if (r->err && !o.oom) fprintf(stderr, "train_gpt: %s failed: %s\n", r->what, gm_result_string(r->err));
    gm_device_synchronize(r->ctx);
    gm_tier_get_stats(r->ctx, &t1);
    o.to_dev = (double)(t1.bytes_to_device - r->t0.bytes_to_device) / STEPS;
    o.to_host = (double)(t1.bytes_to_host - r->t0.bytes_to_host) / STEPS;
    o.disk = (double)(t1.bytes_to_disk - r->t0.bytes_to_disk + t1.bytes_from_disk - r->t0.bytes_from_disk) / STEPS;
    o.moved_per_step = o.to_dev + o.to_host + o.disk;
    o.peak_dev = t1.peak_device_bytes;
    o.hits = t1.prefetch_hits - r->t0.prefetch_hits;
    o.misses = t1.prefetch_misses - r->t0.prefetch_misses;
    o.wasted = t1.prefetch_wasted - r->t0.prefetch_wasted;
    o.median_ms = median(r->step_ms, NULL);
    if (gm_check(r->ctx) != 0) o.ok = 0;
    free_model(r);
    gm_stream_destroy(r->ctx, r->s);
    gm_shutdown(r->ctx);
    r->ctx = NULL;
    return o;
}

/* >>main ------------------------------------------------------------------*/
static run runs[2 + NSTYLES * MAXFRAC];

int main(int argc, char** argv) {
    outcome out[2 + NSTYLES * MAXFRAC];
    const double* base;
    double frac[MAXFRAC], t_start = now_ms();
    int nfrac = 0, nruns, i, k, all_same = 1;
    size_t params = 0;
    for (i = 1; i < argc; i++) {
        char* end;
        double f = strtod(argv[i], &end);
        if (*end || !(f > 0 && f <= 1) || nfrac == MAXFRAC) {
            fprintf(stderr, "usage: train_gpt [FRACTION ...]   (up to %d, each in (0, 1]; default 0.5 0.25)\n", MAXFRAC);
            return 2;
        }
        frac[nfrac++] = f;
    }
    if (!nfrac) frac[0] = 0.5, frac[1] = 0.25, nfrac = 2;
    nruns = 2 + NSTYLES * nfrac; /* the reference, the budgeted runs, the reference again (timing) */
    params = (size_t)V * D + (size_t)T * D + 2 * D +
             NL * (4 * (size_t)D + (size_t)D * 3 * D + 3 * D + (size_t)D * D + D + 2 * (size_t)D * F + F + D);
    make_tokens(eval_tok, 1000003);

    printf("train_gpt: %d blocks, width %d, %d heads, MLP %d (GELU), sequence %d, batch %d, vocabulary %d (tied output)\n",
           NL, D, NH, F, T, NB, V);
    printf("%zu parameters; Adam (lr %g), %d steps, evaluation every %d; parameters, gradients, both moments\n"
           "and activations are gpumem tensors; backend sim (C kernels as stream work); learned order, prefetch %d\n\n",
           params, (double)LR, STEPS, EVAL_EVERY, PREFETCH_AHEAD);
    fflush(stdout);

    /* The reference alone first: its peak sets the budgets. Then the
       budgeted runs and the reference again take their steps in turn, so
       that whatever else loads the machine falls on all of them alike. */
    start(&runs[0], MODES, 0);
    for (k = 0; k < STEPS; k++) step(&runs[0], k);
    out[0] = finish(&runs[0]);
    if (!out[0].ok) return 1;
    printf("reference: %.1f MiB of tensors on the device at the peak, %.1f s\n", (double)out[0].peak_dev / MiB,
           (now_ms() - t_start) / 1e3);
    printf("now the reference again and every budgeted run, a step of each in turn ...\n");
    fflush(stdout);
    for (i = 1; i < nruns; i++)
        start(&runs[i], i == nruns - 1 ? MODES : (i - 1) % NSTYLES,
              i == nruns - 1 ? 0 : (size_t)((double)out[0].peak_dev * frac[(i - 1) / NSTYLES]));
    for (k = 0; k < STEPS; k++)
        for (i = 1; i < nruns; i++) step(&runs[i], k);
    for (i = 1; i < nruns; i++) out[i] = finish(&runs[i]);
    for (i = 1; i < nruns; i++) { /* a budget too small for a layer: one line, and no tables */
        double f = frac[(i - 1) / NSTYLES];
        if (!out[i].ok && out[i].oom) {
            printf("train_gpt: a budget of %.1f MiB (%.0f%% of the reference's peak) is below the working set one "
                   "layer needs (%.1f MiB, %.0f%%): stopping\n",
                   f * (double)out[0].peak_dev / MiB, 100 * f, (double)out[0].ws / MiB,
                   100.0 * (double)out[0].ws / (double)out[0].peak_dev);
            return 1;
        }
        if (!out[i].ok) return 1;
    }
    printf("\nloss by step (training; evaluation on the held-out batch after every %d):\n", EVAL_EVERY);
    for (k = 0; k < STEPS; k++) {
        printf("  step %2d  %.6f", k + 1, (double)runs[0].losses[k]);
        if ((k + 1) % EVAL_EVERY == 0) printf("   eval %.6f", (double)runs[0].evals[k / EVAL_EVERY]);
        printf("\n");
    }

    printf("\n%-13s %7s %7s %7s %6s %9s %7s %7s %6s %6s %6s  %s\n", "run", "budget", "peak", "step ms", "x ref",
           "moved/st", "to dev", "to host", "hits", "misses", "wasted", "losses");
    base = runs[nruns - 1].step_ms; /* the reference's second run: its steps took turns with the budgeted runs' */
    for (k = 0; k < nruns; k++) {
        int same = out[k].ok && memcmp(runs[k].losses, runs[0].losses, sizeof runs[0].losses) == 0 &&
                   memcmp(runs[k].evals, runs[0].evals, sizeof runs[0].evals) == 0;
        if (!same) all_same = 0;
    }
    for (k = 0; k < nruns - 1; k++) {
        int n = k ? k : nruns - 1, same = out[n].ok && memcmp(runs[n].losses, runs[0].losses, sizeof runs[0].losses) == 0 &&
                                          memcmp(runs[n].evals, runs[0].evals, sizeof runs[0].evals) == 0;
        double f = k ? frac[(k - 1) / NSTYLES] : 0;
        char name[40];
        if (k) snprintf(name, sizeof name, "%.0f%% %s", 100 * f, style_name[(k - 1) % NSTYLES]);
        else snprintf(name, sizeof name, "no budget");
        printf("%-13s %7.1f %7.1f %7.1f %6.2f %9.1f %7.1f %7.1f %6lld %6lld %6lld  %s\n", name,
               f * (double)out[0].peak_dev / MiB, (double)out[n].peak_dev / MiB, out[n].median_ms,
               median(runs[n].step_ms, base), out[n].moved_per_step / MiB, out[n].to_dev / MiB,
               out[n].to_host / MiB, (long long)out[n].hits, (long long)out[n].misses, (long long)out[n].wasted,
               !out[n].ok ? "FAILED" : same ? "identical" : "DIFFER");
    }
    printf("(MiB: budget, peak device tensor bytes, and moved/st = to dev + to host + disk per training step,\n"
           "evaluation included; step ms: median training step; x ref: the median over the steps of the step's\n"
           "time over the unbudgeted run's same step (the runs take turns, step by step); hits, misses,\n"
           "wasted: prefetches over the run; losses: training and evaluation against the first reference run)\n");
    for (i = 0; i < nfrac; i++) {
        const outcome *m = &out[1 + NSTYLES * i + MODES], *o = &out[1 + NSTYLES * i + OLD];
        if (m->ok && o->ok && o->moved_per_step > 0)
            printf("budget %.0f%%: the access modes move %.2fx the bytes of the old style per step, step time %.2fx\n",
                   100 * frac[i], m->moved_per_step / o->moved_per_step,
                   median(runs[1 + NSTYLES * i + MODES].step_ms, runs[1 + NSTYLES * i + OLD].step_ms));
    }
    printf("total %.1f s\n", (now_ms() - t_start) / 1e3);
    if (!all_same) printf("FAILED: a run's losses differ from the reference's\n");
    return all_same ? 0 : 1;
}
