// Qwen3.5-MoE / Qwen3.6-MoE (Qwen3_5MoeForConditionalGeneration), the text model: the
// Qwen3-Next layer stack (qwen_hybrid_common.h) with four separate linear-attention input
// projections, every layer MoE with top-k weights always renormalised, the text keys under
// `text_config` and the tensors under `model.language_model.` (the vision tower `model.visual.*`
// and the MTP `mtp.*` are not read). Routed experts fused (experts.gate_up_proj [E, 2I, D],
// down_proj [E, D, I]) or per expert, whichever the checkpoint holds (docs/gated-deltanet.md).
#include <nlohmann/json.hpp>

#include "runtime/model/arch/qwen_hybrid_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"qwen3_5_moe", "qwen35moe"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("num_experts"));
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("moe_intermediate_size"));
  c->router.norm_topk_prob = true;
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), true);
  c->fused_gate_up_experts = true;
  return parse_qwen_hybrid(r, c);
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  j["model_type"] = "qwen3_5_moe_text";
  j["num_experts"] = c.router.num_experts;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  qwen_hybrid_to_json(c, j);
}

void apply_preset(ModelConfig* c) {
  apply_qwen_hybrid_preset(c);
  c->fused_gate_up_experts = true;
}

}  // namespace

extern const ArchSpec qwen3_5_moe = {
    .hf_class = "Qwen3_5MoeForConditionalGeneration",
    .model_type = "qwen3_5_moe",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,  // per layer from layer_types
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {.embed_tokens = "model.language_model.embed_tokens",
              .final_norm = "model.language_model.norm",
              .layers = "model.language_model.layers",
              .shared_expert = "shared_expert"},
    .text_config = "text_config",
};

}  // namespace moert::arch
