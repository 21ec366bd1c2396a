#include "runtime/model/arch/deepseek_moe_common.h"

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"

namespace moert::arch {

Status parse_deepseek_moe(const ConfigReader& r, const DeepseekMoeDefaults& defaults, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("n_routed_experts"));
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
  c->router.score_func = experts::ScoreFunc::kSigmoid;
  MOERT_ASSIGN_OR_RETURN(c->router.norm_topk_prob, r.optional_bool("norm_topk_prob", true));
  MOERT_ASSIGN_OR_RETURN(double scale, r.optional_number("routed_scaling_factor", defaults.routed_scaling_factor));
  c->router.routed_scaling_factor = static_cast<float>(scale);
  MOERT_ASSIGN_OR_RETURN(c->router.n_group, r.optional_int("n_group", defaults.n_group));
  MOERT_ASSIGN_OR_RETURN(c->router.topk_group, r.optional_int("topk_group", defaults.topk_group));
  c->router_has_correction_bias = true;
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("moe_intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(c->dense_intermediate_size, r.required_int("intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(int num_shared, r.optional_int("n_shared_experts", defaults.n_shared_experts));
  if (num_shared < 0) return invalid_argument("config.json 'n_shared_experts' must be >= 0");
  c->shared_intermediate_size = c->moe_intermediate_size * num_shared;
  c->shared_expert = num_shared > 0 ? SharedExpertKind::kUngated : SharedExpertKind::kNone;
  MOERT_ASSIGN_OR_RETURN(int first_dense, r.optional_int("first_k_dense_replace", defaults.first_k_dense_replace));
  if (first_dense < 0) return invalid_argument("config.json 'first_k_dense_replace' must be >= 0");
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), false);
  for (int i = first_dense; i < c->num_layers; ++i) c->layer_is_moe[static_cast<size_t>(i)] = true;
  MOERT_ASSIGN_OR_RETURN(c->num_unused_extra_layers, r.optional_int("num_nextn_predict_layers", 0));
  if (c->num_unused_extra_layers < 0) return invalid_argument("config.json 'num_nextn_predict_layers' must be >= 0");
  // The MTP modules (model.layers.{num_layers + k}.*) are bound only when asked for (docs/mtp.md).
  c->num_mtp_layers = c->num_unused_extra_layers;
  return Status::ok();
}

void deepseek_moe_to_json(const ModelConfig& c, nlohmann::json& j) {
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
  j["num_nextn_predict_layers"] = c.num_mtp_layers;
}

void apply_deepseek_moe_preset(ModelConfig* c, int groups, int kept) {
  c->router.score_func = experts::ScoreFunc::kSigmoid;
  c->router.norm_topk_prob = true;
  c->router.routed_scaling_factor = 2.5f;
  c->router.n_group = c->router.num_experts % groups == 0 ? groups : 1;
  c->router.topk_group = c->router.n_group == 1 ? 1 : kept;
  if (c->router.top_k > c->router.topk_group * (c->router.num_experts / c->router.n_group)) {
    c->router.n_group = c->router.topk_group = 1;
  }
  c->router_has_correction_bias = true;
  c->shared_expert = SharedExpertKind::kUngated;
  c->shared_intermediate_size = c->moe_intermediate_size;
  if (c->num_layers > 1) c->layer_is_moe[0] = false;
}

}  // namespace moert::arch
