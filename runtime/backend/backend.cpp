#include "runtime/backend/backend.h"

#include <vector>

#include "core/check.h"
#include "experts/grouped/dispatch_layout.h"

namespace moert::backend {

// The layout is planned on the host: the routing comes back first (a plain copy on the CPU).
void Backend::routed_experts(const float* h, int64_t num_tokens, int hidden_size, const int32_t* expert_ids,
                             const float* weights, int top_k, int num_experts,
                             const std::function<ExpertWeights(int expert)>& expert_weights, float* out) {
  const auto num_entries = static_cast<size_t>(num_tokens * top_k);
  std::vector<int32_t> ids(num_entries);
  std::vector<float> gate_weights(num_entries);
  copy_bytes(ids.data(), expert_ids, static_cast<int64_t>(num_entries * sizeof(int32_t)));
  copy_bytes(gate_weights.data(), weights, static_cast<int64_t>(num_entries * sizeof(float)));
  Result<experts::ExpertDispatchLayout> layout =
      experts::layout_from_routing(ids, gate_weights, num_tokens, top_k, num_experts);
  MOERT_CHECK(layout.is_ok(), "routing: " << layout.status().message());
  const auto dim = static_cast<size_t>(hidden_size);
  const Buffer contributions = allocate(DType::kF32, {static_cast<int64_t>(num_entries), hidden_size});  // [T * K, D]
  const std::span<float> rows(contributions.data<float>(), num_entries * dim);
  grouped_expert_ffn(*layout, {h, static_cast<size_t>(num_tokens) * dim}, hidden_size, expert_weights, rows);
  combine_rows(experts::expert_order_of_tokens(ids, num_tokens, top_k), top_k, rows, hidden_size,
               {out, static_cast<size_t>(num_tokens) * dim});
}

}  // namespace moert::backend
