// mlp_kernels.cu -- train_mlp's kernels on CUDA: cuBLAS for the matrix
// products, small kernels for the rest, each summing in a fixed order so a
// run is deterministic. Built with nvcc into the CUDA build of train_mlp.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#define GPUMEM_CUDA
#include "mlp_kernels.h"

static cublasHandle_t handle;

static int check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "train_mlp: %s: %s\n", what, cudaGetErrorString(e));
    return -1;
}
#define LAUNCH(what) check(cudaGetLastError(), what)
static unsigned blocks(int n) { return (unsigned)((n + 255) / 256); }

__global__ void k_bias_act(float* z, const float* b, int rows, int cols, int relu) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    float v = z[i] + b[i % rows];
    z[i] = relu && v < 0 ? 0 : v;
}
__global__ void k_mse(const float* out, const float* y, float* dout, float* loss, int n) {
    __shared__ double part[256];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += 256) {
        float d = out[i] - y[i];
        s += (double)d * d;
        dout[i] = 2.0f * d / (float)n;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / n);
}
__global__ void k_relu_back(float* dz, const float* h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(h[i] > 0)) dz[i] = 0;
}
__global__ void k_rowsum(const float* dz, float* db, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    float s = 0;
    for (int j = 0; j < cols; j++) s += dz[i + (size_t)j * rows];
    db[i] = s;
}
__global__ void k_adam(float* p, const float* g, float* m, float* v, int n, float lr, float c1, float c2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    m[i] = 0.9f * m[i] + 0.1f * g[i];
    v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + 1e-8f);
}

extern "C" int mlp_cuda_bias_act(float* z, const float* b, int rows, int cols, int relu, void* s) {
    k_bias_act<<<blocks(rows * cols), 256, 0, (cudaStream_t)s>>>(z, b, rows, cols, relu);
    return LAUNCH("bias_act");
}
extern "C" int mlp_cuda_mse(const float* out, const float* y, float* dout, float* loss, int n, void* s) {
    k_mse<<<1, 256, 0, (cudaStream_t)s>>>(out, y, dout, loss, n);
    return LAUNCH("mse");
}
extern "C" int mlp_cuda_relu_back(float* dz, const float* h, int n, void* s) {
    k_relu_back<<<blocks(n), 256, 0, (cudaStream_t)s>>>(dz, h, n);
    return LAUNCH("relu_back");
}
extern "C" int mlp_cuda_rowsum(const float* dz, float* db, int rows, int cols, void* s) {
    k_rowsum<<<blocks(rows), 256, 0, (cudaStream_t)s>>>(dz, db, rows, cols);
    return LAUNCH("rowsum");
}
extern "C" int mlp_cuda_adam(float* p, const float* g, float* m, float* v, int n, float lr, int t, void* s) {
    float c1 = 1.0f - powf(0.9f, (float)t), c2 = 1.0f - powf(0.999f, (float)t);
    k_adam<<<blocks(n), 256, 0, (cudaStream_t)s>>>(p, g, m, v, n, lr, c1, c2);
    return LAUNCH("adam");
}
extern "C" int mlp_cuda_gemm(int ta, int tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
                             int ldb, float beta, float* C, int ldc, void* s) {
    if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "train_mlp: cublasCreate failed\n");
        return -1;
    }
    if (cublasSetStream(handle, (cudaStream_t)s) != CUBLAS_STATUS_SUCCESS) return -1;
    if (cublasSgemm(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, lda, B,
                    ldb, &beta, C, ldc) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "train_mlp: cublasSgemm failed\n");
        return -1;
    }
    return 0;
}
extern "C" void mlp_cuda_done(void) {
    if (handle) cublasDestroy(handle);
    handle = 0;
}
