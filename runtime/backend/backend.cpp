#include "runtime/backend/backend.h"

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "attention/cpu/lightning_indexer.h"
#include "attention/cpu/sparse_attention.h"
#include "core/thread_pool.h"
#include "experts/grouped/dispatch_layout.h"

namespace moert::backend {

// ---- The host-side path of the sparse-attention ops (backends without kernels of their own,
// the CUDA backend today): the operands come to the host through copy_bytes (the whole layer's
// cache with its scales: correct, not fast), the CPU kernels run on one thread, the result
// goes back. The plan is host data here (a step graph never records these: the transformer
// names DSA as a step-graph blocker).
namespace {

template <typename T>
std::vector<std::remove_const_t<T>> to_host_vector(Backend& backend, DevicePtr<T> src, int64_t count) {
  std::vector<std::remove_const_t<T>> host(static_cast<size_t>(count));
  if (count > 0) backend.copy_bytes(host, DevicePtr<const void>(src), count * static_cast<int64_t>(sizeof(T)));
  return host;
}

// A host copy of `layer`'s storage (a latent layer: v_cache == k_cache) with the view over it.
struct HostLayer {
  std::vector<uint8_t> cache;
  std::vector<float> scales;
  attention::PagedKvLayer view;
};
HostLayer host_layer(Backend& backend, const attention::PagedKvLayer& layer) {
  MOERT_CHECK(layer.k_cache == layer.v_cache, "the sparse-attention ops read latent layers only");
  HostLayer host;
  const int64_t elements = static_cast<int64_t>(layer.num_blocks) * layer.block_size * layer.num_kv_heads * layer.head_dim;
  host.cache = to_host_vector(backend, DevicePtr<const uint8_t>(static_cast<const uint8_t*>(layer.k_cache), layer.device),
                              elements * attention::kv_element_bytes(layer.dtype));
  host.view = layer;
  host.view.device = Device{};
  host.view.k_cache = host.view.v_cache = host.cache.data();
  if (layer.k_scales != nullptr) {
    host.scales = to_host_vector(backend, DevicePtr<const float>(layer.k_scales, layer.device),
                                 static_cast<int64_t>(layer.num_blocks) * layer.num_kv_heads);
    host.view.k_scales = host.view.v_scales = host.scales.data();
  }
  return host;
}

int64_t plan_rows(const attention::PagedAttentionPlan& plan) {
  if (plan.num_seqs == 0) return 0;
  check_device(Device{}, plan.device, "a host-side sparse-attention plan");
  return plan.qo_indptr[plan.num_seqs];
}

}  // namespace

void Backend::sparse_index_select(const attention::SparseIndexQuery& index, const attention::PagedKvLayer& layer,
                                  int key_offset, const attention::PagedAttentionPlan& plan,
                                  DevicePtr<int32_t> selected) {
  const int64_t rows = plan_rows(plan);
  if (rows == 0) return;
  const HostLayer host = host_layer(*this, layer);
  const std::vector<float> queries =
      to_host_vector(*this, DevicePtr<const float>(index.queries, index.device), rows * index.num_heads * index.head_dim);
  const std::vector<float> weights =
      to_host_vector(*this, DevicePtr<const float>(index.weights, index.device), rows * index.num_heads);
  std::vector<int32_t> chosen = to_host_vector(*this, DevicePtr<const int32_t>(selected), rows * index.top_k);
  attention::SparseIndexQuery on_host = index;
  on_host.queries = queries.data();
  on_host.weights = weights.data();
  on_host.device = Device{};
  ThreadPool pool(1);
  attention::paged_sparse_index_select(on_host, host.view, key_offset, plan, chosen.data(), pool);
  copy_bytes(selected, chosen, rows * index.top_k * static_cast<int64_t>(sizeof(int32_t)));
}

void Backend::sparse_paged_attention(DevicePtr<const float> q, const attention::PagedKvLayer& layer, int key_width,
                                     const attention::PagedAttentionPlan& plan, int num_heads,
                                     DevicePtr<const int32_t> selected, int top_k, DevicePtr<float> out) {
  const int64_t rows = plan_rows(plan);
  if (rows == 0) return;
  const HostLayer host = host_layer(*this, layer);
  const int64_t width = rows * num_heads * key_width;
  const std::vector<float> queries = to_host_vector(*this, q, width);
  const std::vector<int32_t> chosen = to_host_vector(*this, selected, rows * top_k);
  std::vector<float> result = to_host_vector(*this, DevicePtr<const float>(out), width);
  ThreadPool pool(1);
  attention::paged_sparse_attention(queries.data(), host.view, key_width, plan, num_heads, chosen.data(), top_k,
                                    result.data(), pool);
  copy_bytes(out, result, width * static_cast<int64_t>(sizeof(float)));
}

void Backend::layer_norm(DevicePtr<float> x, int64_t num_rows, int64_t dim, const float* weight, const float* bias,
                         float eps) {
  if (num_rows == 0) return;
  std::vector<float> rows = to_host_vector(*this, DevicePtr<const float>(x), num_rows * dim);
  attention::layer_norm(rows.data(), num_rows, static_cast<int>(dim), weight, bias, eps, rows.data());
  copy_bytes(x, rows, num_rows * dim * static_cast<int64_t>(sizeof(float)));
}

// The layout is planned on the host: the routing comes back first (a plain copy on the CPU).
void Backend::routed_experts_planned_on_host(DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                                             DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights,
                                             int top_k, int num_experts,
                                             const std::function<ExpertWeights(int expert)>& expert_weights,
                                             DevicePtr<float> out) {
  const auto num_entries = static_cast<size_t>(num_tokens * top_k);
  const std::vector<int32_t> ids = to_host_vector(*this, expert_ids, static_cast<int64_t>(num_entries));
  const std::vector<float> gate_weights = to_host_vector(*this, weights, static_cast<int64_t>(num_entries));
  Result<experts::ExpertDispatchLayout> layout =
      experts::layout_from_routing(ids, gate_weights, num_tokens, top_k, num_experts);
  MOERT_CHECK(layout.is_ok(), "routing: " << layout.status().message());
  const auto dim = static_cast<size_t>(hidden_size);
  const Buffer contributions = allocate(DType::kF32, {static_cast<int64_t>(num_entries), hidden_size});  // [T * K, D]
  const DeviceSpan<float> rows(contributions.ptr<float>(), num_entries * dim);
  grouped_expert_ffn(*layout, {h, static_cast<size_t>(num_tokens) * dim}, hidden_size, expert_weights, rows);
  combine_rows(experts::expert_order_of_tokens(ids, num_tokens, top_k), top_k, rows, hidden_size,
               {out, static_cast<size_t>(num_tokens) * dim});
}

void Backend::route_on_host(const experts::RouterConfig& config, DevicePtr<const float> logits, int64_t num_tokens,
                            const float* selection_bias, DevicePtr<int32_t> expert_ids,
                            DevicePtr<float> weights) {
  if (num_tokens == 0) return;
  const int64_t count = num_tokens * config.top_k;
  const std::vector<float> host_logits = to_host_vector(*this, logits, num_tokens * config.num_experts);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::vector<float> gate_weights(static_cast<size_t>(count));
  experts::route_tokens(config, host_logits.data(), num_tokens, selection_bias, ids.data(), gate_weights.data());
  copy_bytes(expert_ids, ids, count * static_cast<int64_t>(sizeof(int32_t)));
  copy_bytes(weights, gate_weights, count * static_cast<int64_t>(sizeof(float)));
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

void route_on(Backend& backend, const experts::RouterConfig& config, DevicePtr<const float> logits,
              int64_t num_tokens, const float* selection_bias, DevicePtr<int32_t> expert_ids,
              DevicePtr<float> weights) {
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

void routed_experts_on(Backend& backend, DevicePtr<const float> h, int64_t num_tokens, int hidden_size,
                       DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, int top_k,
                       int num_experts, const std::function<Backend::ExpertWeights(int expert)>& expert_weights,
                       DevicePtr<float> out) {
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
