// The architecture registry: everything moert knows about one model family lives in one
// file under runtime/model/arch/ (its config.json keys, its checkpoint tensor names, its
// make-model preset choices), described by one static ArchSpec. registry.cpp lists them;
// the rest of the runtime asks the registry and never names an architecture.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runtime/model/arch/tensor_names.h"

namespace moert {

struct ModelConfig;

// Typed accessors over a config.json object; each error names the key.
class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& j) : j_(j) {}

  Result<int> required_int(const char* key) const;
  Result<int> optional_int(const char* key, int fallback) const;
  Result<double> optional_number(const char* key, double fallback) const;
  Result<bool> optional_bool(const char* key, bool fallback) const;
  bool is_set(const char* key) const;            // present and not null
  const nlohmann::json& raw(const char* key) const;  // the value of a present key

 private:
  const nlohmann::json& j_;
};

// The fraction of each head that RoPE rotates: config.json `partial_rotary_factor` at the top
// level or inside `rope_parameters` (transformers v5), `fallback` when neither has it; an error
// when both do and disagree, or when it is not in (0, 1].
Result<double> partial_rotary_factor(const ConfigReader& reader, double fallback);

// invalid_argument "config.json 'KEY' = V must be > 0" unless value > 0.
Status check_positive(const char* key, int value);

// What one decoder layer is made of.
// kMla: latent attention (docs/mla.md); kGatedDeltaNet: linear attention with a recurrent
// state per sequence instead of K/V (docs/gated-deltanet.md).
enum class AttentionKind { kFull, kSlidingWindow, kMla, kGatedDeltaNet };
enum class MlpKind { kDense, kMoe, kMoeWithShared };
enum class RouterKind { kSoftmaxTopk, kSigmoidGroupLimited };

struct LayerSpec {
  AttentionKind attention = AttentionKind::kFull;
  MlpKind mlp = MlpKind::kDense;
  RouterKind router = RouterKind::kSoftmaxTopk;  // meaningful for MoE layers only
  int sliding_window = 0;                        // W for kSlidingWindow layers
  bool operator==(const LayerSpec&) const = default;
};

// One architecture's operations. One static, constant-initialised instance per
// architecture (runtime/model/arch/<name>.cpp), listed once in registry.cpp.
struct ArchSpec {
  const char* hf_class;                    // the config.json `architectures` entry
  const char* model_type;                  // the config.json `model_type`
  std::span<const char* const> aliases;    // make-model --arch short names; the first is the preferred one
  AttentionKind attention;                 // every layer's attention
  RouterKind router;                       // every MoE layer's router
  // Reads the architecture-specific keys; the common ones (sizes, heads, RoPE, norms,
  // token ids) are already in `config`.
  Status (*parse)(const ConfigReader& reader, ModelConfig* config);
  // Writes the architecture-specific keys (inverse of parse).
  void (*to_json)(const ModelConfig& config, nlohmann::json& j);
  // make-model: the preset's architecture choices on top of the size preset.
  void (*apply_preset)(ModelConfig* config);
  // Every checkpoint tensor name (tensor_names.h); the file sets the pieces that differ
  // from the Hugging Face defaults. The loader, make-model and the quantizer read only these.
  TensorNames names;
  // The config.json object that holds the text model's keys (Qwen3.5, Kimi-K2.5: "text_config"),
  // or nullptr: the top level. `architectures` is always read at the top level.
  const char* text_config = nullptr;
  // False: make-model cannot write this architecture's checkpoints yet.
  bool has_generator = true;
};

// Every registered architecture, in registry order (the first is the default).
std::span<const ArchSpec* const> registered_architectures();
const ArchSpec* default_architecture();
// By HF class name or make-model alias; nullptr when unknown.
const ArchSpec* find_architecture(std::string_view name);
// By HF class name only; unsupported "unknown architecture 'X' (supported: A, B, ...)".
Result<const ArchSpec*> architecture_from_name(const std::string& name);
// The one a config.json object's `architectures` list names first; an error when it names none.
Result<const ArchSpec*> architecture_of_config(const nlohmann::json& config);
// All HF class names, comma separated, for error messages.
std::string supported_architecture_names();
// The preferred short name of each architecture, comma separated.
std::string architecture_short_names();
const char* architecture_name(const ArchSpec* arch);

// The per-layer specs of `config` under `arch` (from layer_is_moe and shared_expert).
std::vector<LayerSpec> build_layer_specs(const ArchSpec& arch, const ModelConfig& config);

}  // namespace moert
