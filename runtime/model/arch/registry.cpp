// The one table of architectures. Adding one: its file in this folder and one line here.
#include <nlohmann/json.hpp>

#include "core/strict_json.h"

#include "runtime/model/arch/arch.h"
#include "runtime/model/config.h"

namespace moert {
namespace arch {
extern const ArchSpec qwen3_moe, qwen2_moe, mixtral, glm4_moe, gpt_oss, deepseek_v3, glm_moe_dsa, deepseek_v32,
    qwen3_next, qwen3_5_moe, kimi_k25;
}  // namespace arch

namespace {

using nlohmann::json;

constexpr const ArchSpec* kRegistry[] = {
    &arch::qwen3_moe,
    &arch::qwen2_moe,
    &arch::mixtral,
    &arch::glm4_moe,
    &arch::gpt_oss,
    &arch::deepseek_v3,
    &arch::glm_moe_dsa,
    &arch::deepseek_v32,
    &arch::qwen3_next,
    &arch::qwen3_5_moe,
    &arch::kimi_k25,
};

Result<int> as_int(const char* key, const json& value) {
  MOERT_ASSIGN_OR_RETURN(const int64_t v, json_integer_in_range(value, std::string("config.json '") + key + "'",
                                                                 INT32_MIN, INT32_MAX));
  return static_cast<int>(v);
}

}  // namespace

Result<int> ConfigReader::required_int(const char* key) const {
  if (!j_.contains(key)) return invalid_argument(std::string("config.json lacks '") + key + "'");
  return as_int(key, j_.at(key));
}

Result<int> ConfigReader::optional_int(const char* key, int fallback) const {
  if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
  return as_int(key, j_.at(key));
}

Result<double> ConfigReader::optional_number(const char* key, double fallback) const {
  if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
  if (!j_.at(key).is_number()) return invalid_argument(std::string("config.json '") + key + "' must be a number");
  return j_.at(key).get<double>();
}

Result<bool> ConfigReader::optional_bool(const char* key, bool fallback) const {
  if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
  if (!j_.at(key).is_boolean()) return invalid_argument(std::string("config.json '") + key + "' must be true or false");
  return j_.at(key).get<bool>();
}

bool ConfigReader::is_set(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

const json& ConfigReader::raw(const char* key) const { return j_.at(key); }

Status check_positive(const char* key, int value) {
  if (value <= 0) return invalid_argument(std::string("config.json '") + key + "' = " + std::to_string(value) + " must be > 0");
  return Status::ok();
}

Result<double> partial_rotary_factor(const ConfigReader& r, double fallback) {
  constexpr const char* kKey = "partial_rotary_factor";
  const json* nested = nullptr;
  if (r.is_set("rope_parameters") && r.raw("rope_parameters").is_object() && r.raw("rope_parameters").contains(kKey) &&
      !r.raw("rope_parameters").at(kKey).is_null()) {
    nested = &r.raw("rope_parameters").at(kKey);
  }
  if (nested != nullptr && r.is_set(kKey) && *nested != r.raw(kKey)) {
    return invalid_argument(std::string("config.json '") + kKey + "' = " + r.raw(kKey).dump() +
                            " and 'rope_parameters' '" + kKey + "' = " + nested->dump() + " disagree");
  }
  double factor = fallback;
  if (r.is_set(kKey)) {
    MOERT_ASSIGN_OR_RETURN(factor, r.optional_number(kKey, fallback));
  } else if (nested != nullptr) {
    if (!nested->is_number()) return invalid_argument(std::string("config.json 'rope_parameters' '") + kKey + "' must be a number");
    factor = nested->get<double>();
  }
  if (!(factor > 0.0 && factor <= 1.0)) {
    return invalid_argument(std::string("config.json '") + kKey + "' = " + std::to_string(factor) + " must be in (0, 1]");
  }
  return factor;
}

std::span<const ArchSpec* const> registered_architectures() { return kRegistry; }

const ArchSpec* default_architecture() { return kRegistry[0]; }

const ArchSpec* find_architecture(std::string_view name) {
  for (const ArchSpec* arch : kRegistry) {
    if (name == arch->hf_class) return arch;
    for (const char* alias : arch->aliases) {
      if (name == alias) return arch;
    }
  }
  return nullptr;
}

std::string supported_architecture_names() {
  std::string names;
  for (const ArchSpec* arch : kRegistry) {
    if (!names.empty()) names += ", ";
    names += arch->hf_class;
  }
  return names;
}

std::string architecture_short_names() {
  std::string names;
  for (const ArchSpec* arch : kRegistry) {
    if (!names.empty()) names += ", ";
    names += arch->aliases.front();
  }
  return names;
}

Result<const ArchSpec*> architecture_from_name(const std::string& name) {
  for (const ArchSpec* arch : kRegistry) {
    if (name == arch->hf_class) return arch;
  }
  return unsupported("unknown architecture '" + name + "' (supported: " + supported_architecture_names() + ")");
}

Result<const ArchSpec*> architecture_of_config(const json& config) {
  if (!config.is_object() || !config.contains("architectures") || !config.at("architectures").is_array() ||
      config.at("architectures").empty() || !config.at("architectures").front().is_string()) {
    return invalid_argument("config.json lacks an 'architectures' list naming the model class");
  }
  return architecture_from_name(config.at("architectures").front().get<std::string>());
}

const char* architecture_name(const ArchSpec* arch) { return arch != nullptr ? arch->hf_class : "?"; }

std::vector<LayerSpec> build_layer_specs(const ArchSpec& arch, const ModelConfig& c) {
  std::vector<LayerSpec> layers;
  layers.reserve(c.layer_is_moe.size());
  for (bool moe : c.layer_is_moe) {
    LayerSpec spec;
    const size_t index = layers.size();
    const int window = index < c.sliding_windows.size() ? c.sliding_windows[index] : 0;
    const bool linear = index < c.layer_is_linear_attention.size() && c.layer_is_linear_attention[index];
    spec.attention = linear ? AttentionKind::kGatedDeltaNet : window > 0 ? AttentionKind::kSlidingWindow : arch.attention;
    spec.sliding_window = window;
    spec.router = arch.router;
    spec.mlp = !moe ? MlpKind::kDense
               : c.shared_expert != SharedExpertKind::kNone ? MlpKind::kMoeWithShared
                                                           : MlpKind::kMoe;
    layers.push_back(spec);
  }
  return layers;
}

}  // namespace moert
