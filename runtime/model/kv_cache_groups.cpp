#include "runtime/model/kv_cache_groups.h"

#include <string>

namespace moert {

Result<std::vector<attention::KvCacheSpec>> kv_cache_groups(const ModelConfig& config, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF8E4M3) {
    return invalid_argument(std::string("KV cache dtype ") + std::string(dtype_name(dtype)) +
                            " is not F32, BF16 or F8_E4M3");
  }
  const std::vector<LayerSpec> layers = build_layer_specs(*config.arch, config);
  std::vector<attention::KvCacheSpec> groups;
  for (int layer = 0; layer < static_cast<int>(layers.size()); ++layer) {
    const LayerSpec& spec = layers[static_cast<size_t>(layer)];
    // A linear-attention layer keeps no K/V: its recurrent state has a fixed size per sequence
    // (runner::RecurrentStateLayout, docs/gated-deltanet.md).
    if (spec.attention == AttentionKind::kGatedDeltaNet) continue;
    attention::KvCacheSpec wanted;
    wanted.dtype = dtype;
    wanted.num_kv_heads = config.num_kv_heads;
    wanted.head_dim = config.head_dim;
    switch (spec.attention) {
      case AttentionKind::kFull: wanted.kind = attention::KvCacheKind::kFullAttention; break;
      case AttentionKind::kSlidingWindow:
        if (spec.sliding_window <= 0) {
          return invalid_argument("layer " + std::to_string(layer) + " is sliding-window attention with window " +
                                  std::to_string(spec.sliding_window) + " (must be > 0)");
        }
        wanted.kind = attention::KvCacheKind::kSlidingWindow;
        wanted.sliding_window = spec.sliding_window;
        break;
      case AttentionKind::kMla:  // one row [c | k_pe] of head_dim values (config.h, docs/mla.md)
        wanted.kind = attention::KvCacheKind::kLatent;
        wanted.latent_width = config.head_dim;
        // DSA: the indexer key kI rides at the end of the row, [c | k_pe | kI]
        // (docs/sparse-attention.md), so it pages, copies and rolls back with the latent.
        // GLM-5.2's shared layers have no indexer: their rows are [c | k_pe] (another group).
        if (config.dsa.has_indexer(layer)) wanted.latent_width += config.dsa.index_head_dim;
        wanted.head_dim = wanted.latent_width;
        break;
      case AttentionKind::kGatedDeltaNet: break;  // skipped above
    }
    attention::KvCacheSpec* group = nullptr;
    for (attention::KvCacheSpec& existing : groups) {
      if (existing.kind == wanted.kind && existing.sliding_window == wanted.sliding_window &&
          existing.latent_width == wanted.latent_width) {
        group = &existing;
      }
    }
    if (group == nullptr) group = &groups.emplace_back(wanted);
    group->layers.push_back(layer);
  }
  return groups;
}

}  // namespace moert
