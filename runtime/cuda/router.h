// CUDA MoE router: the twin of experts::route_tokens (experts/router.h) for logits on the
// device, one thread per token. Host launcher only.
#pragma once

#include <cstdint>

#include "runtime/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// The sizes a token's routing keeps in registers / local memory.
inline constexpr int kMaxRouterExperts = 512;
inline constexpr int kMaxRouterGroups = 64;

// experts::RouterConfig, validated by the caller (validate_router_config) and within the
// limits above.
struct DeviceRouterConfig {
  int32_t num_experts = 0;  // E
  int32_t top_k = 0;        // K
  bool sigmoid = false;     // score function: sigmoid + group limit, else softmax
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  int32_t n_group = 1;
  int32_t topk_group = 1;
};

// logits [T, E], correction_bias [E] or null, expert_ids / weights [T, K]: device memory.
// Same rules as route_tokens: ids by descending selection score, ties to the lowest id.
int route_tokens(const DeviceRouterConfig& config, const float* logits, int64_t num_tokens,
                 const float* correction_bias, int32_t* expert_ids, float* weights, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
