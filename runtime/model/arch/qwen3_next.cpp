// Qwen3-Next (Qwen3NextForCausalLM): Gated DeltaNet layers between gated full-attention layers
// (qwen_hybrid_common.h), their q/k/v/z and b/a projections stored fused and grouped by key
// head (docs/gated-deltanet.md), Qwen-MoE routing keys, per-expert tensors.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/qwen_common.h"
#include "runtime/model/arch/qwen_hybrid_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"qwen3_next", "qwen3next"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(parse_qwen_moe(r, c));
  MOERT_RETURN_IF_ERROR(parse_qwen_hybrid(r, c));
  c->linear_attention.grouped_projections = true;
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  qwen_moe_to_json(c, j);
  qwen_hybrid_to_json(c, j);
}

void apply_preset(ModelConfig* c) {
  apply_qwen_hybrid_preset(c);
  c->linear_attention.grouped_projections = true;
}

}  // namespace

extern const ArchSpec qwen3_next = {
    .hf_class = "Qwen3NextForCausalLM",
    .model_type = "qwen3_next",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,  // per layer from layer_types
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {.shared_expert = "shared_expert"},
};

}  // namespace moert::arch
