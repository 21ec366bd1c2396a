// DeepSeek-V3 / R1 and Kimi-K2 (DeepseekV3ForCausalLM, docs/mla.md): multi-head latent
// attention (optional q LoRA, a compressed KV latent normalised on its own, one shared
// interleaved-RoPE key per token, per-head up-projections of the latent), YaRN with the
// mscale folded into the softmax scale, the noaux_tc router (sigmoid, selection-only
// correction bias, group-limited top-k, renormalised and scaled weights), ungated shared
// experts, the first k layers dense. Kimi-K2.5 / K2.6 (KimiK25ForConditionalGeneration) is this
// text model under `text_config`, its tensors under `language_model.` (the vision tower is not
// read): a second ArchSpec below with the same rules.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/arch/deepseek_moe_common.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"deepseek_v3", "deepseekv3", "kimi_k2"};
constexpr const char* kKimiK25Aliases[] = {"kimi_k25", "kimi_k2_5"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  // Defaults: transformers' DeepseekV3Config.
  MOERT_RETURN_IF_ERROR(parse_deepseek_moe(r, {.routed_scaling_factor = 2.5, .n_group = 8, .topk_group = 4,
                                               .n_shared_experts = 1, .first_k_dense_replace = 3},
                                           c));
  for (auto [key, expected] : {std::pair{"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"}}) {
    if (r.is_set(key) && r.raw(key) != expected) {
      return unsupported(std::string("config.json '") + key + "' = " + r.raw(key).dump() + " (only \"" + expected +
                         "\", the DeepSeek-V3 router)");
    }
  }
  LatentAttentionDims& m = c->mla;
  MOERT_ASSIGN_OR_RETURN(m.q_lora_rank, r.optional_int("q_lora_rank", 0));
  MOERT_ASSIGN_OR_RETURN(m.kv_lora_rank, r.required_int("kv_lora_rank"));
  MOERT_ASSIGN_OR_RETURN(m.qk_nope_head_dim, r.required_int("qk_nope_head_dim"));
  MOERT_ASSIGN_OR_RETURN(m.qk_rope_head_dim, r.required_int("qk_rope_head_dim"));
  MOERT_ASSIGN_OR_RETURN(m.v_head_dim, r.required_int("v_head_dim"));
  if (m.q_lora_rank < 0) return invalid_argument("config.json 'q_lora_rank' must be >= 0 or null");
  for (auto [key, value] : {std::pair{"kv_lora_rank", m.kv_lora_rank}, {"qk_nope_head_dim", m.qk_nope_head_dim},
                            {"qk_rope_head_dim", m.qk_rope_head_dim}, {"v_head_dim", m.v_head_dim}}) {
    MOERT_RETURN_IF_ERROR(check_positive(key, value));
  }
  MOERT_ASSIGN_OR_RETURN(bool interleave, r.optional_bool("rope_interleave", true));
  c->rope_pairing = interleave ? attention::RopePairing::kInterleaved : attention::RopePairing::kRotateHalf;
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
  c->o_bias = c->qkv_bias;
  // The absorbed form's geometry (config.h): one latent row [c | k_pe] per token.
  c->num_kv_heads = 1;
  c->head_dim = m.kv_lora_rank + m.qk_rope_head_dim;
  c->rotary_dim = m.qk_rope_head_dim;
  // Softmax scale (docs/mla.md): (dn + dr)^-0.5, times m(factor, mscale_all_dim)^2 under YaRN.
  double scale = 1.0 / std::sqrt(static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim));
  const attention::RopeScaling& y = c->rope_scaling;
  if (y.kind == attention::RopeScaling::Kind::kYarn && y.mscale_all_dim != 0.0) {
    const double mscale = attention::yarn_mscale(y.factor, y.mscale_all_dim);
    scale *= mscale * mscale;
  }
  c->attention_softmax_scale = static_cast<float>(scale);
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  deepseek_moe_to_json(c, j);
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["moe_layer_freq"] = 1;
  j["q_lora_rank"] = c.mla.q_lora_rank > 0 ? nlohmann::json(c.mla.q_lora_rank) : nlohmann::json(nullptr);
  j["kv_lora_rank"] = c.mla.kv_lora_rank;
  j["qk_nope_head_dim"] = c.mla.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.mla.qk_rope_head_dim;
  j["v_head_dim"] = c.mla.v_head_dim;
  j["rope_interleave"] = c.rope_pairing == attention::RopePairing::kInterleaved;
  j["attention_bias"] = c.qkv_bias;
  // As Hugging Face writes them: every query head has its own keys and values once the
  // latent is expanded; head_dim names the rotary width.
  j["num_key_value_heads"] = c.num_heads;
  j["head_dim"] = c.mla.qk_rope_head_dim;
}

// The shape of the shared deepseekv3-tiny case scaled by the size preset: q LoRA 3/8 and
// kv LoRA 1/4 of the hidden size, nope and v half a head, rope a quarter; 4 groups keep 2;
// YaRN x4 over 256 original positions with mscale 1 (so the softmax scale carries m^2).
void apply_preset(ModelConfig* c) {
  apply_deepseek_moe_preset(c, /*groups=*/4, /*kept=*/2);
  LatentAttentionDims& m = c->mla;
  const int head = c->head_dim;
  m.q_lora_rank = 3 * c->hidden_size / 8;
  m.kv_lora_rank = c->hidden_size / 4;
  m.qk_nope_head_dim = head / 2;
  m.qk_rope_head_dim = std::max(2, head / 4 - (head / 4) % 2);
  m.v_head_dim = head / 2;
  c->num_kv_heads = c->num_heads;
  c->rope_pairing = attention::RopePairing::kInterleaved;
  c->rope_scaling.kind = attention::RopeScaling::Kind::kYarn;
  c->rope_scaling.factor = 4.0;
  c->rope_scaling.original_max_positions = 256.0;
  c->rope_scaling.mscale = 1.0;
  c->rope_scaling.mscale_all_dim = 1.0;
}

// Kimi-K2.5's text_config names its own model type.
void kimi_k25_to_json(const ModelConfig& c, nlohmann::json& j) {
  to_json(c, j);
  j["model_type"] = "kimi_k2";
}

}  // namespace

extern const ArchSpec deepseek_v3 = {
    .hf_class = "DeepseekV3ForCausalLM",
    .model_type = "deepseek_v3",
    .aliases = kAliases,
    .attention = AttentionKind::kMla,
    .router = RouterKind::kSigmoidGroupLimited,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {},
};

extern const ArchSpec kimi_k25 = {
    .hf_class = "KimiK25ForConditionalGeneration",
    .model_type = "kimi_k25",
    .aliases = kKimiK25Aliases,
    .attention = AttentionKind::kMla,
    .router = RouterKind::kSigmoidGroupLimited,
    .parse = parse,
    .to_json = kimi_k25_to_json,
    .apply_preset = apply_preset,
    .names = {.embed_tokens = "language_model.model.embed_tokens",
              .final_norm = "language_model.model.norm",
              .lm_head = "language_model.lm_head",
              .layers = "language_model.model.layers"},
    .text_config = "text_config",
};

}  // namespace moert::arch
