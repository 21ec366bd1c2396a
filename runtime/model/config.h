// ModelConfig: one description of every supported architecture, parsed from a Hugging
// Face config.json. Everything the forward needs is resolved here (layer kinds, widths,
// router rules, rotary width), so the forward never looks at architecture names.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attention/gated_delta_shape.h"
#include "attention/rope.h"
#include "experts/glu_activation.h"
#include "experts/router.h"
#include "core/status.h"
#include "runtime/model/arch/arch.h"

namespace moert {

// The architecture itself is a registered ArchSpec (runtime/model/arch/arch.h):
// architecture_name, architecture_from_name and supported_architecture_names live there.

enum class SharedExpertKind {
  kNone,
  kSigmoidGated,  // out += sigmoid(x . shared_expert_gate) * shared_expert(x)
  kUngated,       // out += shared_experts(x)
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; docs/mla.md): all zero for other
// attention. Per token, kv_a_proj_with_mqa gives [latent c (dc) | rope key (dr)]; kv_b_proj
// expands c into per-head [k_nope (dn) | v (dv)]; queries are [q_nope (dn) | q_pe (dr)] per head.
struct LatentAttentionDims {
  int q_lora_rank = 0;       // 0: q_proj reads the hidden state directly (no q_a_proj / q_b_proj)
  int kv_lora_rank = 0;      // dc
  int qk_nope_head_dim = 0;  // dn
  int qk_rope_head_dim = 0;  // dr
  int v_head_dim = 0;        // dv
  // eps of the q_a / kv_a RMSNorms; 0: rms_norm_eps. GLM-5 builds them with 1e-6 while its
  // layer norms use 1e-5 (docs/sparse-attention.md).
  float norm_eps = 0.0f;
  bool enabled() const { return kv_lora_rank > 0; }
};

// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5-MoE; docs/gated-deltanet.md): all zero
// for a model without linear-attention layers. The layers that use it are
// ModelConfig::layer_is_linear_attention; the others keep softmax attention.
struct LinearAttentionDims {
  int num_key_heads = 0;    // NK (linear_num_key_heads)
  int key_head_dim = 0;     // DK
  int num_value_heads = 0;  // NV, a multiple of NK
  int value_head_dim = 0;   // DV
  int conv_width = 0;       // linear_conv_kernel_dim
  // Qwen3-Next: q/k/v/z and b/a stored fused and grouped by key head (in_proj_qkvz,
  // in_proj_ba), regrouped at load; Qwen3.5: four separate projections.
  bool grouped_projections = false;
  bool enabled() const { return num_key_heads > 0; }
  int64_t conv_channels() const { return shape().conv_channels(); }  // C = 2 NK DK + NV DV
  attention::GatedDeltaShape shape() const {
    return {num_key_heads, key_head_dim, num_value_heads, value_head_dim, conv_width};
  }
};

// DeepSeek Sparse Attention over MLA (DeepSeek-V3.2, GLM-5; docs/sparse-attention.md): per
// layer a lightning indexer (NI heads of DI values, its q from the q LoRA latent, one key kI
// per token) scores every visible position and each query row attends to the index_topk
// best. All zero: off. The KV cache row of a DSA layer is [c | k_pe | kI].
struct SparseAttentionDims {
  int index_topk = 0;       // positions each query row attends to (all of them while fewer are visible)
  int index_n_heads = 0;    // NI
  int index_head_dim = 0;   // DI; its first qk_rope_head_dim channels are the rope part
  // Pairing of the indexer's RoPE (GLM-5 interleaved, DeepSeek-V3.2 rotate-half).
  attention::RopePairing rope_pairing = attention::RopePairing::kRotateHalf;
  float key_norm_eps = 1e-6f;  // eps of the LayerNorm of kI
  // GLM-5.2's indexer sharing: [num_layers], true where a layer has no indexer and reuses the
  // selection of the most recent layer that has one (for the same query rows); empty: every
  // layer has its indexer. Layer 0 always has one.
  std::vector<bool> shared_layers;
  bool enabled() const { return index_topk > 0; }
  // Whether `layer` runs its own indexer (and stores kI in its cache rows).
  bool has_indexer(int layer) const {
    return enabled() && (layer < 0 || static_cast<size_t>(layer) >= shared_layers.size() ||
                         !shared_layers[static_cast<size_t>(layer)]);
  }
};

struct ModelConfig {
  const ArchSpec* arch = default_architecture();  // never null
  int vocab_size = 0;
  int hidden_size = 0;           // D
  int num_layers = 0;
  int num_heads = 0;             // query heads
  // The geometry the attention kernels and the KV cache see. With MLA it is the absorbed
  // form's: one kv head (the latent row) of head_dim = dc + dr, rotary_dim = dr rotated in the
  // row's last channels (docs/mla.md).
  int num_kv_heads = 0;          // divides num_heads (GQA)
  int head_dim = 0;
  int rotary_dim = 0;            // channels of each head that RoPE rotates (even, <= head_dim)
  attention::RopePairing rope_pairing = attention::RopePairing::kRotateHalf;
  float attention_softmax_scale = 0.0f;  // scores = q.k * scale; 0: 1 / sqrt(head_dim)
  LatentAttentionDims mla;
  SparseAttentionDims dsa;  // DeepSeek Sparse Attention (needs mla with q LoRA); zero: off
  double rope_theta = 10000.0;
  attention::RopeScaling rope_scaling;  // config.json rope_scaling (YaRN) or none
  float rms_norm_eps = 1e-6f;
  int max_position_embeddings = 4096;
  // Layers a checkpoint may hold past num_layers that moert does not run (DeepSeek / GLM
  // multi-token-prediction modules, `num_nextn_predict_layers`); any other layer past
  // num_layers means the config and the checkpoint disagree.
  int num_unused_extra_layers = 0;
  // Of those, the DeepSeek multi-token prediction modules (`num_nextn_predict_layers`;
  // docs/mtp.md): layer num_layers + k is module k. Loaded only when asked for
  // (LoadOptions::mtp); the main model never reads them.
  int num_mtp_layers = 0;
  bool qkv_bias = false;         // q/k/v projections carry a bias
  bool o_bias = false;           // the output projection carries a bias
  bool attention_sinks = false;  // self_attn.sinks: one learned softmax-denominator logit per head
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE
  bool tie_word_embeddings = false;
  // Every RMSNorm of the layers, the final norm and qk-norm scales by (1 + w) (Qwen3-Next,
  // Qwen3.5): the loader stores 1 + w, so the forward's norms are the usual ones. Not the
  // linear-attention output norm, which uses w.
  bool norm_weights_offset_by_one = false;
  // Gated attention (Qwen3-Next, Qwen3.5 `attn_output_gate`): q_proj gives per head [query | gate]
  // (2 Dh rows per head) and the attention output is multiplied by sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  LinearAttentionDims linear_attention;
  std::vector<bool> layer_is_linear_attention;  // [num_layers]; empty: none

  int dense_intermediate_size = 0;  // width of dense (non-MoE) MLP layers
  int moe_intermediate_size = 0;    // width of each routed expert
  experts::RouterConfig router;     // E, K, scoring, renormalisation, groups, scale
  bool router_has_correction_bias = false;  // mlp.gate.e_score_correction_bias is read
  bool router_bias = false;                 // the router linear carries a bias (added to the logits)
  experts::GluActivation expert_activation; // routed experts' gated activation
  bool expert_bias = false;                 // routed experts' gate/up/down carry biases
  // Routed experts stored stacked (gpt-oss: experts.gate_up_proj [E, D, 2I] with interleaved
  // gate/up columns and experts.down_proj [E, I, D], or their MXFP4 _blocks/_scales [E, out, in])
  // instead of one tensor per expert and projection.
  bool stacked_experts = false;
  // Qwen3.5's fused experts, read when the checkpoint holds them (per-expert tensors otherwise):
  // experts.gate_up_proj [E, 2I, D] (the I gate rows, then the I up rows) and down_proj [E, D, I].
  bool fused_gate_up_experts = false;
  SharedExpertKind shared_expert = SharedExpertKind::kNone;
  int shared_intermediate_size = 0;  // width of the shared expert (0 when kNone)
  std::vector<bool> layer_is_moe;    // [num_layers]
  std::vector<int> sliding_windows;  // [num_layers]: W of sliding-window layers, 0 for full; empty: all full
  std::vector<LayerSpec> layers;     // [num_layers], filled by parsing (agrees with layer_is_moe)

  int bos_token_id = -1;
  int eos_token_id = -1;

  int num_experts() const { return router.num_experts; }
  int top_k() const { return router.top_k; }
};

// The rotary embedding of `config`'s attention heads (rotated channels at the tail of each
// head with MLA, at the start otherwise).
attention::RotaryEmbedding model_rotary_embedding(const ModelConfig& config);

// Parses and validates; errors name the key and the value ("num_key_value_heads = 3 must divide num_attention_heads = 4").
Result<ModelConfig> parse_model_config(const nlohmann::json& json);
// Reads DIR/config.json.
Result<ModelConfig> load_model_config(const std::string& model_dir);
// The config.json text that Hugging Face would write for `config` (inverse of parse).
nlohmann::json model_config_to_json(const ModelConfig& config);
// One line per field group, for the start-up banner.
std::string describe_model_config(const ModelConfig& config);

}  // namespace moert
