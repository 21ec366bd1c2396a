// gpt-oss (GptOssForCausalLM, docs/gpt-oss.md): every layer MoE; attention with q/k/v/o
// biases, a learned sink logit per head, and layer_types alternating sliding-window and full
// attention; YaRN RoPE (rope_scaling, truncate false in the release); a router linear with
// bias whose top-k logits are softmaxed (= softmax over all, top-k, renormalise); experts
// stacked under mlp.experts with interleaved gate/up, biases and the clamped SwiGLU.
#include <nlohmann/json.hpp>

#include "runtime/model/arch/arch.h"
#include "runtime/model/config.h"

namespace moert::arch {
namespace {

constexpr const char* kAliases[] = {"gpt_oss", "gptoss"};

Status parse(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("num_local_experts"));
  const char* top_k_key = r.is_set("num_experts_per_tok") ? "num_experts_per_tok" : "experts_per_token";
  MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int(top_k_key));
  c->router.norm_topk_prob = true;  // softmax over the k selected logits
  MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("intermediate_size"));
  c->dense_intermediate_size = c->moe_intermediate_size;
  c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), true);
  MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", true));
  c->o_bias = c->qkv_bias;
  c->attention_sinks = true;
  c->router_bias = true;
  c->expert_bias = true;
  c->stacked_experts = true;
  c->expert_activation.kind = experts::GluActivation::Kind::kClampedSwiglu;
  MOERT_ASSIGN_OR_RETURN(double limit, r.optional_number("swiglu_limit", 7.0));
  MOERT_ASSIGN_OR_RETURN(double alpha, r.optional_number("swiglu_alpha", 1.702));
  if (!(limit > 0.0) || !(alpha > 0.0)) return invalid_argument("config.json 'swiglu_limit' and 'swiglu_alpha' must be > 0");
  c->expert_activation.limit = static_cast<float>(limit);
  c->expert_activation.alpha = static_cast<float>(alpha);
  // Layer kinds: layer_types, or (as transformers defaults) sliding on even layers.
  MOERT_ASSIGN_OR_RETURN(int window, r.optional_int("sliding_window", 0));
  c->sliding_windows.assign(static_cast<size_t>(c->num_layers), 0);
  if (r.is_set("layer_types")) {
    const nlohmann::json& types = r.raw("layer_types");
    if (!types.is_array() || static_cast<int>(types.size()) != c->num_layers) {
      return invalid_argument("config.json 'layer_types' must list " + std::to_string(c->num_layers) + " layer kinds");
    }
    for (int i = 0; i < c->num_layers; ++i) {
      const nlohmann::json& type = types[static_cast<size_t>(i)];
      if (type == "sliding_attention") {
        c->sliding_windows[static_cast<size_t>(i)] = window;
      } else if (type != "full_attention") {
        return invalid_argument("config.json 'layer_types'[" + std::to_string(i) + "] = " + type.dump() +
                                " (expected sliding_attention or full_attention)");
      }
    }
  } else {
    for (int i = 0; i < c->num_layers; i += 2) c->sliding_windows[static_cast<size_t>(i)] = window;
  }
  for (int i = 0; i < c->num_layers; ++i) {
    if (c->sliding_windows[static_cast<size_t>(i)] == 0 && (!r.is_set("layer_types") ||
                                                            r.raw("layer_types")[static_cast<size_t>(i)] != "full_attention")) {
      return invalid_argument("config.json 'sliding_window' = " + std::to_string(window) + " must be > 0 (layer " +
                              std::to_string(i) + " is sliding_attention)");
    }
  }
  return Status::ok();
}

void to_json(const ModelConfig& c, nlohmann::json& j) {
  j["num_local_experts"] = c.router.num_experts;
  j["intermediate_size"] = c.moe_intermediate_size;
  j["attention_bias"] = c.qkv_bias;
  j["swiglu_limit"] = c.expert_activation.limit;
  j["swiglu_alpha"] = c.expert_activation.alpha;
  int window = 0;
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < c.num_layers; ++i) {
    const int w = static_cast<size_t>(i) < c.sliding_windows.size() ? c.sliding_windows[static_cast<size_t>(i)] : 0;
    types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    if (w > 0) window = w;
  }
  j["sliding_window"] = window > 0 ? nlohmann::json(window) : nlohmann::json(nullptr);
  j["layer_types"] = types;
}

// make-model: the shape of the shared gpt-oss-tiny case scaled by the size preset: sliding
// windows of 16 on even layers, YaRN x32 over 256 original positions (truncate false).
void apply_preset(ModelConfig* c) {
  c->router.norm_topk_prob = true;
  c->dense_intermediate_size = c->moe_intermediate_size;
  c->qkv_bias = true;
  c->sliding_windows.assign(static_cast<size_t>(c->num_layers), 0);
  for (int i = 0; i < c->num_layers; i += 2) c->sliding_windows[static_cast<size_t>(i)] = 16;
  c->rope_theta = 150000.0;
  c->rope_scaling.kind = attention::RopeScaling::Kind::kYarn;
  c->rope_scaling.factor = 32.0;
  c->rope_scaling.original_max_positions = 256.0;
  c->rope_scaling.truncate = false;
  c->expert_activation.kind = experts::GluActivation::Kind::kClampedSwiglu;
}

}  // namespace

extern const ArchSpec gpt_oss = {
    .hf_class = "GptOssForCausalLM",
    .model_type = "gpt_oss",
    .aliases = kAliases,
    .attention = AttentionKind::kFull,  // per layer from layer_types
    .router = RouterKind::kSoftmaxTopk,
    .parse = parse,
    .to_json = to_json,
    .apply_preset = apply_preset,
    .names = {.router = "router"},
};

}  // namespace moert::arch
