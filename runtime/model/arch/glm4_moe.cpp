// GLM-4.5 (Glm4MoeForCausalLM): sigmoid group-limited router with a correction bias and a
// routed scale, an ungated shared expert, the first k layers dense, partial rotary.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"glm4_moe", "glm4moe"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("n_routed_experts"));
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
  c->router.score_func = experts::ScoreFunc::kSigmoid;
  MOERT_ASSIGN_OR_RETURN(c->router.norm_topk_prob, r.optional_bool("norm_topk_prob", true));
  MOERT_ASSIGN_OR_RETURN(double scale, r.optional_number("routed_scaling_factor", 1.0));
  c->router.routed_scaling_factor = static_cast<float>(scale);
  MOERT_ASSIGN_OR_RETURN(c->router.n_group, r.optional_int("n_group", 1));
  MOERT_ASSIGN_OR_RETURN(c->router.topk_group, r.optional_int("topk_group", 1));
  c->router_has_correction_bias = true;
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("moe_intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(c->dense_intermediate_size, r.required_int("intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(int num_shared, r.optional_int("n_shared_experts", 0));
  if (num_shared < 0) return invalid_argument("config.json 'n_shared_experts' must be >= 0");
  c->shared_intermediate_size = c->moe_intermediate_size * num_shared;
  c->shared_expert = num_shared > 0 ? SharedExpertKind::kUngated : SharedExpertKind::kNone;
  MOERT_ASSIGN_OR_RETURN(int first_dense, r.optional_int("first_k_dense_replace", 0));
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), false);
  for (int i = first_dense; i < c->num_layers; ++i) c->layer_is_moe[static_cast<size_t>(i)] = true;
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
  MOERT_ASSIGN_OR_RETURN(c->qk_norm, r.optional_bool("use_qk_norm", false));
  MOERT_ASSIGN_OR_RETURN(double partial, r.optional_number("partial_rotary_factor", 0.5));
  if (!(partial > 0.0 && partial <= 1.0)) {
    return invalid_argument("config.json 'partial_rotary_factor' = " + std::to_string(partial) + " must be in (0, 1]");
  }
  c->rotary_dim = static_cast<int>(c->head_dim * partial);
  MOERT_ASSIGN_OR_RETURN(int nextn, r.optional_int("num_nextn_predict_layers", 0));
  (void)nextn;  // MTP layers (model.layers.{num_layers}.*) are not loaded
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  j["n_routed_experts"] = c.router.num_experts;
  j["norm_topk_prob"] = c.router.norm_topk_prob;
  j["routed_scaling_factor"] = c.router.routed_scaling_factor;
  j["n_group"] = c.router.n_group;
  j["topk_group"] = c.router.topk_group;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["intermediate_size"] = c.dense_intermediate_size;
  j["n_shared_experts"] = c.moe_intermediate_size > 0 ? c.shared_intermediate_size / c.moe_intermediate_size : 0;
  int first_dense = 0;
  while (first_dense < c.num_layers && !c.layer_is_moe[static_cast<size_t>(first_dense)]) ++first_dense;
  j["first_k_dense_replace"] = first_dense;
  j["attention_bias"] = c.qkv_bias;
  j["use_qk_norm"] = c.qk_norm;
  j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / c.head_dim;
  j["num_nextn_predict_layers"] = 0;
}

// 2 groups keep 1, scale 2.5, one shared expert, layer 0 dense, partial rotary 0.5,
// qkv bias, qk-norm.
void apply_preset(ModelConfig* c) {
  c->router.score_func = experts::ScoreFunc::kSigmoid;
  c->router.norm_topk_prob = true;
  c->router.routed_scaling_factor = 2.5f;
  c->router.n_group = c->router.num_experts % 2 == 0 ? 2 : 1;
  c->router.topk_group = 1;
  if (c->router.top_k > c->router.num_experts / c->router.n_group) c->router.n_group = 1;
  c->router_has_correction_bias = true;
  c->shared_expert = SharedExpertKind::kUngated;
  c->shared_intermediate_size = c->moe_intermediate_size;
  if (c->num_layers > 1) c->layer_is_moe[0] = false;
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
    .moe_block = "mlp.",
    .expert_projections = {"gate_proj", "up_proj", "down_proj"},
};

}  // namespace moert::arch
