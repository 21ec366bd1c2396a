// The Gated DeltaNet token mixer on the GPU: the twin of attention/cpu/gated_delta_net.cpp
// (docs/gated-deltanet.md), in two kernels per call.
//  1. conv: one thread per (sequence, channel) walks the sequence's rows in order, computing
//     the causal depthwise conv + SiLU from the conv state and the rows, then writes the new
//     conv state (and the states after the rows a candidate or copy asks for).
//  2. delta rule: one block per (sequence, value head), one thread per value channel e owning
//     column e of S (global memory, coalesced over e); per row the block L2-normalises q and k
//     of the key head in shared memory, thread 0 computes the gates, every thread updates its
//     column and its output, then the block applies the gated RMSNorm.
// Sums run in the CPU kernel's order with separate multiplies and adds (mul_rn / add_rn), so
// results differ from the CPU only through the device's exp / log / sqrt.
//
// Shapes: as in attention/cuda/gated_delta_net.h.
#include "attention/cuda/gated_delta_net.h"

#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kConvThreads = 128;
constexpr int kMaxKeyDim = 256;     // DK of every release is 128
constexpr int kMaxValueDim = 1024;  // one thread per value channel

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// Row s of (state ++ rows), s in [-(W-1), T).
__device__ __forceinline__ float history(const float* state, const float* u, int64_t channels, int width, int64_t s,
                                         int64_t c) {
  return s < 0 ? state[(width - 1 + s) * channels + c] : u[s * channels + c];
}

// The conv state after row t (the last W-1 rows of state ++ rows[0..t]) of channel c into dst.
__device__ void write_conv_state(const float* state, const float* u, int64_t channels, int width, int64_t t, int64_t c,
                                 float* dst) {
  for (int i = 0; i < width - 1; ++i) dst[i * channels + c] = history(state, u, channels, width, t - (width - 2) + i, c);
}

// Sizes come from the host (GatedDeltaShape's helpers are host code): C and (W-1) C.
__global__ void conv_kernel(int width, int64_t channels, int64_t conv_size, const float* weight, const float* u,
                            const GatedDeltaSequence* sequences, const attention::StateCopy* copies, float* conv_rows) {
  const GatedDeltaSequence seq = sequences[blockIdx.y];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float* rows = u + seq.first_row * channels;
  for (int64_t t = 0; t < seq.num_rows; ++t) {
    float sum = 0.0f;
    for (int j = 0; j < width; ++j) {
      sum = add_rn(sum, mul_rn(weight[c * width + j], history(seq.conv_state, rows, channels, width, t - width + 1 + j, c)));
    }
    conv_rows[(seq.first_row + t) * channels + c] = silu(sum);
    if (seq.conv_states_after != nullptr) {
      write_conv_state(seq.conv_state, rows, channels, width, t, c, seq.conv_states_after + t * conv_size);
    }
  }
  for (int64_t i = 0; i < seq.num_copies; ++i) {
    const attention::StateCopy& copy = copies[seq.first_copy + i];
    write_conv_state(seq.conv_state, rows, channels, width, copy.row, c, copy.conv);
  }
  // Last: the state itself (every read above saw the old one). A thread owns its channel.
  if (seq.num_rows > 0) {
    float kept[8];  // W - 1 <= 8 (checked by the launcher)
    for (int i = 0; i < width - 1; ++i) kept[i] = history(seq.conv_state, rows, channels, width, seq.num_rows - (width - 1) + i, c);
    for (int i = 0; i < width - 1; ++i) seq.conv_state[i * channels + c] = kept[i];
  }
}

__global__ void delta_rule_kernel(attention::GatedDeltaShape shape, int64_t channels, int64_t state_size,
                                  attention::GatedDeltaParams params, const float* conv_rows, const float* z,
                                  const float* a, const float* b, const GatedDeltaSequence* sequences,
                                  const attention::StateCopy* copies, float* out) {
  const int nk = shape.num_key_heads, dk = shape.key_head_dim, nv = shape.num_value_heads, dv = shape.value_head_dim;
  const GatedDeltaSequence seq = sequences[blockIdx.x / nv];
  const int j = static_cast<int>(blockIdx.x % nv), key_head = j / (nv / nk);
  const int e = static_cast<int>(threadIdx.x);  // blockDim.x == DV
  __shared__ float q[kMaxKeyDim], k[kMaxKeyDim];
  __shared__ float gate_decay, gate_beta, inv_rms;
  __shared__ float outputs[kMaxValueDim];  // [DV] this row's head outputs
  float* column = seq.recurrent_state + static_cast<int64_t>(j) * dk * dv + e;  // S[j][d][e] at column[d * dv]
  const float q_scale = 1.0f / sqrtf(static_cast<float>(dk));
  int64_t next_copy = 0;
  for (int64_t t = 0; t < seq.num_rows; ++t) {
    const int64_t r = seq.first_row + t;
    const float* row = conv_rows + r * channels;
    for (int d = e; d < dk; d += blockDim.x) {
      q[d] = row[static_cast<int64_t>(key_head) * dk + d];
      k[d] = row[static_cast<int64_t>(nk + key_head) * dk + d];
    }
    __syncthreads();
    if (e == 0) {
      float qq = 0.0f, kk = 0.0f;
      for (int d = 0; d < dk; ++d) {
        qq = add_rn(qq, mul_rn(q[d], q[d]));
        kk = add_rn(kk, mul_rn(k[d], k[d]));
      }
      const float q_factor = q_scale / sqrtf(qq + 1e-6f), k_factor = 1.0f / sqrtf(kk + 1e-6f);
      for (int d = 0; d < dk; ++d) {
        q[d] = mul_rn(q[d], q_factor);
        k[d] = mul_rn(k[d], k_factor);
      }
      const float x = a[r * nv + j] + params.dt_bias[j];
      const float softplus = x > 20.0f ? x : log1pf(expf(x));
      gate_decay = expf(-expf(params.a_log[j]) * softplus);
      gate_beta = 1.0f / (1.0f + expf(-b[r * nv + j]));
    }
    __syncthreads();
    const float g = gate_decay, beta = gate_beta;
    float read = 0.0f;
    for (int d = 0; d < dk; ++d) {
      const float s = mul_rn(column[d * dv], g);
      column[d * dv] = s;
      read = add_rn(read, mul_rn(s, k[d]));
    }
    const float delta = mul_rn(beta, row[2 * static_cast<int64_t>(nk) * dk + static_cast<int64_t>(j) * dv + e] - read);
    float o = 0.0f;
    for (int d = 0; d < dk; ++d) {
      const float s = add_rn(column[d * dv], mul_rn(k[d], delta));
      column[d * dv] = s;
      o = add_rn(o, mul_rn(s, q[d]));
    }
    const bool copy_here = next_copy < seq.num_copies && copies[seq.first_copy + next_copy].row == t;
    for (int d = 0; d < dk; ++d) {
      const int64_t at = static_cast<int64_t>(j) * dk * dv + static_cast<int64_t>(d) * dv + e;
      if (seq.recurrent_states_after != nullptr) seq.recurrent_states_after[t * state_size + at] = column[d * dv];
      if (copy_here) copies[seq.first_copy + next_copy].recurrent[at] = column[d * dv];
    }
    if (copy_here) ++next_copy;
    // The gated RMSNorm of this head's row: y = o / rms(o) * w * silu(z).
    outputs[e] = o;
    __syncthreads();
    if (e == 0) {
      float sum_sq = 0.0f;
      for (int i = 0; i < dv; ++i) sum_sq = add_rn(sum_sq, mul_rn(outputs[i], outputs[i]));
      inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dv) + params.norm_eps);
    }
    __syncthreads();
    const int64_t at = (r * nv + j) * static_cast<int64_t>(dv) + e;
    out[at] = mul_rn(mul_rn(mul_rn(o, inv_rms), params.norm_weight[e]), silu(z[at]));
    __syncthreads();  // q, k and outputs are rewritten by the next row
  }
}

}  // namespace

int gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                    const float* u, const float* z, const float* a, const float* b, const GatedDeltaSequence* sequences,
                    int64_t num_sequences, const attention::StateCopy* copies, int64_t num_rows, float* conv_rows,
                    float* out, CUstream_st* stream) {
  if (num_sequences == 0 || num_rows == 0) return 0;
  if (shape.key_head_dim > kMaxKeyDim || shape.value_head_dim > kMaxValueDim || shape.conv_width - 1 > 8) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const dim3 conv_grid(static_cast<unsigned>((shape.conv_channels() + kConvThreads - 1) / kConvThreads),
                       static_cast<unsigned>(num_sequences));
  MOERT_LAUNCH(conv_kernel, conv_grid, dim3(kConvThreads), stream, shape.conv_width, shape.conv_channels(),
               shape.conv_state_size(), params.conv_weight, u, sequences, copies, conv_rows);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return static_cast<int>(status);
  MOERT_LAUNCH(delta_rule_kernel, dim3(static_cast<unsigned>(num_sequences * shape.num_value_heads)),
               dim3(static_cast<unsigned>(shape.value_head_dim)), stream, shape, shape.conv_channels(),
               shape.recurrent_state_size(), params, conv_rows, z, a, b, sequences, copies, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
