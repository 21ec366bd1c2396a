// The host regions the forward reads, walked with a reference to the member that points at
// each one, so one walk serves readers (for_each_weight_region) and the step that moves
// regions out of the checkpoint's mappings (hold_weights_in_memory). Internal to
// runtime/model.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "quant/quantized_weight.h"
#include "runtime/model/weights.h"

namespace moert::weight_regions {

// The regions of one view / F32 vector / linear weight / linear with its bias / gated MLP,
// as walk() visits them (below).
template <typename View, typename Visit>
void walk_view(View& v, Visit&& visit) {
  if (v.data == nullptr) return;
  const std::optional<uint64_t> bytes = dtype_storage_bytes(v.dtype, static_cast<uint64_t>(v.numel()));
  if (bytes.has_value()) visit(v.data, static_cast<int64_t>(*bytes));
}
template <typename Visit>
void walk_floats(const std::vector<float>& values, Visit&& visit) {
  const float* data = values.data();
  if (!values.empty()) visit(data, static_cast<int64_t>(values.size() * sizeof(float)));
}
template <typename Weight, typename Visit>
void walk_weight(Weight& w, Visit&& visit) {
  if (!w.packed.has_value()) {
    walk_view(w.dense, visit);
    return;
  }
  // The whole packed storage of the weight: data, then the scales its format uses.
  auto& q = *w.packed;
  const quant::QuantizedWeightSizes sizes = quant::quantized_weight_sizes(q);
  visit(q.data, sizes.data);
  if (sizes.scales > 0) visit(q.scales, sizes.scales);
  if (sizes.block_scales > 0) visit(q.block_scale_inv, sizes.block_scales);
}
template <typename Linear, typename Visit>
void walk_linear(Linear& l, Visit&& visit) {
  walk_weight(l.weight, visit);
  walk_floats(l.bias, visit);
}
template <typename Mlp, typename Visit>
void walk_mlp(Mlp& m, Visit&& visit) {
  walk_linear(m.gate, visit);
  walk_linear(m.up, visit);
  walk_linear(m.down, visit);
}

// Calls visit(pointer, bytes) for each region: `pointer` is the view's or the packed weight's
// own member (void*, const uint8_t* or const float*; const when `Weights` is const), so a
// visitor of a mutable ModelWeights may point it elsewhere. The F32 vectors (norms, biases)
// are owned copies: their `pointer` is a local copy, and pointing it elsewhere changes
// nothing. Routed experts for which skip_routed_expert(layer, expert) holds are not visited.
// Visits in the order: embedding, final norm, LM head, the MTP modules' own tensors, then per layer its vectors and
// per-head matrices, router, the attention and MLP linears (weight, then bias).
template <typename Weights, typename Visit, typename SkipRoutedExpert>
void walk(Weights& weights, Visit&& visit, SkipRoutedExpert&& skip_routed_expert) {
  auto view = [&](auto& v) { walk_view(v, visit); };
  auto floats = [&](const std::vector<float>& values) { walk_floats(values, visit); };
  auto weight = [&](auto& w) { walk_weight(w, visit); };
  auto linear = [&](auto& l) { walk_linear(l, visit); };
  auto mlp = [&](auto& m) { walk_mlp(m, visit); };
  view(weights.embed_tokens);
  floats(weights.final_norm);
  weight(weights.lm_head);
  for (auto& module : weights.mtp) {  // the MTP modules' own tensors; their blocks are layers below
    view(module.embed_tokens);
    for (const std::vector<float>* values : {&module.enorm, &module.hnorm, &module.head_norm}) floats(*values);
    linear(module.eh_proj);
    if (module.head.has_value()) weight(*module.head);
  }
  for (size_t layer_idx = 0; layer_idx < weights.layers.size(); ++layer_idx) {
    auto& layer = weights.layers[layer_idx];
    floats(layer.input_norm);
    floats(layer.post_attention_norm);
    auto& a = layer.attention;
    for (const std::vector<float>* values : {&a.q_norm, &a.k_norm, &a.sinks, &a.q_a_norm, &a.kv_a_norm,
                                             &a.indexer.k_norm_weight, &a.indexer.k_norm_bias}) {
      floats(*values);
    }
    view(a.key_absorb);
    view(a.value_up);
    for (auto* l : {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.kv_a, &a.indexer.wq_b, &a.indexer.wk, &a.indexer.weights_proj}) {
      linear(*l);
    }
    auto& la = layer.linear_attention;
    for (const std::vector<float>* values : {&la.conv, &la.a_log, &la.dt_bias, &la.norm}) floats(*values);
    for (auto* l : {&la.qkv, &la.z, &la.b, &la.a, &la.out}) linear(*l);
    if (!layer.is_moe) {
      mlp(layer.dense_mlp);
      continue;
    }
    auto& moe = layer.moe;
    view(moe.router);
    floats(moe.router_bias);
    floats(moe.correction_bias);  // DeepSeek-V3 selection bias
    view(moe.shared_expert_gate);
    for (size_t expert_idx = 0; expert_idx < moe.experts.size(); ++expert_idx) {
      if (!skip_routed_expert(static_cast<int>(layer_idx), static_cast<int>(expert_idx))) mlp(moe.experts[expert_idx]);
    }
    if (moe.shared_expert.has_value()) mlp(*moe.shared_expert);
  }
}

}  // namespace moert::weight_regions
