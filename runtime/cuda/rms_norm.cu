#include "runtime/cuda/rms_norm.h"

#include <cuda_runtime.h>

namespace moert::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row; the sum of squares is reduced in float64 like the CPU twin.
__global__ void rms_norm_kernel(float* x, int64_t dim, const float* weight, float eps) {
  float* row = x + blockIdx.x * dim;
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += static_cast<double>(row[i]) * row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  const float inv_rms = static_cast<float>(1.0 / sqrt(partial[0] / dim + eps));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = row[i] * inv_rms * weight[i];
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

int rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  rms_norm_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(x, dim, weight, eps);
  return static_cast<int>(cudaGetLastError());
}

int rms_norm_rows_host(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps) {
  float* d_x = nullptr;
  float* d_w = nullptr;
  const size_t x_bytes = static_cast<size_t>(num_rows * dim) * sizeof(float);
  const size_t w_bytes = static_cast<size_t>(dim) * sizeof(float);
  cudaError_t err = cudaMalloc(&d_x, x_bytes);
  if (err == cudaSuccess) err = cudaMalloc(&d_w, w_bytes);
  if (err == cudaSuccess) err = cudaMemcpy(d_x, x, x_bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(d_w, weight, w_bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = static_cast<cudaError_t>(rms_norm_rows(d_x, num_rows, dim, d_w, eps, nullptr));
  if (err == cudaSuccess) err = cudaMemcpy(x, d_x, x_bytes, cudaMemcpyDeviceToHost);
  cudaFree(d_x);
  cudaFree(d_w);
  return static_cast<int>(err);
}

}  // namespace moert::cuda
