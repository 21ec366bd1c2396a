#include "runtime/model/arch/qwen_common.h"

#include <nlohmann/json.hpp>

#include "core/strict_json.h"
#include "runtime/model/config.h"

namespace moert::arch {

using nlohmann::json;

Status parse_qwen_moe(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("num_experts"));
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
  MOERT_ASSIGN_OR_RETURN(c->router.norm_topk_prob, r.optional_bool("norm_topk_prob", false));
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("moe_intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(c->dense_intermediate_size, r.required_int("intermediate_size"));
  MOERT_ASSIGN_OR_RETURN(int sparse_step, r.optional_int("decoder_sparse_step", 1));
  MOERT_RETURN_IF_ERROR(check_positive("decoder_sparse_step", sparse_step));
  std::vector<int> mlp_only_layers;
  if (r.is_set("mlp_only_layers")) {
    const json& list = r.raw("mlp_only_layers");
    if (!list.is_array()) return invalid_argument("config.json 'mlp_only_layers' must be a list of layer indices");
    for (const json& entry : list) {
      MOERT_ASSIGN_OR_RETURN(const int64_t layer,
                             json_integer_in_range(entry, "config.json 'mlp_only_layers' entry", INT32_MIN, INT32_MAX));
      mlp_only_layers.push_back(static_cast<int>(layer));
    }
  }
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), false);
  for (int i = 0; i < c->num_layers; ++i) {
    bool mlp_only = false;
    for (int layer : mlp_only_layers) mlp_only = mlp_only || layer == i;
    c->layer_is_moe[static_cast<size_t>(i)] = !mlp_only && (i + 1) % sparse_step == 0;
  }
  MOERT_ASSIGN_OR_RETURN(bool sliding, r.optional_bool("use_sliding_window", false));
  if (sliding) return unsupported("config.json 'use_sliding_window' = true is not supported yet");
  return Status::ok();
}

void qwen_moe_to_json(const ModelConfig& c, json& j) {
  // Layer kinds: "all MoE except these" through mlp_only_layers.
  std::vector<int> dense_layers;
  for (int i = 0; i < c.num_layers; ++i) {
    if (!c.layer_is_moe[static_cast<size_t>(i)]) dense_layers.push_back(i);
  }
  j["num_experts"] = c.router.num_experts;
  j["norm_topk_prob"] = c.router.norm_topk_prob;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["intermediate_size"] = c.dense_intermediate_size;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = dense_layers;
  j["use_sliding_window"] = false;
}

}  // namespace moert::arch
