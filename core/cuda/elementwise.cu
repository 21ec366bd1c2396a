#include "core/cuda/elementwise.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

unsigned blocks_for(int64_t count) {
  const int64_t blocks = ceil_div(count, kThreads);
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Grid-stride loops: every kernel below covers any count with any grid.
__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void embedding_gather_kernel(const void* table, TableType type, int64_t dim, const int32_t* tokens,
                                        int64_t count, float* out) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    const int64_t src = static_cast<int64_t>(tokens[i / dim]) * dim + i % dim;
    out[i] = type == TableType::kF32    ? static_cast<const float*>(table)[src]
             : type == TableType::kBF16 ? bf16_to_float(static_cast<const uint16_t*>(table)[src])
                                        : f16_to_float(static_cast<const uint16_t*>(table)[src]);
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) x[i] = x[i] + y[i];
}

// g = 1 / (1 + exp(-l)) as the CPU computes it; the product and the sum rounded apart.
__global__ void gated_add_kernel(float* x, const float* y, const float* gate_logits, int64_t dim, int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    const float g = gate_logits == nullptr ? 1.0f : 1.0f / (1.0f + expf(-gate_logits[i / dim]));
    x[i] = add_rn(x[i], mul_rn(g, y[i]));
  }
}

// sigmoid as the CPU computes it (1 / (1 + exp(-g))), then one rounded product.
__global__ void sigmoid_mul_kernel(float* x, const float* gate, int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    x[i] = mul_rn(x[i], 1.0f / (1.0f + expf(-gate[i])));
  }
}

__global__ void copy_rows_kernel(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t width,
                                 int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    const int64_t r = i / width, c = i % width;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t dim, const int64_t* rows, float* dst, int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) dst[i] = src[rows[i / dim] * dim + i % dim];
}

__global__ void scatter_weighted_rows_kernel(const float* src, int64_t dim, const int64_t* rows, const float* weights,
                                             float* out, int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    const int64_t row = rows[i / dim];
    out[row * dim + i % dim] = mul_rn(weights[row], src[i]);
  }
}

__global__ void combine_rows_kernel(const int64_t* src_rows, int top_k, const float* rows, int64_t dim, float* out,
                                    int64_t count) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    const int64_t t = i / dim, c = i % dim;
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) acc += rows[src_rows[t * top_k + j] * dim + c];
    out[i] = acc;
  }
}

// One block per row.
__global__ void argmax_rows_kernel(const float* logits, int64_t vocab, int32_t* out) {
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  const int64_t best = block_argmax<kThreads>(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, values, indices);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(best);
}

// experts::glu, operation for operation.
__global__ void glu_kernel(float* gate, const float* up, int64_t count, experts::GluActivation activation) {
  for (int64_t i = first_index(); i < count; i += grid_stride()) {
    float g = gate[i], u = up[i];
    if (activation.kind == experts::GluActivation::Kind::kSilu) {
      gate[i] = mul_rn(g / (1.0f + expf(-g)), u);
    } else {
      g = fminf(g, activation.limit);
      u = fminf(fmaxf(u, -activation.limit), activation.limit);
      gate[i] = mul_rn(mul_rn(u + 1.0f, g), 1.0f / (1.0f + expf(-mul_rn(activation.alpha, g))));
    }
  }
}

int last_error() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int embedding_gather(const void* table, TableType type, int64_t dim, const int32_t* tokens, int64_t num_tokens,
                     float* out, CUstream_st* stream) {
  const int64_t count = num_tokens * dim;
  if (count == 0) return 0;
  MOERT_LAUNCH(embedding_gather_kernel, blocks_for(count), kThreads, stream, table, type, dim, tokens, count, out);
  return last_error();
}

int add(float* x, const float* y, int64_t count, CUstream_st* stream) {
  if (count == 0) return 0;
  MOERT_LAUNCH(add_kernel, blocks_for(count), kThreads, stream, x, y, count);
  return last_error();
}

int gated_add(float* x, const float* y, const float* gate_logits, int64_t num_rows, int64_t dim, CUstream_st* stream) {
  const int64_t count = num_rows * dim;
  if (count == 0) return 0;
  MOERT_LAUNCH(gated_add_kernel, blocks_for(count), kThreads, stream, x, y, gate_logits, dim, count);
  return last_error();
}

int sigmoid_mul(float* x, const float* gate, int64_t count, CUstream_st* stream) {
  if (count == 0) return 0;
  MOERT_LAUNCH(sigmoid_mul_kernel, blocks_for(count), kThreads, stream, x, gate, count);
  return last_error();
}

int copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t num_rows, int64_t width,
              CUstream_st* stream) {
  const int64_t count = num_rows * width;
  if (count == 0) return 0;
  MOERT_LAUNCH(copy_rows_kernel, blocks_for(count), kThreads, stream, dst, dst_stride, src, src_stride, width, count);
  return last_error();
}

int gather_rows(const float* src, int64_t dim, const int64_t* rows, int64_t num_rows, float* dst, CUstream_st* stream) {
  const int64_t count = num_rows * dim;
  if (count == 0) return 0;
  MOERT_LAUNCH(gather_rows_kernel, blocks_for(count), kThreads, stream, src, dim, rows, dst, count);
  return last_error();
}

int scatter_weighted_rows(const float* src, int64_t dim, const int64_t* rows, int64_t num_rows, const float* weights,
                          float* out, CUstream_st* stream) {
  const int64_t count = num_rows * dim;
  if (count == 0) return 0;
  MOERT_LAUNCH(scatter_weighted_rows_kernel, blocks_for(count), kThreads, stream, src, dim, rows, weights, out, count);
  return last_error();
}

int combine_rows(const int64_t* src_rows, int64_t num_tokens, int top_k, const float* rows, int64_t dim, float* out,
                 CUstream_st* stream) {
  const int64_t count = num_tokens * dim;
  if (count == 0) return 0;
  MOERT_LAUNCH(combine_rows_kernel, blocks_for(count), kThreads, stream, src_rows, top_k, rows, dim, out, count);
  return last_error();
}

int argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, int32_t* out, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  MOERT_LAUNCH(argmax_rows_kernel, static_cast<unsigned>(num_rows), kThreads, stream, logits, vocab, out);
  return last_error();
}

int glu(float* gate, const float* up, int64_t count, const experts::GluActivation& activation, CUstream_st* stream) {
  if (count == 0) return 0;
  MOERT_LAUNCH(glu_kernel, blocks_for(count), kThreads, stream, gate, up, count, activation);
  return last_error();
}

}  // namespace moert::MOERT_CUDA_NS
