// GLM-4.5 (Glm4MoeForCausalLM): sigmoid group-limited router with a correction bias and a
// routed scale, an ungated shared expert, the first k layers dense, partial rotary.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/arch/deepseek_moe_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"glm4_moe", "glm4moe"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(parse_deepseek_moe(r, {.routed_scaling_factor = 1.0, .n_group = 1, .topk_group = 1,
                                               .n_shared_experts = 0, .first_k_dense_replace = 0},
                                           c));
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
  MOERT_ASSIGN_OR_RETURN(c->qk_norm, r.optional_bool("use_qk_norm", false));
  MOERT_ASSIGN_OR_RETURN(const double partial, partial_rotary_factor(r, 0.5));
  c->rotary_dim = static_cast<int>(c->head_dim * partial);
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  deepseek_moe_to_json(c, j);
  j["attention_bias"] = c.qkv_bias;
  j["use_qk_norm"] = c.qk_norm;
  j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / c.head_dim;
}

// 2 groups keep 1, scale 2.5, one shared expert, layer 0 dense, partial rotary 0.5,
// qkv bias, qk-norm.
void apply_preset(ModelConfig* c) {
  apply_deepseek_moe_preset(c, /*groups=*/2, /*kept=*/1);
  c->qkv_bias = true;
  c->qk_norm = true;
  c->rotary_dim = c->head_dim / 2 - (c->head_dim / 2) % 2;
  c->rms_norm_eps = 1e-5f;
}

}  // namespace

extern const ArchSpec glm4_moe = {
    .hf_class = "Glm4MoeForCausalLM",
    .model_type = "glm4_moe",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,
    .router = RouterKind::kSigmoidGroupLimited,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {},
};

}  // namespace moert::arch
