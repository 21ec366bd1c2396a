#include "runtime/backend/backend.h"

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "experts/grouped/dispatch_layout.h"

namespace moert::backend {

// The layout is planned on the host: the routing comes back first (a plain copy on the CPU).
void Backend::routed_experts_planned_on_host(const float* h, int64_t num_tokens, int hidden_size,
                                             const int32_t* expert_ids, const float* weights, int top_k,
                                             int num_experts,
                                             const std::function<ExpertWeights(int expert)>& expert_weights,
                                             float* out) {
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

void Backend::route_on_host(const experts::RouterConfig& config, const float* logits, int64_t num_tokens,
                            const float* selection_bias, int32_t* expert_ids, float* weights) {
  if (num_tokens == 0) return;
  const int64_t count = num_tokens * config.top_k;
  std::vector<float> host_logits(static_cast<size_t>(num_tokens * config.num_experts));
  copy_bytes(host_logits.data(), logits, static_cast<int64_t>(host_logits.size() * sizeof(float)));
  std::vector<float> host_bias(selection_bias == nullptr ? 0 : static_cast<size_t>(config.num_experts));
  if (selection_bias != nullptr) {
    copy_bytes(host_bias.data(), selection_bias, static_cast<int64_t>(host_bias.size() * sizeof(float)));
  }
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::vector<float> gate_weights(static_cast<size_t>(count));
  experts::route_tokens(config, host_logits.data(), num_tokens, host_bias.empty() ? nullptr : host_bias.data(),
                        ids.data(), gate_weights.data());
  copy_bytes(expert_ids, ids.data(), count * static_cast<int64_t>(sizeof(int32_t)));
  copy_bytes(weights, gate_weights.data(), count * static_cast<int64_t>(sizeof(float)));
}

namespace {

// Says once per process and kind that `backend` handed work to the host.
void log_fallback_once(const Backend& backend, const char* what, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!said.insert(std::string(backend.name()) + what).second) return;
  MOERT_INFO(backend.name() << ": " << what << " on the host: " << why);
}

}  // namespace

void route_on(Backend& backend, const experts::RouterConfig& config, const float* logits, int64_t num_tokens,
              const float* selection_bias, int32_t* expert_ids, float* weights) {
  const Backend::Capabilities caps = backend.capabilities();
  if (config.num_experts <= caps.max_router_experts && config.n_group <= caps.max_router_groups) {
    backend.route(config, logits, num_tokens, selection_bias, expert_ids, weights);
    return;
  }
  log_fallback_once(backend, "routing",
                    std::to_string(config.num_experts) + " experts in " + std::to_string(config.n_group) +
                        " groups exceed its router's " + std::to_string(caps.max_router_experts) + " and " +
                        std::to_string(caps.max_router_groups));
  backend.route_on_host(config, logits, num_tokens, selection_bias, expert_ids, weights);
}

void routed_experts_on(Backend& backend, const float* h, int64_t num_tokens, int hidden_size,
                       const int32_t* expert_ids, const float* weights, int top_k, int num_experts,
                       const std::function<Backend::ExpertWeights(int expert)>& expert_weights, float* out) {
  const Backend::Capabilities caps = backend.capabilities();
  const int64_t num_entries = num_tokens * top_k;
  if (caps.max_device_layout_tokens == 0 ||
      (num_tokens <= caps.max_device_layout_tokens && num_entries <= caps.max_device_layout_entries)) {
    backend.routed_experts(h, num_tokens, hidden_size, expert_ids, weights, top_k, num_experts, expert_weights, out);
    return;
  }
  log_fallback_once(backend, "expert layouts of large batches",
                    "batches over " + std::to_string(caps.max_device_layout_tokens) + " tokens (or " +
                        std::to_string(caps.max_device_layout_entries) +
                        " routed entries) are planned on the host; smaller ones on the device");
  backend.routed_experts_planned_on_host(h, num_tokens, hidden_size, expert_ids, weights, top_k, num_experts,
                                         expert_weights, out);
}

}  // namespace moert::backend
