#include "runtime/model/arch/qwen_hybrid_common.h"

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"

namespace moert::arch {

using nlohmann::json;

namespace {

constexpr const char* kLinear = "linear_attention";
constexpr const char* kFull = "full_attention";

Status parse_layer_types(const ConfigReader& r, ModelConfig* c) {
  const auto layers = static_cast<size_t>(c->num_layers);
  c->layer_is_linear_attention.assign(layers, false);
  if (r.is_set("layer_types")) {
    const json& types = r.raw("layer_types");
    if (!types.is_array() || types.size() != layers) {
      return invalid_argument("config.json 'layer_types' must list one type per layer (" + std::to_string(layers) +
                              " for num_hidden_layers)");
    }
    for (size_t i = 0; i < layers; ++i) {
      if (types[i] != kLinear && types[i] != kFull) {
        return invalid_argument("config.json 'layer_types'[" + std::to_string(i) + "] = " + types[i].dump() +
                                " (expected \"linear_attention\" or \"full_attention\")");
      }
      c->layer_is_linear_attention[i] = types[i] == kLinear;
    }
    return Status::ok();
  }
  MOERT_ASSIGN_OR_RETURN(const int interval, r.optional_int("full_attention_interval", 4));
  MOERT_RETURN_IF_ERROR(check_positive("full_attention_interval", interval));
  for (size_t i = 0; i < layers; ++i) c->layer_is_linear_attention[i] = (i + 1) % static_cast<size_t>(interval) != 0;
  return Status::ok();
}

}  // namespace

Status parse_qwen_hybrid(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->head_dim, r.required_int("head_dim"));
  MOERT_RETURN_IF_ERROR(check_positive("head_dim", c->head_dim));
  MOERT_RETURN_IF_ERROR(parse_layer_types(r, c));
  LinearAttentionDims& l = c->linear_attention;
  MOERT_ASSIGN_OR_RETURN(l.num_key_heads, r.required_int("linear_num_key_heads"));
  MOERT_ASSIGN_OR_RETURN(l.key_head_dim, r.required_int("linear_key_head_dim"));
  MOERT_ASSIGN_OR_RETURN(l.num_value_heads, r.required_int("linear_num_value_heads"));
  MOERT_ASSIGN_OR_RETURN(l.value_head_dim, r.required_int("linear_value_head_dim"));
  MOERT_ASSIGN_OR_RETURN(l.conv_width, r.optional_int("linear_conv_kernel_dim", 4));
  for (auto [key, value] : {std::pair{"linear_num_key_heads", l.num_key_heads}, {"linear_key_head_dim", l.key_head_dim},
                            {"linear_num_value_heads", l.num_value_heads}, {"linear_value_head_dim", l.value_head_dim},
                            {"linear_conv_kernel_dim", l.conv_width}}) {
    MOERT_RETURN_IF_ERROR(check_positive(key, value));
  }
  if (l.num_value_heads % l.num_key_heads != 0) {
    return invalid_argument("config.json 'linear_num_key_heads' = " + std::to_string(l.num_key_heads) +
                            " must divide 'linear_num_value_heads' = " + std::to_string(l.num_value_heads));
  }
  // The recurrent state is kept in F32 whatever mamba_ssm_dtype asks (docs/gated-deltanet.md).
  if (r.is_set("mamba_ssm_dtype") && !r.raw("mamba_ssm_dtype").is_string()) {
    return invalid_argument("config.json 'mamba_ssm_dtype' must be a dtype name");
  }
  MOERT_ASSIGN_OR_RETURN(c->attention_output_gate, r.optional_bool("attn_output_gate", true));
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
  MOERT_ASSIGN_OR_RETURN(const double partial, partial_rotary_factor(r, 0.25));
  c->rotary_dim = static_cast<int>(c->head_dim * partial);
  MOERT_ASSIGN_OR_RETURN(c->shared_intermediate_size, r.required_int("shared_expert_intermediate_size"));
  c->shared_expert = c->shared_intermediate_size > 0 ? SharedExpertKind::kSigmoidGated : SharedExpertKind::kNone;
  c->qk_norm = true;
  c->norm_weights_offset_by_one = true;
  return Status::ok();
}

void qwen_hybrid_to_json(const ModelConfig& c, json& j) {
  const LinearAttentionDims& l = c.linear_attention;
  json types = json::array();
  for (bool linear : c.layer_is_linear_attention) types.push_back(linear ? kLinear : kFull);
  j["layer_types"] = types;
  j["linear_num_key_heads"] = l.num_key_heads;
  j["linear_key_head_dim"] = l.key_head_dim;
  j["linear_num_value_heads"] = l.num_value_heads;
  j["linear_value_head_dim"] = l.value_head_dim;
  j["linear_conv_kernel_dim"] = l.conv_width;
  j["mamba_ssm_dtype"] = "float32";
  j["attn_output_gate"] = c.attention_output_gate;
  j["attention_bias"] = c.qkv_bias;
  j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / c.head_dim;
  j["shared_expert_intermediate_size"] = c.shared_intermediate_size;
}

void apply_qwen_hybrid_preset(ModelConfig* c) {
  c->layer_is_linear_attention.assign(static_cast<size_t>(c->num_layers), false);
  for (int i = 0; i + 1 < c->num_layers; ++i) c->layer_is_linear_attention[static_cast<size_t>(i)] = (i + 1) % 4 != 0;
  LinearAttentionDims& l = c->linear_attention;
  l.num_key_heads = c->num_kv_heads;
  l.num_value_heads = 2 * c->num_kv_heads;
  l.key_head_dim = c->head_dim / 2;
  l.value_head_dim = c->head_dim * 3 / 8;
  l.conv_width = 4;
  c->attention_output_gate = true;
  c->rotary_dim = c->head_dim / 4 - (c->head_dim / 4) % 2;
  c->shared_expert = SharedExpertKind::kSigmoidGated;
  c->shared_intermediate_size = c->moe_intermediate_size;
  c->qk_norm = true;
  c->norm_weights_offset_by_one = true;
  c->router.norm_topk_prob = true;
}

}  // namespace moert::arch
