#include "runtime/model/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moert {
namespace {

using nlohmann::json;

constexpr Architecture kAllArchitectures[] = {Architecture::kQwen3Moe, Architecture::kQwen2Moe,
                                              Architecture::kMixtral, Architecture::kGlm4Moe};

// Typed accessors over a config object; each error names the key.
class ConfigReader {
 public:
  explicit ConfigReader(const json& j) : j_(j) {}

  Result<int> required_int(const char* key) const {
    if (!j_.contains(key)) return invalid_argument(std::string("config.json lacks '") + key + "'");
    return as_int(key, j_.at(key));
  }
  Result<int> optional_int(const char* key, int fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    return as_int(key, j_.at(key));
  }
  Result<double> optional_number(const char* key, double fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    if (!j_.at(key).is_number()) return invalid_argument(std::string("config.json '") + key + "' must be a number");
    return j_.at(key).get<double>();
  }
  Result<bool> optional_bool(const char* key, bool fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    if (!j_.at(key).is_boolean()) return invalid_argument(std::string("config.json '") + key + "' must be true or false");
    return j_.at(key).get<bool>();
  }
  bool is_set(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& raw(const char* key) const { return j_.at(key); }

 private:
  static Result<int> as_int(const char* key, const json& value) {
    if (!value.is_number_integer()) {
      return invalid_argument(std::string("config.json '") + key + "' = " + value.dump() + " must be an integer");
    }
    return value.get<int>();
  }
  const json& j_;
};

// An optional int that, when present, must be one of [first, first+1, ...]; the EOS id may
// also be a list in generation configs: take the first entry.
int first_token_id(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return -1;
  const json& value = j.at(key);
  if (value.is_number_integer()) return value.get<int>();
  if (value.is_array() && !value.empty() && value.front().is_number_integer()) return value.front().get<int>();
  return -1;
}

Status check_positive(const char* key, int value) {
  if (value <= 0) return invalid_argument(std::string("config.json '") + key + "' = " + std::to_string(value) + " must be > 0");
  return Status::ok();
}

Status parse_common(const ConfigReader& r, ModelConfig* c) {
  MOERT_ASSIGN_OR_RETURN(c->vocab_size, r.required_int("vocab_size"));
  MOERT_ASSIGN_OR_RETURN(c->hidden_size, r.required_int("hidden_size"));
  MOERT_ASSIGN_OR_RETURN(c->num_layers, r.required_int("num_hidden_layers"));
  MOERT_ASSIGN_OR_RETURN(c->num_heads, r.required_int("num_attention_heads"));
  MOERT_ASSIGN_OR_RETURN(c->num_kv_heads, r.optional_int("num_key_value_heads", c->num_heads));
  for (auto [key, value] : {std::pair{"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
                            {"num_hidden_layers", c->num_layers}, {"num_attention_heads", c->num_heads},
                            {"num_key_value_heads", c->num_kv_heads}}) {
    MOERT_RETURN_IF_ERROR(check_positive(key, value));
  }
  if (c->num_heads % c->num_kv_heads != 0) {
    return invalid_argument("config.json 'num_key_value_heads' = " + std::to_string(c->num_kv_heads) +
                            " must divide 'num_attention_heads' = " + std::to_string(c->num_heads));
  }
  const int default_head_dim = c->hidden_size / c->num_heads;
  MOERT_ASSIGN_OR_RETURN(c->head_dim, r.optional_int("head_dim", default_head_dim));
  MOERT_RETURN_IF_ERROR(check_positive("head_dim", c->head_dim));
  MOERT_ASSIGN_OR_RETURN(c->rope_theta, r.optional_number("rope_theta", 10000.0));
  MOERT_ASSIGN_OR_RETURN(double eps, r.optional_number("rms_norm_eps", 1e-6));
  c->rms_norm_eps = static_cast<float>(eps);
  MOERT_ASSIGN_OR_RETURN(c->max_position_embeddings, r.optional_int("max_position_embeddings", 4096));
  MOERT_ASSIGN_OR_RETURN(c->tie_word_embeddings, r.optional_bool("tie_word_embeddings", false));
  if (r.is_set("rope_scaling")) {
    return unsupported("config.json 'rope_scaling' = " + r.raw("rope_scaling").dump() +
                       " is not supported yet (only plain RoPE)");
  }
  const char* hidden_act_key = "hidden_act";
  if (r.is_set(hidden_act_key) && r.raw(hidden_act_key) != "silu") {
    return unsupported("config.json 'hidden_act' = " + r.raw(hidden_act_key).dump() + " (only silu)");
  }
  c->rotary_dim = c->head_dim;
  return Status::ok();
}

// Qwen2-MoE and Qwen3-MoE share routing and layer-kind rules.
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
      if (!entry.is_number_integer()) return invalid_argument("config.json 'mlp_only_layers' holds " + entry.dump());
      mlp_only_layers.push_back(entry.get<int>());
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

Status parse_architecture(Architecture arch, const ConfigReader& r, ModelConfig* c) {
  switch (arch) {
    case Architecture::kQwen3Moe: {
      MOERT_RETURN_IF_ERROR(parse_qwen_moe(r, c));
      MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
      c->qk_norm = true;
      return Status::ok();
    }
    case Architecture::kQwen2Moe: {
      MOERT_RETURN_IF_ERROR(parse_qwen_moe(r, c));
      MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("qkv_bias", true));
      MOERT_ASSIGN_OR_RETURN(c->shared_intermediate_size, r.required_int("shared_expert_intermediate_size"));
      c->shared_expert = c->shared_intermediate_size > 0 ? SharedExpertKind::kSigmoidGated : SharedExpertKind::kNone;
      return Status::ok();
    }
    case Architecture::kMixtral: {
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
    case Architecture::kGlm4Moe: {
      MOERT_ASSIGN_OR_RETURN(c->router.num_experts, r.required_int("n_routed_experts"));
      MOERT_ASSIGN_OR_RETURN(c->router.top_k, r.required_int("num_experts_per_tok"));
      c->router.score_func = experts::ScoreFunc::kSigmoid;
      MOERT_ASSIGN_OR_RETURN(c->router.norm_topk_prob, r.optional_bool("norm_topk_prob", true));
      MOERT_ASSIGN_OR_RETURN(double scale, r.optional_number("routed_scaling_factor", 1.0));
      c->router.routed_scaling_factor = static_cast<float>(scale);
      MOERT_ASSIGN_OR_RETURN(c->router.n_group, r.optional_int("n_group", 1));
      MOERT_ASSIGN_OR_RETURN(c->router.topk_group, r.optional_int("topk_group", 1));
      c->router_has_correction_bias = true;
      MOERT_ASSIGN_OR_RETURN(c->moe_intermediate_size, r.required_int("moe_intermediate_size"));
      MOERT_ASSIGN_OR_RETURN(c->dense_intermediate_size, r.required_int("intermediate_size"));
      MOERT_ASSIGN_OR_RETURN(int num_shared, r.optional_int("n_shared_experts", 0));
      if (num_shared < 0) return invalid_argument("config.json 'n_shared_experts' must be >= 0");
      c->shared_intermediate_size = c->moe_intermediate_size * num_shared;
      c->shared_expert = num_shared > 0 ? SharedExpertKind::kUngated : SharedExpertKind::kNone;
      MOERT_ASSIGN_OR_RETURN(int first_dense, r.optional_int("first_k_dense_replace", 0));
      c->layer_is_moe.assign(static_cast<size_t>(c->num_layers), false);
      for (int i = first_dense; i < c->num_layers; ++i) c->layer_is_moe[static_cast<size_t>(i)] = true;
      MOERT_ASSIGN_OR_RETURN(c->qkv_bias, r.optional_bool("attention_bias", false));
      MOERT_ASSIGN_OR_RETURN(c->qk_norm, r.optional_bool("use_qk_norm", false));
      MOERT_ASSIGN_OR_RETURN(double partial, r.optional_number("partial_rotary_factor", 0.5));
      if (!(partial > 0.0 && partial <= 1.0)) {
        return invalid_argument("config.json 'partial_rotary_factor' = " + std::to_string(partial) + " must be in (0, 1]");
      }
      c->rotary_dim = static_cast<int>(c->head_dim * partial);
      MOERT_ASSIGN_OR_RETURN(int nextn, r.optional_int("num_nextn_predict_layers", 0));
      (void)nextn;  // MTP layers (model.layers.{num_layers}.*) are not loaded
      return Status::ok();
    }
  }
  return internal_error("unhandled architecture");
}

}  // namespace

const char* architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::kQwen3Moe: return "Qwen3MoeForCausalLM";
    case Architecture::kQwen2Moe: return "Qwen2MoeForCausalLM";
    case Architecture::kMixtral: return "MixtralForCausalLM";
    case Architecture::kGlm4Moe: return "Glm4MoeForCausalLM";
  }
  return "?";
}

std::string supported_architecture_names() {
  std::string names;
  for (Architecture arch : kAllArchitectures) {
    if (!names.empty()) names += ", ";
    names += architecture_name(arch);
  }
  return names;
}

Result<Architecture> architecture_from_name(const std::string& name) {
  for (Architecture arch : kAllArchitectures) {
    if (name == architecture_name(arch)) return arch;
  }
  return unsupported("unknown architecture '" + name + "' (supported: " + supported_architecture_names() + ")");
}

Result<ModelConfig> parse_model_config(const json& j) {
  if (!j.is_object()) return invalid_argument("config.json is not a JSON object");
  if (!j.contains("architectures") || !j.at("architectures").is_array() || j.at("architectures").empty() ||
      !j.at("architectures").front().is_string()) {
    return invalid_argument("config.json lacks an 'architectures' list naming the model class");
  }
  ModelConfig c;
  MOERT_ASSIGN_OR_RETURN(c.arch, architecture_from_name(j.at("architectures").front().get<std::string>()));
  ConfigReader reader(j);
  MOERT_RETURN_IF_ERROR(parse_common(reader, &c));
  MOERT_RETURN_IF_ERROR(parse_architecture(c.arch, reader, &c));
  c.bos_token_id = first_token_id(j, "bos_token_id");
  c.eos_token_id = first_token_id(j, "eos_token_id");

  MOERT_RETURN_IF_ERROR(experts::validate_router_config(c.router).with_context("config.json router"));
  MOERT_RETURN_IF_ERROR(check_positive("moe_intermediate_size", c.moe_intermediate_size));
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return invalid_argument("rotary dimension " + std::to_string(c.rotary_dim) + " must be even and in (0, head_dim = " +
                            std::to_string(c.head_dim) + "]");
  }
  bool any_dense = false;
  for (bool moe : c.layer_is_moe) any_dense = any_dense || !moe;
  if (any_dense) MOERT_RETURN_IF_ERROR(check_positive("intermediate_size", c.dense_intermediate_size));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return not_found("cannot open " + path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt(path + " is not valid JSON");
  Result<ModelConfig> config = parse_model_config(j);
  if (!config.is_ok()) return config.status().with_context(path);
  return config;
}

json model_config_to_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {architecture_name(c.arch)};
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  j["num_experts_per_tok"] = c.router.top_k;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  // Layer kinds: Qwen's rules express "all MoE except these" through mlp_only_layers.
  std::vector<int> dense_layers;
  for (int i = 0; i < c.num_layers; ++i) {
    if (!c.layer_is_moe[static_cast<size_t>(i)]) dense_layers.push_back(i);
  }
  switch (c.arch) {
    case Architecture::kQwen3Moe:
    case Architecture::kQwen2Moe:
      j["model_type"] = c.arch == Architecture::kQwen3Moe ? "qwen3_moe" : "qwen2_moe";
      j["num_experts"] = c.router.num_experts;
      j["norm_topk_prob"] = c.router.norm_topk_prob;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["intermediate_size"] = c.dense_intermediate_size;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = dense_layers;
      j["use_sliding_window"] = false;
      if (c.arch == Architecture::kQwen3Moe) {
        j["attention_bias"] = c.qkv_bias;
      } else {
        j["qkv_bias"] = c.qkv_bias;
        j["shared_expert_intermediate_size"] = c.shared_intermediate_size;
      }
      break;
    case Architecture::kMixtral:
      j["model_type"] = "mixtral";
      j["num_local_experts"] = c.router.num_experts;
      j["intermediate_size"] = c.moe_intermediate_size;
      j["sliding_window"] = nullptr;
      break;
    case Architecture::kGlm4Moe: {
      j["model_type"] = "glm4_moe";
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
      j["attention_bias"] = c.qkv_bias;
      j["use_qk_norm"] = c.qk_norm;
      j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / c.head_dim;
      j["num_nextn_predict_layers"] = 0;
      break;
    }
  }
  return j;
}

std::string describe_model_config(const ModelConfig& c) {
  int num_moe = 0;
  for (bool moe : c.layer_is_moe) num_moe += moe ? 1 : 0;
  std::ostringstream out;
  out << architecture_name(c.arch) << ": " << c.num_layers << " layers (" << num_moe << " MoE), hidden "
      << c.hidden_size << ", " << c.num_heads << " q / " << c.num_kv_heads << " kv heads x " << c.head_dim
      << " (rotary " << c.rotary_dim << "), vocab " << c.vocab_size << "; " << c.router.num_experts
      << " experts top-" << c.router.top_k << " width " << c.moe_intermediate_size << ", "
      << (c.router.score_func == experts::ScoreFunc::kSigmoid ? "sigmoid" : "softmax") << " router"
      << (c.router.norm_topk_prob ? " renormalised" : "") << " scale " << c.router.routed_scaling_factor;
  if (c.router.n_group > 1) out << ", groups " << c.router.n_group << " keep " << c.router.topk_group;
  if (c.shared_expert != SharedExpertKind::kNone) {
    out << ", shared expert width " << c.shared_intermediate_size
        << (c.shared_expert == SharedExpertKind::kSigmoidGated ? " (sigmoid-gated)" : "");
  }
  if (c.qkv_bias) out << ", qkv bias";
  if (c.qk_norm) out << ", qk-norm";
  return out.str();
}

}  // namespace moert
