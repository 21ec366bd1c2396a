// Mixtral (MixtralForCausalLM): every layer MoE, softmax top-k router that always
// renormalises; the MoE block lives under `block_sparse_moe` with w1/w3/w2 expert names.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"mixtral"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("num_local_experts"));
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
  c->router.norm_topk_prob = true;  // Mixtral always renormalises the top-k weights
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("intermediate_size"));
  c->dense_intermediate_size = c->moe_intermediate_size;
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), true);
  if (r.is_set("sliding_window")) {
    return unsupported("config.json 'sliding_window' = " + r.raw("sliding_window").dump() +
                       " is not supported yet (null only)");
  }
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  j["num_local_experts"] = c.router.num_experts;
  j["intermediate_size"] = c.moe_intermediate_size;
  j["sliding_window"] = nullptr;
}

void apply_preset(ModelConfig* c) {
  c->router.norm_topk_prob = true;
  c->dense_intermediate_size = c->moe_intermediate_size;
}

}  // namespace

extern const ArchSpec mixtral = {
    .hf_class = "MixtralForCausalLM",
    .model_type = "mixtral",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {.moe_block = "block_sparse_moe", .expert_projections = {"w1", "w3", "w2"}},
};

}  // namespace moert::arch
