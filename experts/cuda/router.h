// CUDA MoE router: the twin of experts::route_tokens (experts/router.h) for logits on the
// device, one thread per token. Host launcher only.
#pragma once

#include <cstdint>

#include "core/cuda/namespace.h"

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

// The dispatch layout of a rank's own routing, planned on the device: the twin of
// experts::layout_from_routing (grouping only) and experts::expert_order_of_tokens, so that
// the routing never has to reach the host. For N = T * K <= kMaxDeviceLayoutEntries entries
// and G = min(N, E) group slots, with expert_ids [T, K] (ids in [0, E)) in device memory:
//  * expert_entry_idx [N]: the entries grouped by ascending expert, entry order within one;
//  * active_experts [G], cu_expert_entries [G + 1]: group a < A (A experts with work) is
//    expert active_experts[a] with entries [cu[a], cu[a + 1]); the slots a >= A are empty
//    (cu[a] = N, active_experts[a] a valid id), so a grid sized for G groups does nothing
//    there;
//  * entry_row [N] = c / K; src_rows [T, K]: token t's entries by ascending expert id, ties
//    by ascending k (the combine order).
inline constexpr int64_t kMaxDeviceLayoutEntries = 4096;
struct DeviceLayoutArrays {
  int64_t* expert_entry_idx = nullptr;   // [N]
  int32_t* active_experts = nullptr;     // [G]
  int64_t* cu_expert_entries = nullptr;  // [G + 1]
  int64_t* entry_row = nullptr;          // [N]
  int64_t* src_rows = nullptr;           // [T, K]
};
// counts[e] += #{i < N : expert_ids[i] == e} for e < num_experts (ids outside are not
// counted); device memory. One block, each thread owning experts (no atomics).
int count_expert_ids(const int32_t* expert_ids, int64_t num_entries, int num_experts, int64_t* counts,
                     CUstream_st* stream);
int plan_routed_layout(const int32_t* expert_ids, int64_t num_tokens, int top_k, int num_experts,
                       const DeviceLayoutArrays& layout, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
