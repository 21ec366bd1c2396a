// Qwen3-MoE (Qwen3MoeForCausalLM): softmax top-k router, qk-norm, no shared expert.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/qwen_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"qwen3_moe", "qwen3moe"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(parse_qwen_moe(r, c));
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
  c->qk_norm = true;
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  qwen_moe_to_json(c, j);
  j["attention_bias"] = c.qkv_bias;
}

void apply_preset(ModelConfig* c) {
  c->router.norm_topk_prob = true;
  c->qk_norm = true;
}

}  // namespace

extern const ArchSpec qwen3_moe = {
    .hf_class = "Qwen3MoeForCausalLM",
    .model_type = "qwen3_moe",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {},
};

}  // namespace moert::arch
