// The plain data of the Gated DeltaNet token mixer (docs/gated-deltanet.md) that the kernels
// (attention/cpu/gated_delta_net.h, attention/cuda/gated_delta_net.h), the backend op table and
// the model share: the layer's shape, its parameters besides the projections, and where a call
// copies a state to. No code but sizes.
#pragma once

#include <cstdint>

namespace moert::attention {

struct GatedDeltaShape {
  int num_key_heads = 0;    // NK
  int key_head_dim = 0;     // DK
  int num_value_heads = 0;  // NV, a multiple of NK
  int value_head_dim = 0;   // DV
  int conv_width = 0;       // W >= 1

  int64_t conv_channels() const {  // C
    return 2 * static_cast<int64_t>(num_key_heads) * key_head_dim +
           static_cast<int64_t>(num_value_heads) * value_head_dim;
  }
  int64_t conv_state_size() const { return static_cast<int64_t>(conv_width - 1) * conv_channels(); }
  int64_t recurrent_state_size() const {
    return static_cast<int64_t>(num_value_heads) * key_head_dim * value_head_dim;
  }
};

// The parameters of one layer's mixer besides its projections (runtime LinearAttentionWeights).
struct GatedDeltaParams {
  const float* conv_weight = nullptr;  // [C, W]
  const float* a_log = nullptr;        // [NV]
  const float* dt_bias = nullptr;      // [NV]
  const float* norm_weight = nullptr;  // [DV], used as w
  float norm_eps = 1e-6f;
};

// Where a gated_delta_net_sequence call also copies the states after row `row` (a prefix-cache
// snapshot at a block boundary inside a chunk): conv [W-1, C] and recurrent [NV, DK, DV].
struct StateCopy {
  int64_t row = 0;
  float* conv = nullptr;
  float* recurrent = nullptr;
};

}  // namespace moert::attention
