#include "attention/cuda/rope.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// One thread per (token, head, pair); products and differences rounded apart, as the CPU's
// x1 * c - x2 * s.
__global__ void rope_kernel(float* heads, int num_heads, int head_dim, int half, int first_channel, bool interleaved,
                            const float* cos, const float* sin, const int64_t* table_rows, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = i % half;
    const int64_t head = i / half;  // token * num_heads + h
    const int64_t token = head / num_heads;
    float* rotated = heads + head * head_dim + first_channel;
    float* first = rotated + (interleaved ? 2 * pair : pair);
    float* second = first + (interleaved ? 1 : half);
    const int64_t row = table_rows != nullptr ? table_rows[token] : token;
    const float c = cos[row * half + pair], s = sin[row * half + pair];
    const float x1 = *first, x2 = *second;
    *first = mul_rn(x1, c) - mul_rn(x2, s);
    *second = mul_rn(x2, c) + mul_rn(x1, s);
  }
}

}  // namespace

int rope(float* heads, int64_t num_tokens, int num_heads, int head_dim, int rotary_dim, int first_channel,
         bool interleaved, const float* cos, const float* sin, const int64_t* table_rows, CUstream_st* stream) {
  const int half = rotary_dim / 2;
  const int64_t count = num_tokens * num_heads * half;
  if (count == 0) return 0;
  const int64_t blocks = ceil_div(count, kThreads);
  MOERT_LAUNCH(rope_kernel, static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, stream, heads, num_heads,
               head_dim, half, first_channel, interleaved, cos, sin, table_rows, count);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
