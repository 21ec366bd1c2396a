// `moert make-model`: writes a valid Hugging Face checkpoint directory (config.json,
// generation_config.json, sharded safetensors + index) for any supported architecture,
// with seeded random BF16 weights scaled so activations stay well-conditioned:
// embeddings ~ N(0, 1), every projection ~ N(0, 1/fan_in), norms ~ U(0.8, 1.2), biases
// ~ N(0, 0.1^2). The same (config, seed) always gives the same bytes, whatever the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "runtime/model/config.h"

namespace moert {

// Explicit sizes; each set field overrides the preset's value.
struct ModelShapeOverrides {
  std::optional<int> vocab_size, hidden_size, num_layers, num_experts, top_k, moe_intermediate_size,
      num_heads, num_kv_heads, head_dim;
  // DeepSeek multi-token prediction layers (`num_nextn_predict_layers`, docs/mtp.md); an
  // error for an architecture whose config has no such key.
  std::optional<int> num_mtp_layers;
};

// Presets: "tiny" (the shared reference shape: hidden 256, 4 layers, 8 experts top-2,
// width 512, 4 q / 2 kv heads x 64, vocab 1024), "small" (hidden 512, 6 layers, 8 experts
// top-2, width 768, 8 q / 2 kv heads x 64, vocab 2048) and "large" (hidden 1024, 8 layers,
// 16 experts top-4, width 1024, 16 q / 4 kv heads x 64, vocab 4096; ~432M parameters for
// the default architecture). Architecture-specific parts follow the shared reference models
// (each ArchSpec's apply_preset, runtime/model/arch/).
Result<ModelConfig> preset_model_config(const ArchSpec* arch, const std::string& preset,
                                        const ModelShapeOverrides& overrides = {});
std::vector<std::string> preset_names();

struct TensorSpec {
  enum class Init { kNormal, kUniform, kEye };  // kEye: a [R, C] matrix with a at (i, i), 0 elsewhere
  std::string name;
  Shape shape;
  DType dtype = DType::kBF16;
  Init init = Init::kNormal;
  float a = 0.0f;  // kNormal: mean 0, std a; kUniform: [a, b)
  float b = 0.0f;
  // Element (r, c) gets + offset * ramp(r) * u[c], with u[c] = +-1 a fixed random sign
  // per column (from the seed alone) and ramp(r) = 1, or 1 - 2 r / (R - 1) when
  // offset_ramps (from +1 at row 0 to -1 at the last row). 0: no effect.
  float offset = 0.0f;
  bool offset_ramps = false;
  // A copy of part of another tensor of the checkpoint (the faithful MTP layer, docs/mtp.md):
  // element (r, c) takes the value tensor `copy_of` has at (copy_row + r, copy_column + c),
  // times copy_scale; the fields above are then unused. Empty: values of its own.
  std::string copy_of;
  int64_t copy_row = 0, copy_column = 0;
  float copy_scale = 1.0f;
  // What the tensor is, for WeightShaping and count_parameters, which never parse a name (the
  // names are the architecture's: runtime/model/arch/tensor_names.h).
  enum class Role {
    kOther,
    kEmbedding,      // the model's token embedding (not an MTP module's copy)
    kRouter,         // a router's weight
    kResidualWrite,  // o_proj's weight and every down projection's (stacked experts: down_proj)
  };
  Role role = Role::kOther;
  int layer = -1;              // its decoder layer (num_layers + k: MTP module k); -1 outside the layers
  bool routed_expert = false;  // a routed expert's tensor (top-k of them are active per token)
};

// Optional deformations of the random weights, for tests and benchmarks. Each default
// leaves the checkpoint exactly as without it.
struct WeightShaping {
  // A skewed router: every embedding row gets + u (u[c] = +-1, one random sign per
  // column), so hidden states share the direction u, and router row e gets
  // + skew * (1 - 2 e / (E - 1)) * u / hidden_size, so expert e's logit is shifted by
  // about 0.7 * skew * (1 - 2 e / (E - 1)): low ids win the top-k more often. 0: off.
  float router_skew = 0.0f;
  // Draft-friendly targets: layers >= faithful_layers write residual updates scaled by
  // late_layer_scale (their o_proj and every down_proj), so the first faithful_layers
  // layers decide most of the output and a truncated copy is a good draft. Values depend
  // on (seed, tensor name, index) only, so `make-model --num-layers k` with the same seed
  // writes exactly those first k layers. faithful_layers 0: off.
  int faithful_layers = 0;
  float late_layer_scale = 1.0f;
  // With faithful_layers > 0, the MTP layers (if the config has them) are built from layer 0
  // so that they predict what a one-layer truncation of the model would (docs/mtp.md):
  // eh_proj passes the embedding through, the block copies layer 0's attention and splits its
  // dense MLP into the shared expert and identical routed experts; the head copies the main one.
};
// invalid_argument naming the value: router_skew < 0, faithful_layers < 0,
// late_layer_scale not in (0, 1].
Status validate_weight_shaping(const WeightShaping& shaping);
// invalid_argument when `shaping` asks for a faithful MTP layer (faithful_layers > 0 and MTP
// layers in `config`) that layer 0's shapes cannot give.
Status check_faithful_mtp(const ModelConfig& config, const WeightShaping& shaping);

// Every tensor that moert reads for `config`, with its initialisation rule, in checkpoint order.
std::vector<TensorSpec> checkpoint_tensor_specs(const ModelConfig& config, const WeightShaping& shaping = {});

// Total parameter count and the count touched per token (dense + top-k experts + shared).
struct ParameterCounts {
  int64_t total = 0;
  int64_t active_per_token = 0;
};
ParameterCounts count_parameters(const ModelConfig& config);

// Writes the directory (created if needed). Shards hold at most max_shard_bytes each.
Status write_random_checkpoint(const ModelConfig& config, uint64_t seed, const std::string& dir,
                               uint64_t max_shard_bytes, ThreadPool& pool, const WeightShaping& shaping = {});

}  // namespace moert
