#include "core/cuda/rms_norm.h"

#include "core/cuda/cuda_api.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// One block per row; the sum of squares is reduced in float64 like the CPU twin.
__global__ void rms_norm_kernel(float* x, int64_t dim, const float* weight, float eps) {
  float* row = x + static_cast<int64_t>(blockIdx.x) * dim;
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += static_cast<double>(row[i]) * row[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  const float inv_rms = static_cast<float>(1.0 / sqrt(partial[0] / static_cast<double>(dim) + eps));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = (row[i] * inv_rms) * weight[i];
}

}  // namespace

int rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  MOERT_LAUNCH(rms_norm_kernel, static_cast<unsigned>(num_rows), kThreads, stream, x, dim, weight, eps);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
