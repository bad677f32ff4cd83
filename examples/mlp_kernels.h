/* mlp_kernels.h -- the kernels train_mlp runs, in plain C (the sim backend
   runs them as stream work) and declared for CUDA (mlp_kernels.cu; the
   matrix products go to cuBLAS there). Matrices are column-major, as in
   BLAS: element (i, j) of an m x n matrix with leading dimension ld is at
   [i + j * ld]. Every loop sums in a fixed order, so a run gives the same
   numbers bit for bit wherever its tensors lived. */
#ifndef GM_MLP_KERNELS_H
#define GM_MLP_KERNELS_H
#include <math.h>
#include <stddef.h>

/* element (i, j) of a column-major matrix with leading dimension ld */
#define MLP_IX(i, j, ld) ((ptrdiff_t)(i) + (ptrdiff_t)(j) * (ptrdiff_t)(ld))

/* C = alpha op(A) op(B) + beta C; op(A) is m x k, op(B) k x n. */
static inline void mlp_gemm(int ta, int tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
                            int ldb, float beta, float* C, int ldc) {
    int i, j, p;
    for (j = 0; j < n; j++) {
        float* c = C + (ptrdiff_t)j * ldc;
        for (i = 0; i < m; i++) c[i] = beta == 0 ? 0 : beta * c[i];
        if (!ta) { /* a column of C is a sum of columns of A */
            for (p = 0; p < k; p++) {
                float b = alpha * (tb ? B[MLP_IX(j, p, ldb)] : B[MLP_IX(p, j, ldb)]);
                const float* a = A + (ptrdiff_t)p * lda;
                for (i = 0; i < m; i++) c[i] += a[i] * b;
            }
        } else { /* an element of C is a dot product of columns */
            for (i = 0; i < m; i++) {
                const float* a = A + (ptrdiff_t)i * lda;
                float s = 0;
                for (p = 0; p < k; p++) s += a[p] * (tb ? B[MLP_IX(j, p, ldb)] : B[MLP_IX(p, j, ldb)]);
                c[i] += alpha * s;
            }
        }
    }
}

/* z (rows x cols) += b per row, then ReLU if relu. */
static inline void mlp_bias_act(float* z, const float* b, int rows, int cols, int relu) {
    int i, j;
    for (j = 0; j < cols; j++)
        for (i = 0; i < rows; i++) {
            float v = z[MLP_IX(i, j, rows)] + b[i];
            z[MLP_IX(i, j, rows)] = relu && v < 0 ? 0 : v;
        }
}

/* Mean squared error of out against y (n values): loss[0], and its
   gradient into dout. */
static inline void mlp_mse(const float* out, const float* y, float* dout, float* loss, int n) {
    double s = 0;
    int i;
    for (i = 0; i < n; i++) {
        float d = out[i] - y[i];
        s += (double)d * d;
        dout[i] = 2.0f * d / (float)n;
    }
    loss[0] = (float)(s / n);
}

/* dz = dz where h > 0, else 0 (the ReLU's backward, h its output). */
static inline void mlp_relu_back(float* dz, const float* h, int n) {
    int i;
    for (i = 0; i < n; i++)
        if (!(h[i] > 0)) dz[i] = 0;
}

/* db[i] = sum over columns of dz (rows x cols). */
static inline void mlp_rowsum(const float* dz, float* db, int rows, int cols) {
    int i, j;
    for (i = 0; i < rows; i++) {
        float s = 0;
        for (j = 0; j < cols; j++) s += dz[MLP_IX(i, j, rows)];
        db[i] = s;
    }
}

/* One Adam step (t counts from 1) over n parameters. */
static inline void mlp_adam(float* p, const float* g, float* m, float* v, int n, float lr, int t) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    int i;
    for (i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

#ifdef GPUMEM_CUDA
/* mlp_kernels.cu: the same kernels on a CUDA stream (a cudaStream_t). */
#ifdef __cplusplus
extern "C" {
#endif
int mlp_cuda_bias_act(float* z, const float* b, int rows, int cols, int relu, void* stream);
int mlp_cuda_mse(const float* out, const float* y, float* dout, float* loss, int n, void* stream);
int mlp_cuda_relu_back(float* dz, const float* h, int n, void* stream);
int mlp_cuda_rowsum(const float* dz, float* db, int rows, int cols, void* stream);
int mlp_cuda_adam(float* p, const float* g, float* m, float* v, int n, float lr, int t, void* stream);
/* cuBLAS sgemm, column-major, on the stream */
int mlp_cuda_gemm(int ta, int tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
                  float beta, float* C, int ldc, void* stream);
void mlp_cuda_done(void);
#ifdef __cplusplus
}
#endif
#endif
#endif
