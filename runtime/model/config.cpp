#include "runtime/model/config.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"

namespace moert {
namespace {

using nlohmann::json;

// An optional token id (-1 when absent or null); the EOS id may also be a list: its first
// entry. An id that is not an integer in [0, 2^31) is an error naming the value as written.
Result<int> first_token_id(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return -1;
  const json& value = j.at(key);
  if (value.is_array() && value.empty()) return -1;
  const json& id = value.is_array() ? value.front() : value;
  MOERT_ASSIGN_OR_RETURN(const int64_t v, json_integer_in_range(id, std::string("config.json '") + key + "'" +
                                                                           (value.is_array() ? "[0]" : ""),
                                                                 0, INT32_MAX));
  return static_cast<int>(v);
}

// The rope_scaling keys that belong to a scaling type: given to a type that does not read them
// (or with no type at all) they would be ignored, so they are refused by name (docs/rope.md).
constexpr const char* kRopeScalingKeys[] = {
    "factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate", "mscale", "mscale_all_dim",
    "attention_factor", "short_factor", "long_factor", "low_freq_factor", "high_freq_factor"};
// The keys each type moert implements reads (YaRN: transformers' _validate_yarn_parameters).
constexpr const char* kYarnKeys[] = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                                     "truncate", "mscale", "mscale_all_dim", "attention_factor"};

// The scaling type named by rope_type (or the older type), "" when neither is set.
Result<std::string> rope_scaling_type(const json& scaling, const std::string& where) {
  std::string type;
  for (const char* name : {"rope_type", "type"}) {
    if (!scaling.contains(name) || scaling.at(name).is_null()) continue;
    const json& value = scaling.at(name);
    if (!value.is_string()) return invalid_argument(where + " '" + name + "' = " + value.dump() + " must be a string");
    if (!type.empty() && type != value.get<std::string>()) {
      return invalid_argument(where + " has 'rope_type' \"" + type + "\" and 'type' \"" + value.get<std::string>() +
                              "\", which disagree");
    }
    type = value.get<std::string>();
  }
  return type;
}

// rope_scaling (transformers v4) or rope_parameters (v5, which also holds rope_theta):
// none / "default", or "yarn" (docs/rope.md). Other types are refused by name, and so is a
// type without the fields it requires or a scaling field without its type.
Status parse_rope_scaling(const ConfigReader& r, ModelConfig* c) {
  const char* key = r.is_set("rope_scaling") ? "rope_scaling" : r.is_set("rope_parameters") ? "rope_parameters" : nullptr;
  if (key == nullptr) return Status::ok();
  const std::string where = std::string("config.json '") + key + "'";
  const json& scaling = r.raw(key);
  if (!scaling.is_object()) return invalid_argument(where + " must be an object");
  const ConfigReader s(scaling);
  if (scaling.contains("rope_theta")) {
    MOERT_ASSIGN_OR_RETURN(c->rope_theta, s.optional_number("rope_theta", c->rope_theta));
  }
  // transformers v5 moves partial_rotary_factor into rope_parameters, where the architectures
  // that rotate part of each head read it (arch.h partial_rotary_factor); never in rope_scaling.
  if (std::string_view(key) == "rope_scaling" && s.is_set("partial_rotary_factor")) {
    return unsupported(where + " holds 'partial_rotary_factor' = " + scaling.at("partial_rotary_factor").dump() +
                       ", which belongs at the top level of config.json or in 'rope_parameters'");
  }
  MOERT_ASSIGN_OR_RETURN(const std::string type, rope_scaling_type(scaling, where));
  const std::span<const char* const> reads =
      type == "yarn" ? std::span<const char* const>(kYarnKeys) : std::span<const char* const>();
  for (const char* field : kRopeScalingKeys) {
    if (!s.is_set(field) || std::find_if(reads.begin(), reads.end(), [&](const char* k) {
                              return std::string_view(k) == field;
                            }) != reads.end()) {
      continue;
    }
    if (type.empty()) {
      return invalid_argument(where + " has '" + field + "' = " + scaling.at(field).dump() +
                              " but no 'rope_type' saying which scaling it is for (moert: default, yarn)");
    }
    if (type == "default" || type == "yarn") {
      return invalid_argument(where + " type \"" + type + "\" does not use '" + field + "' = " +
                              scaling.at(field).dump() + " (a field of another scaling type)");
    }
  }
  if (type.empty() || type == "default") return Status::ok();
  if (type != "yarn") {
    return unsupported(where + " type \"" + type + "\" is not supported (default, yarn)");
  }
  attention::RopeScaling& y = c->rope_scaling;
  y.kind = attention::RopeScaling::Kind::kYarn;
  // Required, as in transformers: YaRN without its factor has nothing to scale by.
  if (!s.is_set("factor")) return invalid_argument(where + " type \"yarn\" lacks 'factor', which it requires");
  MOERT_ASSIGN_OR_RETURN(y.factor, s.optional_number("factor", 0.0));
  if (!(y.factor >= 1.0) || !std::isfinite(y.factor)) {
    return invalid_argument(where + " 'factor' = " + scaling.at("factor").dump() + " must be finite and >= 1");
  }
  // Optional, as in transformers: the context the model was trained with defaults to
  // max_position_embeddings.
  MOERT_ASSIGN_OR_RETURN(y.original_max_positions,
                         s.optional_number("original_max_position_embeddings", c->max_position_embeddings));
  MOERT_ASSIGN_OR_RETURN(y.beta_fast, s.optional_number("beta_fast", 32.0));
  MOERT_ASSIGN_OR_RETURN(y.beta_slow, s.optional_number("beta_slow", 1.0));
  MOERT_ASSIGN_OR_RETURN(y.truncate, s.optional_bool("truncate", true));
  MOERT_ASSIGN_OR_RETURN(y.mscale, s.optional_number("mscale", 0.0));
  MOERT_ASSIGN_OR_RETURN(y.mscale_all_dim, s.optional_number("mscale_all_dim", 0.0));
  MOERT_ASSIGN_OR_RETURN(y.attention_factor, s.optional_number("attention_factor", 0.0));
  if (!(y.original_max_positions > 0.0) || !(y.beta_fast > 0.0) || !(y.beta_slow > 0.0)) {
    return invalid_argument(where + ": original_max_position_embeddings, beta_fast and beta_slow must be > 0");
  }
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
  MOERT_RETURN_IF_ERROR(parse_rope_scaling(r, c));  // may set rope_theta (rope_parameters)
  if (!(c->rope_theta > 0.0) || !std::isfinite(c->rope_theta)) {
    return invalid_argument("config.json 'rope_theta' = " + std::to_string(c->rope_theta) + " must be finite and > 0");
  }
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return invalid_argument("config.json 'rms_norm_eps' = " + std::to_string(eps) + " must be finite and >= 0");
  }
  MOERT_RETURN_IF_ERROR(check_positive("max_position_embeddings", c->max_position_embeddings));
  const char* hidden_act_key = "hidden_act";
  if (r.is_set(hidden_act_key) && r.raw(hidden_act_key) != "silu") {
    return unsupported("config.json 'hidden_act' = " + r.raw(hidden_act_key).dump() + " (only silu)");
  }
  c->rotary_dim = c->head_dim;
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const json& j) {
  if (!j.is_object()) return invalid_argument("config.json is not a JSON object");
  ModelConfig c;
  MOERT_ASSIGN_OR_RETURN(c.arch, architecture_of_config(j));
  const char* text_key = c.arch->text_config;
  if (text_key != nullptr && (!j.contains(text_key) || !j.at(text_key).is_object())) {
    return invalid_argument(std::string("config.json lacks the '") + text_key + "' object that " +
                            c.arch->hf_class + " keeps its text model's keys in");
  }
  const json& text = text_key != nullptr ? j.at(text_key) : j;
  ConfigReader reader(text);
  MOERT_RETURN_IF_ERROR(parse_common(reader, &c));
  MOERT_RETURN_IF_ERROR(c.arch->parse(reader, &c));
  MOERT_ASSIGN_OR_RETURN(c.bos_token_id, first_token_id(text, "bos_token_id"));
  MOERT_ASSIGN_OR_RETURN(c.eos_token_id, first_token_id(text, "eos_token_id"));

  MOERT_RETURN_IF_ERROR(experts::validate_router_config(c.router).with_context("config.json router"));
  MOERT_RETURN_IF_ERROR(check_positive("moe_intermediate_size", c.moe_intermediate_size));
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return invalid_argument("rotary dimension " + std::to_string(c.rotary_dim) + " must be even and in (0, head_dim = " +
                            std::to_string(c.head_dim) + "]");
  }
  bool any_dense = false;
  for (bool moe : c.layer_is_moe) any_dense = any_dense || !moe;
  if (any_dense) MOERT_RETURN_IF_ERROR(check_positive("intermediate_size", c.dense_intermediate_size));
  c.layers = build_layer_specs(*c.arch, c);
  return c;
}

attention::RotaryEmbedding model_rotary_embedding(const ModelConfig& c) {
  const int first_channel = c.mla.enabled() ? c.head_dim - c.rotary_dim : 0;
  return attention::RotaryEmbedding(c.head_dim, c.rotary_dim, c.rope_theta, c.rope_scaling, c.rope_pairing,
                                    first_channel);
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  Result<json> read = read_strict_json_file(path, kMaxConfigJsonBytes);
  if (!read.is_ok()) return read.status();
  const json& j = *read;
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
  if (c.rope_scaling.kind == attention::RopeScaling::Kind::kYarn) {
    const attention::RopeScaling& y = c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", y.factor},
                         {"original_max_position_embeddings", y.original_max_positions}, {"beta_fast", y.beta_fast},
                         {"beta_slow", y.beta_slow}, {"truncate", y.truncate}};
    if (y.mscale != 0.0) j["rope_scaling"]["mscale"] = y.mscale;
    if (y.mscale_all_dim != 0.0) j["rope_scaling"]["mscale_all_dim"] = y.mscale_all_dim;
    if (y.attention_factor > 0.0) j["rope_scaling"]["attention_factor"] = y.attention_factor;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  j["num_experts_per_tok"] = c.router.top_k;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  j["model_type"] = c.arch->model_type;
  c.arch->to_json(c, j);  // may name the text model's own model_type
  if (c.arch->text_config == nullptr) return j;
  // The text model's keys under text_config; the class and the family's model_type on top.
  json nested = std::move(j);
  nested.erase("architectures");
  j = json::object();
  j["architectures"] = {architecture_name(c.arch)};
  j["model_type"] = c.arch->model_type;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j[c.arch->text_config] = std::move(nested);
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
  if (c.mla.enabled()) {
    out << ", latent attention (q_lora " << c.mla.q_lora_rank << ", kv_lora " << c.mla.kv_lora_rank << ", nope "
        << c.mla.qk_nope_head_dim << ", rope " << c.mla.qk_rope_head_dim << ", v " << c.mla.v_head_dim << ")";
  }
  if (c.dsa.enabled()) {
    out << ", sparse attention (indexer " << c.dsa.index_n_heads << " x " << c.dsa.index_head_dim << ", top "
        << c.dsa.index_topk << ", indexer rope "
        << (c.dsa.rope_pairing == attention::RopePairing::kInterleaved ? "interleaved" : "rotate-half") << ")";
  }
  if (c.qkv_bias) out << ", qkv bias";
  if (c.qk_norm) out << ", qk-norm";
  int sliding = 0, window = 0;
  for (int w : c.sliding_windows) {
    sliding += w > 0 ? 1 : 0;
    window = w > 0 ? w : window;
  }
  if (sliding > 0) out << ", sliding window " << window << " on " << sliding << " layers";
  if (c.attention_sinks) out << ", attention sinks";
  if (c.rope_scaling.kind == attention::RopeScaling::Kind::kYarn) out << ", YaRN x" << c.rope_scaling.factor;
  if (c.expert_activation.kind == experts::GluActivation::Kind::kClampedSwiglu) {
    out << ", clamped SwiGLU (limit " << c.expert_activation.limit << ")";
  }
  return out.str();
}

}  // namespace moert
