// What Qwen2-MoE and Qwen3-MoE share: routing and layer-kind keys.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "runtime/model/arch/arch.h"

namespace moert::arch {

// num_experts, num_experts_per_tok, norm_topk_prob, widths, decoder_sparse_step,
// mlp_only_layers, use_sliding_window.
Status parse_qwen_moe(const ConfigReader& r, ModelConfig* c);
void qwen_moe_to_json(const ModelConfig& c, nlohmann::json& j);

}  // namespace moert::arch
