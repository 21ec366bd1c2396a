// CUDA linear layers over every weight format, the grouped expert FFN and per-head
// matrices: host launchers only (device pointers, sizes, a stream; no CUDA headers).
// Twins of quant/cpu (apply_linear), experts (glu_ffn_forward, grouped_expert_ffn) and
// CpuBackend::per_head_linear. Formats: docs/quant-formats.md. Every launcher returns 0 or
// the CUDA error code.
//
// Shapes: R rows, N out features, K in features, D hidden, I expert width, N_e entries.
#pragma once

#include <cstdint>

#include "experts/glu_activation.h"
#include "quant/cuda/fp4_activations.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// One [N, K] weight as the kernels read it, every pointer in device memory.
struct DeviceWeight {
  enum class Kind : int32_t { kF32, kBF16, kF16, kNvfp4, kMxfp4, kFp8Block, kFp8Tensor };
  Kind kind = Kind::kF32;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  // Dense: [N, K] of F32 / BF16 / F16. NVFP4 / MXFP4: packed [N, K/2], element 2i in the
  // low nibble. FP8: E4M3 [N, K].
  const void* data = nullptr;
  const uint8_t* scales = nullptr;            // NVFP4: E4M3 [N, K/16]; MXFP4: E8M0 [N, K/32]
  const float* block_scale_inv = nullptr;     // FP8 block: [ceil(N/128), ceil(K/128)]
  float global_scale = 1.0f;                  // NVFP4 weight_scale_2; FP8 tensor scale
};

// Whether batches of this weight (more than 16 rows) run on the BF16 tensor cores: BF16, FP8
// and FP4 weights, whose values are exact in BF16 up to a factor (linear.cu).
bool tensor_core_weight(const DeviceWeight& weight);

// y[R, N] = x[R, K] . W^T (+ bias[N] when not null).
int linear(const DeviceWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
           CUstream_st* stream);

// One routed expert's weights (device pointers; biases null when absent).
struct DeviceExpert {
  DeviceWeight gate, up, down;        // [I, D], [I, D], [D, I]
  const float* gate_bias = nullptr;   // [I]
  const float* up_bias = nullptr;     // [I]
  const float* down_bias = nullptr;   // [D]
};

// The grouped expert FFN over a dispatch layout (experts/grouped/dispatch_layout.h), every
// array in device memory: entry c reads row entry_row[c] of x [*, D] and writes
// contributions[c, :] = entry_weight[c] * down(act(gate x + gb) * (up x + ub)) + ..., i.e.
// entry_weight[c] * (expert FFN of that row) exactly as the CPU's glu_ffn_forward then the
// weight. `experts` [num_experts] indexed by expert id; entries grouped by expert as
// expert_entry_idx[cu_expert_entries[a] .. cu_expert_entries[a+1]) for expert_ids[a],
// a < num_active. `workspace` holds at least grouped_expert_workspace_floats(...) floats.
struct GroupedExpertArgs {
  const float* x = nullptr;                    // [*, D]
  int64_t hidden_size = 0;                     // D
  int64_t intermediate_size = 0;               // I (the same for every expert)
  int64_t num_entries = 0;                     // N_e
  const int64_t* entry_row = nullptr;          // [N_e]
  const float* entry_weight = nullptr;         // [N_e]
  int32_t num_active = 0;                      // A
  const int32_t* active_experts = nullptr;     // [A] expert ids with work, ascending
  const int64_t* cu_expert_entries = nullptr;  // [A+1]
  const int64_t* expert_entry_idx = nullptr;   // [N_e]
  const DeviceExpert* experts = nullptr;       // [E] (device memory)
  experts::GluActivation activation;
  float* workspace = nullptr;
  float* contributions = nullptr;              // [N_e, D]
  // Host-side: every expert's gate, up and down satisfy tensor_core_weight (then groups of
  // more than 16 entries run on the tensor cores).
  bool tensor_core_weights = false;
  // W4A4 (fp4_activations.h): the activated intermediate rows are rounded to this format
  // before the down product. The caller rounds x the same way beforehand.
  Fp4Activations fp4_activations = Fp4Activations::kNone;
};
int64_t grouped_expert_workspace_floats(int64_t num_entries, int64_t hidden_size, int64_t intermediate_size);
// Host-side maxima the launcher needs to size its grid (the longest expert group).
int grouped_expert_ffn(const GroupedExpertArgs& args, int64_t max_entries_per_expert, CUstream_st* stream);

// y[t, h, o] = sum_i W[h, o, i] * x[t, h, i] (CpuBackend::per_head_linear; strides in floats).
int per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features, const float* x,
                    int64_t x_head_stride, int64_t num_tokens, float* y, int64_t y_head_stride, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
