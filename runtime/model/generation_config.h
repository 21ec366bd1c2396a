// A checkpoint's generation_config.json (docs/generation.md): the sampling defaults its
// authors recommend and the ids that end a turn. Requests that do not set a field get the
// checkpoint's value, as in vLLM (temperature, top_p, top_k, repetition_penalty,
// max_new_tokens -> max_tokens); every EOS id stops generation (eos_token_id may be a list).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runtime/model/config.h"

namespace moert {

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_tokens;  // max_new_tokens
  // generation_config.json's eos_token_id (an id or a list), else config.json's; may be empty.
  std::vector<int32_t> eos_token_ids;
};

// Reads model_dir/generation_config.json when present (absent: no sampling defaults, EOS from
// config.json). Errors name the file and the field: a value of the wrong type or out of range
// (temperature < 0, top_p outside (0, 1], top_k < 0 (-1 means off), repetition_penalty <= 0,
// EOS ids outside the vocabulary).
Result<GenerationDefaults> load_generation_defaults(const std::string& model_dir, const ModelConfig& config);

// Sets each default the request object does not set itself.
void apply_generation_defaults(const GenerationDefaults& defaults, nlohmann::json& request);

}  // namespace moert
