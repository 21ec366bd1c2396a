#include "runtime/model/generation_config.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"

namespace moert {
namespace {

using nlohmann::json;

Result<std::optional<double>> optional_number(const json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return std::optional<double>();
  if (!j.at(key).is_number() || !std::isfinite(j.at(key).get<double>())) {
    return invalid_argument(file + ": '" + key + "' = " + j.at(key).dump() + " must be a finite number");
  }
  return std::optional<double>(j.at(key).get<double>());
}

}  // namespace

Result<GenerationDefaults> load_generation_defaults(const std::string& model_dir, const ModelConfig& config) {
  GenerationDefaults defaults;
  if (config.eos_token_id >= 0) defaults.eos_token_ids = {config.eos_token_id};
  const std::string file = (std::filesystem::path(model_dir) / "generation_config.json").string();
  std::error_code error;
  if (!std::filesystem::exists(file, error)) return defaults;
  MOERT_ASSIGN_OR_RETURN(json j, read_strict_json_file(file, kMaxConfigJsonBytes));
  if (!j.is_object()) return invalid_argument(file + " is not a JSON object");
  MOERT_ASSIGN_OR_RETURN(defaults.temperature, optional_number(j, "temperature", file));
  MOERT_ASSIGN_OR_RETURN(defaults.top_p, optional_number(j, "top_p", file));
  MOERT_ASSIGN_OR_RETURN(defaults.repetition_penalty, optional_number(j, "repetition_penalty", file));
  if (defaults.temperature && *defaults.temperature < 0.0) {
    return invalid_argument(file + ": 'temperature' = " + std::to_string(*defaults.temperature) + " must be >= 0");
  }
  if (defaults.top_p && !(*defaults.top_p > 0.0 && *defaults.top_p <= 1.0)) {
    return invalid_argument(file + ": 'top_p' = " + std::to_string(*defaults.top_p) + " must be in (0, 1]");
  }
  if (defaults.repetition_penalty && *defaults.repetition_penalty <= 0.0) {
    return invalid_argument(file + ": 'repetition_penalty' = " + std::to_string(*defaults.repetition_penalty) +
                            " must be > 0");
  }
  if (j.contains("top_k") && !j.at("top_k").is_null()) {
    // transformers uses top_k = -1 or 0 for "off"; moert's off is 0.
    MOERT_ASSIGN_OR_RETURN(int64_t top_k, json_integer_in_range(j.at("top_k"), file + ": 'top_k'", -1, INT32_MAX));
    defaults.top_k = std::max<int64_t>(top_k, 0);
  }
  if (j.contains("max_new_tokens") && !j.at("max_new_tokens").is_null()) {
    MOERT_ASSIGN_OR_RETURN(defaults.max_tokens,
                           json_integer_in_range(j.at("max_new_tokens"), file + ": 'max_new_tokens'", 1, INT32_MAX));
  }
  if (j.contains("eos_token_id") && !j.at("eos_token_id").is_null()) {
    const json& eos = j.at("eos_token_id");
    const json ids = eos.is_array() ? eos : json::array({eos});
    defaults.eos_token_ids.clear();
    for (const json& id : ids) {
      MOERT_ASSIGN_OR_RETURN(int64_t value,
                             json_integer_in_range(id, file + ": 'eos_token_id'", 0, int64_t{config.vocab_size} - 1));
      defaults.eos_token_ids.push_back(static_cast<int32_t>(value));
    }
  }
  return defaults;
}

void apply_generation_defaults(const GenerationDefaults& defaults, json& request) {
  const auto set_default = [&request](const char* key, const auto& value) {
    if (value.has_value() && !request.contains(key)) request[key] = *value;
  };
  set_default("temperature", defaults.temperature);
  set_default("top_p", defaults.top_p);
  set_default("top_k", defaults.top_k);
  set_default("repetition_penalty", defaults.repetition_penalty);
  set_default("max_tokens", defaults.max_tokens);
}

}  // namespace moert
