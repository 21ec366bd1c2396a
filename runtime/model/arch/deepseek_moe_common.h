// What DeepSeek-V3 and GLM-4.5 share (docs/moe.md §1.4): the sigmoid router with a
// selection-only correction bias, group-limited top-k, renormalised and scaled weights,
// ungated shared experts and the first k layers dense; and their config.json keys.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "runtime/model/arch/arch.h"

namespace moert::arch {

// n_routed_experts, num_experts_per_tok, norm_topk_prob, routed_scaling_factor, n_group,
// topk_group, moe_intermediate_size, intermediate_size, n_shared_experts,
// first_k_dense_replace; `defaults` fill the keys a config may omit.
struct DeepseekMoeDefaults {
  double routed_scaling_factor;
  int n_group, topk_group, n_shared_experts, first_k_dense_replace;
};
Status parse_deepseek_moe(const ConfigReader& r, const DeepseekMoeDefaults& defaults, ModelConfig* c);
void deepseek_moe_to_json(const ModelConfig& c, nlohmann::json& j);
// make-model: scale 2.5, one shared expert, layer 0 dense, `groups` groups keeping
// `kept` (fewer when the experts do not split so that top-k fits).
void apply_deepseek_moe_preset(ModelConfig* c, int groups, int kept);

}  // namespace moert::arch
