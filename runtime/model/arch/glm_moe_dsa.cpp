// GLM-5 / GLM-5.1 (GlmMoeDsaForCausalLM, model_type glm_moe_dsa; docs/sparse-attention.md):
// DeepSeek-V3's MLA, router and layer plan (deepseek_v3.cpp) with DeepSeek Sparse Attention in
// every layer: a lightning indexer with interleaved RoPE (`indexer_rope_interleave`), no YaRN,
// v width != nope width, the q_a / kv_a RMSNorms at eps 1e-6 while the layer norms use
// rms_norm_eps (1e-5). GLM-5.2: indexers only on "full" layers (`indexer_types`; dsa_common.h).
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/arch/dsa_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
extern const ArchSpec deepseek_v3;

namespace {

constexpr const char* kAliases[] = {"glm_moe_dsa", "glm5", "glm5dsa"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_RETURN_IF_ERROR(deepseek_v3.parse(r, c));
  // Hugging Face builds q_a_layernorm / kv_a_layernorm without an eps (1e-6).
  c->mla.norm_eps = 1e-6f;
  // Every GLM-5 release config says `indexer_rope_interleave: true`; interleaved is also
  // what vLLM and llama.cpp run when it is absent.
  return parse_sparse_attention(r, /*default_interleaved=*/true, c);
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  deepseek_v3.to_json(c, j);
  sparse_attention_to_json(c, j);
}

// The glm5dsa-tiny shape scaled by the size preset: DeepSeek-V3's MLA split, v twice the
// nope width, no YaRN (theta 1e6), one router group, rms eps 1e-5, indexer interleaved.
void apply_preset(ModelConfig* c) {
  deepseek_v3.apply_preset(c);
  c->mla.v_head_dim = 2 * c->mla.qk_nope_head_dim;
  c->mla.norm_eps = 1e-6f;
  c->rope_scaling = attention::RopeScaling{};
  c->rope_theta = 1e6;
  c->rms_norm_eps = 1e-5f;
  c->router.n_group = 1;
  c->router.topk_group = 1;
  apply_sparse_attention_preset(c, /*interleaved=*/true);
}

}  // namespace

extern const ArchSpec glm_moe_dsa = {
    .hf_class = "GlmMoeDsaForCausalLM",
    .model_type = "glm_moe_dsa",
    .aliases = kAliases,
    .attention = AttentionKind::kMla,
    .router = RouterKind::kSigmoidGroupLimited,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {},
};

}  // namespace moert::arch
