/* gpt_kernels.h -- the kernels train_gpt runs, in plain C: the sim backend
   runs them as stream work (there is no CUDA version; a CUDA build of
   train_gpt runs on sim). Matrices are row-major: element (i, j) of an
   m x n matrix is at [i * n + j]; a batch of activations is tokens x
   features. Every loop sums in a fixed order and nothing depends on where
   a tensor lives, so a run gives the same numbers bit for bit under any
   budget. `acc` non-zero: add into the output, else overwrite it (the
   output is then written completely, every byte). No output overlaps an
   input (the pointers are restrict). */
#ifndef GM_GPT_KERNELS_H
#define GM_GPT_KERNELS_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define GPT_IX(i, j, n) ((ptrdiff_t)(i) * (ptrdiff_t)(n) + (ptrdiff_t)(j))

/* c[0..n) += a b[0..n), eight lanes at a time: gcc -O2 vectorizes a loop
   only when it needs neither an overlap check nor a remainder, and a
   fixed eight needs neither (the matrix products run 3x faster so). */
static inline void gpt_axpy(float* restrict c, const float* restrict b, float a, int n) {
    int j = 0, l;
    for (; j + 8 <= n; j += 8)
        for (l = 0; l < 8; l++) c[j + l] += a * b[j + l];
    for (; j < n; j++) c[j] += a * b[j];
}

/* C (m x n) = A (m x k) B (k x n): rows of C are sums of rows of B. */
static inline void gpt_gemm_nn(int m, int n, int k, const float* restrict A, const float* restrict B,
                               float* restrict C, int acc) {
    int i, j, p;
    for (i = 0; i < m; i++) {
        float* c = C + GPT_IX(i, 0, n);
        if (!acc)
            for (j = 0; j < n; j++) c[j] = 0;
        for (p = 0; p < k; p++) gpt_axpy(c, B + GPT_IX(p, 0, n), A[GPT_IX(i, p, k)], n);
    }
}

/* C (m x n) = A (m x k) B^T, B being n x k: dot products of rows, each in
   eight fixed lanes. */
static inline void gpt_gemm_nt(int m, int n, int k, const float* restrict A, const float* restrict B,
                               float* restrict C, int acc) {
    int i, j, p, l;
    for (i = 0; i < m; i++) {
        const float* a = A + GPT_IX(i, 0, k);
        for (j = 0; j < n; j++) {
            const float* b = B + GPT_IX(j, 0, k);
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, t;
            for (p = 0; p + 8 <= k; p += 8)
                for (l = 0; l < 8; l++) s[l] += a[p + l] * b[p + l];
            t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
            for (; p < k; p++) t += a[p] * b[p];
            C[GPT_IX(i, j, n)] = acc ? C[GPT_IX(i, j, n)] + t : t;
        }
    }
}

/* C (m x n) = A^T B, A being k x m and B k x n (a weight's gradient:
   inputs^T output gradients), summed over the k rows in order. */
static inline void gpt_gemm_tn(int m, int n, int k, const float* restrict A, const float* restrict B,
                               float* restrict C, int acc) {
    int i, j, p;
    if (!acc)
        for (i = 0; i < m; i++)
            for (j = 0; j < n; j++) C[GPT_IX(i, j, n)] = 0;
    for (p = 0; p < k; p++)
        for (i = 0; i < m; i++) gpt_axpy(C + GPT_IX(i, 0, n), B + GPT_IX(p, 0, n), A[GPT_IX(p, i, m)], n);
}

/* y (rows x cols) += b on every row, then + res (same shape) if res. */
static inline void gpt_bias_res(float* restrict y, const float* restrict b, const float* restrict res, int rows,
                                int cols) {
    int i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) {
            float v = y[GPT_IX(i, j, cols)] + b[j];
            y[GPT_IX(i, j, cols)] = res ? v + res[GPT_IX(i, j, cols)] : v;
        }
}

/* db (cols) = the sum of dy's rows (a bias's gradient). */
static inline void gpt_colsum(const float* restrict dy, float* restrict db, int rows, int cols, int acc) {
    int i, j;
    if (!acc)
        for (j = 0; j < cols; j++) db[j] = 0;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) db[j] += dy[GPT_IX(i, j, cols)];
}

/* Layer normalization of each row: y = (x - mean) / sqrt(var + eps) g + b. */
#define GPT_LN_EPS 1e-5
static inline void gpt_ln_stats(const float* x, int cols, float* mean, float* rstd) {
    double s = 0, v = 0;
    int j;
    for (j = 0; j < cols; j++) s += x[j];
    s /= cols;
    for (j = 0; j < cols; j++) v += ((double)x[j] - s) * ((double)x[j] - s);
    *mean = (float)s;
    *rstd = (float)(1.0 / sqrt(v / cols + GPT_LN_EPS));
}

static inline void gpt_layernorm(const float* restrict x, const float* restrict g, const float* restrict b,
                                 float* restrict y, int rows, int cols) {
    int i, j;
    for (i = 0; i < rows; i++) {
        const float* xr = x + GPT_IX(i, 0, cols);
        float mean, rstd;
        gpt_ln_stats(xr, cols, &mean, &rstd);
        for (j = 0; j < cols; j++) y[GPT_IX(i, j, cols)] = (xr[j] - mean) * rstd * g[j] + b[j];
    }
}

/* The backward of gpt_layernorm (statistics recomputed from x): dx = res +
   the gradient through the normalization (res may be NULL; dx is written
   completely), dg and db the gains' and biases' gradients. */
static inline void gpt_layernorm_back(const float* restrict dy, const float* restrict x, const float* restrict g,
                                      const float* restrict res, float* restrict dx, float* restrict dg,
                                      float* restrict db, int rows, int cols, int acc) {
    int i, j;
    if (!acc)
        for (j = 0; j < cols; j++) dg[j] = db[j] = 0;
    for (i = 0; i < rows; i++) {
        const float *xr = x + GPT_IX(i, 0, cols), *dyr = dy + GPT_IX(i, 0, cols);
        float mean, rstd, m1 = 0, m2 = 0;
        gpt_ln_stats(xr, cols, &mean, &rstd);
        for (j = 0; j < cols; j++) {
            float xh = (xr[j] - mean) * rstd, dxh = dyr[j] * g[j];
            m1 += dxh;
            m2 += dxh * xh;
            dg[j] += dyr[j] * xh;
            db[j] += dyr[j];
        }
        m1 /= (float)cols, m2 /= (float)cols;
        for (j = 0; j < cols; j++) {
            float xh = (xr[j] - mean) * rstd, v = rstd * (dyr[j] * g[j] - m1 - xh * m2);
            dx[GPT_IX(i, j, cols)] = res ? res[GPT_IX(i, j, cols)] + v : v;
        }
    }
}

/* GELU, tanh approximation: a = gelu(u); its backward multiplies d by
   gelu'(u) in place. */
#define GPT_GELU_C 0.7978845608f /* sqrt(2 / pi) */
static inline void gpt_gelu(float* restrict a, const float* restrict u, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        float x = u[i];
        a[i] = 0.5f * x * (1.0f + tanhf(GPT_GELU_C * (x + 0.044715f * x * x * x)));
    }
}

static inline void gpt_gelu_back(float* restrict d, const float* restrict u, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        float x = u[i], t = tanhf(GPT_GELU_C * (x + 0.044715f * x * x * x));
        float dt = (1.0f - t * t) * GPT_GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] *= 0.5f * (1.0f + t) + 0.5f * x * dt;
    }
}

/* Causal self-attention over qkv (tokens x 3d: q, then k, then v, each d
   wide, head h in columns [h * hd, (h + 1) * hd)), for nb sequences of t
   tokens: P (nb x nh x t x t) the attention weights, zero above the
   diagonal, and att (tokens x d) the heads' outputs side by side. */
static inline void gpt_attention(const float* restrict qkv, float* restrict P, float* restrict att, int nb, int t, int d,
                                 int nh) {
    int hd = d / nh, b, h, i, j, c;
    float scale = 1.0f / sqrtf((float)hd);
    for (b = 0; b < nb; b++)
        for (h = 0; h < nh; h++) {
            float* Pbh = P + ((ptrdiff_t)b * nh + h) * t * t;
            for (i = 0; i < t; i++) {
                const float* q = qkv + GPT_IX(b * t + i, h * hd, 3 * d);
                float* pr = Pbh + (ptrdiff_t)i * t;
                float* o = att + GPT_IX(b * t + i, h * hd, d);
                float mx = -INFINITY, sum = 0;
                for (j = 0; j <= i; j++) {
                    const float* k = qkv + GPT_IX(b * t + j, d + h * hd, 3 * d);
                    float s = 0;
                    for (c = 0; c < hd; c++) s += q[c] * k[c];
                    pr[j] = s * scale;
                    if (pr[j] > mx) mx = pr[j];
                }
                for (j = 0; j <= i; j++) sum += pr[j] = expf(pr[j] - mx);
                for (j = 0; j <= i; j++) pr[j] /= sum;
                for (j = i + 1; j < t; j++) pr[j] = 0;
                for (c = 0; c < hd; c++) o[c] = 0;
                for (j = 0; j <= i; j++) {
                    const float* v = qkv + GPT_IX(b * t + j, 2 * d + h * hd, 3 * d);
                    for (c = 0; c < hd; c++) o[c] += pr[j] * v[c];
                }
            }
        }
}

/* Its backward: from datt, dS (like P: the scores' gradient, scaled) and
   dqkv, both written completely. */
static inline void gpt_attention_back(const float* restrict qkv, const float* restrict P, const float* restrict datt,
                                      float* restrict dS, float* restrict dqkv, int nb, int t, int d, int nh) {
    int hd = d / nh, b, h, i, j, c;
    float scale = 1.0f / sqrtf((float)hd);
    for (i = 0; i < nb * t; i++)
        for (c = 0; c < 3 * d; c++) dqkv[GPT_IX(i, c, 3 * d)] = 0;
    for (b = 0; b < nb; b++)
        for (h = 0; h < nh; h++) {
            const float* Pbh = P + ((ptrdiff_t)b * nh + h) * t * t;
            float* dSbh = dS + ((ptrdiff_t)b * nh + h) * t * t;
            for (i = 0; i < t; i++) {
                const float* pr = Pbh + (ptrdiff_t)i * t;
                const float* dor = datt + GPT_IX(b * t + i, h * hd, d);
                float* ds = dSbh + (ptrdiff_t)i * t;
                float dot = 0;
                for (j = 0; j <= i; j++) { /* dP, and V's gradient */
                    const float* v = qkv + GPT_IX(b * t + j, 2 * d + h * hd, 3 * d);
                    float* dv = dqkv + GPT_IX(b * t + j, 2 * d + h * hd, 3 * d);
                    float s = 0;
                    for (c = 0; c < hd; c++) {
                        s += dor[c] * v[c];
                        dv[c] += pr[j] * dor[c];
                    }
                    ds[j] = s;
                    dot += pr[j] * s;
                }
                for (j = 0; j <= i; j++) ds[j] = pr[j] * (ds[j] - dot) * scale;
                for (j = i + 1; j < t; j++) ds[j] = 0;
            }
            for (i = 0; i < t; i++) { /* Q's and K's gradients */
                const float* ds = dSbh + (ptrdiff_t)i * t;
                const float* q = qkv + GPT_IX(b * t + i, h * hd, 3 * d);
                float* dq = dqkv + GPT_IX(b * t + i, h * hd, 3 * d);
                for (j = 0; j <= i; j++) {
                    const float* k = qkv + GPT_IX(b * t + j, d + h * hd, 3 * d);
                    float* dk = dqkv + GPT_IX(b * t + j, d + h * hd, 3 * d);
                    for (c = 0; c < hd; c++) {
                        dq[c] += ds[j] * k[c];
                        dk[c] += ds[j] * q[c];
                    }
                }
            }
        }
}

/* x (tokens x d) = wte[tok] + wpe[position]; tokens are nb sequences of t. */
static inline void gpt_embed(const int32_t* tok, const float* wte, const float* wpe, float* x, int nb, int t, int d) {
    int i, c;
    for (i = 0; i < nb * t; i++)
        for (c = 0; c < d; c++) x[GPT_IX(i, c, d)] = wte[GPT_IX(tok[i], c, d)] + wpe[GPT_IX(i % t, c, d)];
}

/* Its backward: dwpe (written or accumulated, acc_pe) and dwte (token rows
   accumulated in token order; acc_te 0 zeroes the v x d table first). */
static inline void gpt_embed_back(const float* dx, const int32_t* tok, float* dwte, float* dwpe, int nb, int t, int d,
                                  int v, int acc_te, int acc_pe) {
    int i, c;
    if (!acc_te)
        for (i = 0; i < v * d; i++) dwte[i] = 0;
    if (!acc_pe)
        for (i = 0; i < t * d; i++) dwpe[i] = 0;
    for (i = 0; i < nb * t; i++)
        for (c = 0; c < d; c++) {
            dwte[GPT_IX(tok[i], c, d)] += dx[GPT_IX(i, c, d)];
            dwpe[GPT_IX(i % t, c, d)] += dx[GPT_IX(i, c, d)];
        }
}

/* Softmax cross-entropy of logits (n x v) against targets: the mean loss
   into loss[0], and, if dlogits, its gradient (written completely). */
static inline void gpt_xent(const float* logits, const int32_t* target, float* dlogits, float* loss, int n, int v) {
    double total = 0;
    int i, j;
    for (i = 0; i < n; i++) {
        const float* lr = logits + GPT_IX(i, 0, v);
        float mx = lr[0];
        double sum = 0;
        for (j = 1; j < v; j++)
            if (lr[j] > mx) mx = lr[j];
        for (j = 0; j < v; j++) sum += exp((double)(lr[j] - mx));
        total -= (double)(lr[target[i]] - mx) - log(sum);
        if (dlogits)
            for (j = 0; j < v; j++)
                dlogits[GPT_IX(i, j, v)] = (float)((exp((double)(lr[j] - mx)) / sum - (j == target[i])) / n);
    }
    loss[0] = (float)(total / n);
}

/* One Adam step (t counts from 1) over n parameters. */
static inline void gpt_adam(float* restrict p, const float* restrict g, float* restrict m, float* restrict v, size_t n,
                            float lr, int t) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    size_t i;
    for (i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

static inline void gpt_fill(float* p, size_t n, float value) {
    size_t i;
    for (i = 0; i < n; i++) p[i] = value;
}
#endif
