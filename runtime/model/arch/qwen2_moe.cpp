// Qwen2-MoE (Qwen2MoeForCausalLM): softmax top-k router, qkv bias, a sigmoid-gated
// shared expert.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/qwen_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"qwen2_moe", "qwen2moe"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(parse_qwen_moe(r, c));
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("qkv_bias", true));
  MOERT_ASSIGN_OR_RETURN(c->shared_intermediate_size, r.required_int("shared_expert_intermediate_size"));
  c->shared_expert = c->shared_intermediate_size > 0 ? SharedExpertKind::kSigmoidGated : SharedExpertKind::kNone;
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  qwen_moe_to_json(c, j);
  j["qkv_bias"] = c.qkv_bias;
  j["shared_expert_intermediate_size"] = c.shared_intermediate_size;
}

// A gated shared expert of the expert width.
void apply_preset(ModelConfig* c) {
  c->qkv_bias = true;
  c->shared_expert = SharedExpertKind::kSigmoidGated;
  c->shared_intermediate_size = c->moe_intermediate_size;
}

}  // namespace

extern const ArchSpec qwen2_moe = {
    .hf_class = "Qwen2MoeForCausalLM",
    .model_type = "qwen2_moe",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {.shared_expert = "shared_expert"},
};

}  // namespace moert::arch
