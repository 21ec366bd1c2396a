// ModelWeights: every tensor the forward reads, looked up once by its Hugging Face name
// (docs/moe.md §1; the architecture's TensorNames, arch/tensor_names.h) and shape-checked against the ModelConfig. Matrices stay views into
// the mmapped checkpoint (F32/BF16/F16, read in place); vectors (norms, biases, router
// correction biases) are widened to F32 copies.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quant/weight.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/io/checkpoint.h"
#include "runtime/model/config.h"
#include "runtime/model/weight_memory.h"

namespace moert {

struct Linear {
  quant::LinearWeight weight;  // [out, in], dense or packed (NVFP4, MXFP4, FP8)
  std::vector<float> bias;     // [out] or empty
  int64_t out_features() const { return weight.out_features(); }
  int64_t in_features() const { return weight.in_features(); }
};

// SwiGLU MLP: down(silu(gate x) * up x).
struct GatedMlp {
  Linear gate;  // [I, D]
  Linear up;    // [I, D]
  Linear down;  // [D, I]
};

// DeepSeek Sparse Attention's lightning indexer of one layer (docs/sparse-attention.md; NI
// heads of DI, qr the q LoRA rank): wq_b [NI * DI, qr] reads the normed q LoRA latent, wk
// [DI, D] and weights_proj [NI, D] the layer's normed input; kI = LayerNorm(wk x) with
// k_norm_weight / k_norm_bias [DI]. Empty (no weights) without sparse attention.
struct IndexerWeights {
  Linear wq_b, wk, weights_proj;
  std::vector<float> k_norm_weight, k_norm_bias;
};

struct AttentionWeights {
  Linear q, k, v, o;
  std::vector<float> q_norm, k_norm;  // [head_dim] each, empty without qk-norm
  std::vector<float> sinks;           // [num_heads], empty without attention sinks
  // Latent attention only (docs/mla.md; H heads, D hidden, dims of LatentAttentionDims).
  // q is q_b_proj [H * (dn + dr), qr] after q_a [qr, D] and q_a_norm [qr], or q_proj
  // [H * (dn + dr), D] without q LoRA; k and v are unused. kv_a = kv_a_proj_with_mqa
  // [dc + dr, D], kv_a_norm [dc]. kv_b_proj is kept only as its two per-head halves in F32:
  // key_absorb [H, dc, dn] (W_UK[h] transposed, folded into the query) and value_up
  // [H, dv, dc] (W_UV[h], applied after attention over the latents).
  Linear q_a, kv_a;
  std::vector<float> q_a_norm, kv_a_norm;
  TensorView key_absorb, value_up;
  IndexerWeights indexer;  // DeepSeek Sparse Attention only (ModelConfig::dsa)
};

// A Gated DeltaNet layer's token mixer (docs/gated-deltanet.md; NK/DK/NV/DV/W/C as in
// LinearAttentionDims). The input projections are in the conv order: qkv [C, D] rows
// [q of every key head | k of every key head | v of every value head], z [NV DV, D], b and a
// [NV, D] (Qwen3-Next's fused, grouped tensors are regrouped into these at load).
struct LinearAttentionWeights {
  Linear qkv, z, b, a, out;    // out: [D, NV DV]
  std::vector<float> conv;     // [C, W] (conv1d.weight [C, 1, W])
  std::vector<float> a_log;    // [NV]
  std::vector<float> dt_bias;  // [NV]
  std::vector<float> norm;     // [DV] the output norm's w (used as w, not 1 + w)
};

struct MoeWeights {
  TensorView router;                     // [E, D]
  std::vector<float> router_bias;        // [E] or empty
  std::vector<float> correction_bias;    // [E] or empty
  experts::GluActivation expert_activation;  // of the routed experts (their biases are in `experts`)
  std::vector<GatedMlp> experts;         // [E]
  std::optional<GatedMlp> shared_expert;
  TensorView shared_expert_gate;         // [1, D], sigmoid-gated shared expert only (data == nullptr otherwise)
};

struct LayerWeights {
  std::vector<float> input_norm;          // [D]
  std::vector<float> post_attention_norm; // [D]
  AttentionWeights attention;  // softmax-attention layers
  bool is_linear_attention = false;
  LinearAttentionWeights linear_attention;  // when is_linear_attention
  bool is_moe = false;
  GatedMlp dense_mlp;  // when !is_moe
  MoeWeights moe;      // when is_moe
};

// One DeepSeek multi-token prediction module (docs/mtp.md); its decoder block (MLA + MoE with
// shared experts) is ModelWeights::layers[num_layers + k]. Row i reads the main model's
// final hidden state g_i and the embedding of token i+1:
// x = eh_proj([enorm(embed(t)) | hnorm(g)]), y = block(x), logits = head(head_norm(y)).
struct MtpWeights {
  std::vector<float> enorm, hnorm;  // [D] each
  Linear eh_proj;                   // [D, 2D]: the embedding half's columns first
  std::vector<float> head_norm;     // [D] shared_head.norm
  // The module's own copies (the release stores copies of the main model's); when the
  // checkpoint has none, embed_tokens.data is null and head empty: the main ones are used.
  TensorView embed_tokens;                  // [V, D]
  std::optional<quant::LinearWeight> head;  // [V, D] shared_head.head
};

struct ModelWeights {
  // Storage of weights rearranged at load (e.g. stacked experts split per expert); the views
  // below point into it or into the checkpoint's mappings.
  std::vector<Buffer> owned;
  TensorView embed_tokens;  // [V, D]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [D]
  quant::LinearWeight lm_head;  // [V, D] (the embedding when tied)
  // The multi-token prediction modules, when loaded (LoadOptions::mtp): layers then holds
  // num_layers + mtp.size() entries.
  std::vector<MtpWeights> mtp;
};

// A model directory opened for inference: its config, its checkpoint (kept open: the
// weights point into its mappings) and the weights.
struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<io::Checkpoint> checkpoint;
  ModelWeights weights;
};

// Errors name the tensor and the expected shape:
// "tensor 'model.layers.1.mlp.gate.weight' has shape [8, 255], expected [8, 256]".
// A tensor widened to F32 (from F32, BF16 or F16); other dtypes are an error naming `name`.
Result<std::vector<float>> widen_to_f32(const std::string& name, const TensorView& view);

// The weight formats by role, e.g. "attention BF16, experts NVFP4, lm_head BF16" (banners,
// benchmark reports).
std::string describe_weight_formats(const ModelWeights& weights);

// What identifies a model for output manifests and the ranks' start-up agreement: the
// digest of its parsed config (canonical JSON) and of its tensor index (every name, dtype and
// shape, in name order) with the first and last 64 bytes of every tensor, which tells apart
// checkpoints of one shape (other seeds, other fine-tunes). Not every weight byte: that
// would cost a pass over the model (core/digest.h).
std::string model_digest(const ModelConfig& config, const io::Checkpoint& checkpoint);

// Every value of every tensor is usable: floats (F32/BF16/F16) and FP8 codes finite (no NaN,
// no Inf); quantization scales not negative (E4M3 / F32 block scales, where 0 marks an
// all-zero block), global scales (`weight_scale_2`, per-tensor FP8 `weight_scale`) > 0,
// E8M0 scales not the NaN code. Errors name the tensor, the element and the value.
Status check_checkpoint_values(const io::Checkpoint& checkpoint);

// Calls visit(data, bytes) for every host region the forward reads: each matrix (dense, or
// a packed weight's data and scales), norm, bias and per-head matrix; routed experts only
// where routed_expert_here(layer, expert) holds (every one when it is empty). A device
// backend places these in its memory (Backend::prepare_weights).
void for_each_weight_region(const ModelWeights& weights,
                            const std::function<void(const void* data, int64_t bytes)>& visit,
                            const std::function<bool(int layer, int expert)>& routed_expert_here = {});

// The same for one gated MLP (a routed expert's gate, up and down weights and biases).
void for_each_weight_region(const GatedMlp& mlp, const std::function<void(const void* data, int64_t bytes)>& visit);

// With `mtp`, also the config's multi-token prediction modules (an error naming the missing
// tensor when the config has none or the checkpoint lacks them).
Result<ModelWeights> bind_model_weights(const ModelConfig& config, const io::Checkpoint& checkpoint, bool mtp = false);

// Calls visit(weight, layer, expert) for every linear weight the forward computes with: the LM
// head, attention, dense MLPs, shared experts (layer and expert -1) and routed experts (their
// layer and expert id). Backends lay weights out through it (Backend::prepare_weights).
void for_each_linear_weight(ModelWeights& weights,
                            const std::function<void(quant::LinearWeight& weight, int layer, int expert)>& visit);

// Marks every NVFP4 / MXFP4 weight (attention, experts, lm_head) to be computed with
// `precision` activations (kInt8: the CPU's `--fp4-activations int8` mode, quant/cpu/int8_linear.h;
// kFp4: rounded to FP4 before the product, CPU and CUDA); other formats are left as they are.
void set_fp4_activations(ModelWeights& weights, quant::ActivationPrecision precision);

// The checkpoint's weights as views into its mappings, in its own layout (FP4 codes in the
// checkpoint's order): what every backend starts from (Backend::prepare_weights lays them out).
struct LoadOptions {
  // What NVFP4 / MXFP4 weights are computed with (set_fp4_activations).
  quant::ActivationPrecision fp4_activations = quant::ActivationPrecision::kF32;
  // Bind the multi-token prediction modules too (ModelConfig::num_mtp_layers; docs/mtp.md).
  bool mtp = false;
};
Result<std::unique_ptr<LoadedModel>> load_model(const std::string& model_dir, const LoadOptions& options = {});

}  // namespace moert
