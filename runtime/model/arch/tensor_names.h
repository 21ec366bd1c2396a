// The checkpoint tensor names of one architecture (docs/moe.md §1, docs/architecture.md
// "Adding an architecture"): the pieces each ArchSpec fills in (the defaults are the Hugging
// Face spelling that Llama-family MoE checkpoints share) and the full names joined from them.
// The loader (weights.cpp), make-model (generator.cpp) and the quantizer (quantizer.cpp) spell
// no tensor name of their own: an architecture whose names differ (a `model.language_model.`
// prefix, other norm names) changes its ArchSpec::names and nothing else.
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <string_view>

namespace moert {

// Every piece is a module name, without the dots that join it to the next one (the functions
// below join them) and without a ".weight" suffix: one linear's weight may be stored as
// `.weight`, `_blocks` + `_scales`, `.weight` + `.weight_scale`, ... (weights.cpp reads each);
// a norm is its module + ".weight". A parameter stored without a suffix (sinks, stacked
// experts) is named as stored. The table is plain data, constant-initialised.
struct TensorNames {
  enum Projection { kGate = 0, kUp = 1, kDown = 2 };  // index into the *_projections arrays

  // Outside the decoder layers: full module names.
  const char* embed_tokens = "model.embed_tokens";
  const char* final_norm = "model.norm";
  const char* lm_head = "lm_head";
  // Decoder layer i is "{layers}.{i}"; every name below is relative to it.
  const char* layers = "model.layers";
  const char* input_norm = "input_layernorm";
  const char* post_attention_norm = "post_attention_layernorm";
  // Attention, under `attention`: the projections, qk-norm, sinks (one logit per head).
  const char* attention = "self_attn";
  const char* q_proj = "q_proj";
  const char* k_proj = "k_proj";
  const char* v_proj = "v_proj";
  const char* o_proj = "o_proj";
  const char* q_norm = "q_norm";
  const char* k_norm = "k_norm";
  const char* sinks = "sinks";
  // Latent attention (docs/mla.md), under `attention`; without q LoRA the query is q_proj.
  const char* q_a_proj = "q_a_proj";
  const char* q_a_norm = "q_a_layernorm";
  const char* q_b_proj = "q_b_proj";
  const char* kv_a_proj = "kv_a_proj_with_mqa";
  const char* kv_a_norm = "kv_a_layernorm";
  const char* kv_b_proj = "kv_b_proj";
  // Gated DeltaNet linear attention (docs/gated-deltanet.md), under `linear_attention`: the
  // four input projections (Qwen3.5), or the two fused ones grouped by key head (Qwen3-Next),
  // the depthwise conv (a [C, 1, W] weight, no bias), the gates' parameters (stored without a
  // suffix), the output norm and projection.
  const char* linear_attention = "linear_attn";
  const char* in_proj_qkv = "in_proj_qkv";
  const char* in_proj_z = "in_proj_z";
  const char* in_proj_b = "in_proj_b";
  const char* in_proj_a = "in_proj_a";
  const char* in_proj_qkvz = "in_proj_qkvz";
  const char* in_proj_ba = "in_proj_ba";
  const char* conv1d = "conv1d";
  const char* dt_bias = "dt_bias";
  const char* a_log = "A_log";
  const char* linear_norm = "norm";
  const char* out_proj = "out_proj";
  // DeepSeek Sparse Attention's lightning indexer (docs/sparse-attention.md), under
  // `attention` + `indexer`: its query projection from the q LoRA latent, its key projection,
  // the key's LayerNorm (weight and bias) and the per-head weights projection.
  const char* indexer = "indexer";
  const char* indexer_wq_b = "wq_b";
  const char* indexer_wk = "wk";
  const char* indexer_k_norm = "k_norm";
  const char* indexer_weights_proj = "weights_proj";
  // A dense layer's MLP under `mlp`; the shared expert's under the MoE block + `shared_expert`
  // (sigmoid-gated ones also have `shared_expert_gate`). Both take `mlp_projections`.
  const char* mlp = "mlp";
  std::array<const char*, 3> mlp_projections = {"gate_proj", "up_proj", "down_proj"};
  const char* shared_expert = "shared_experts";
  const char* shared_expert_gate = "shared_expert_gate";
  // The MoE block: the router (+ ".weight", ".bias", "." + correction bias), routed expert e
  // under "{experts}.{e}" with `expert_projections`, or every expert stacked under `experts`
  // in two [E, in, out] tensors gate_up (interleaved) and down, each with "_bias"
  // (ModelConfig::stacked_experts, docs/gpt-oss.md).
  const char* moe_block = "mlp";
  const char* router = "gate";
  const char* router_correction_bias = "e_score_correction_bias";
  const char* experts = "experts";
  std::array<const char*, 3> expert_projections = {"gate_proj", "up_proj", "down_proj"};
  std::array<const char*, 2> stacked_experts = {"gate_up_proj", "down_proj"};
  // A DeepSeek multi-token prediction module k (docs/mtp.md) is layer num_layers + k: a
  // decoder block plus these, under its layer.
  const char* mtp_enorm = "enorm";
  const char* mtp_hnorm = "hnorm";
  const char* mtp_eh_proj = "eh_proj";
  const char* mtp_head_norm = "shared_head.norm";
  const char* mtp_head = "shared_head.head";
  const char* mtp_embed_tokens = "embed_tokens";

  // Full names, e.g. for layer 1 of a Qwen3-MoE checkpoint (a prefix ends with its dot):
  std::string layer_prefix(int layer) const;      // "model.layers.1."
  std::string attention_prefix(int layer) const;  // "model.layers.1.self_attn."
  std::string mlp_prefix(int layer) const;        // "model.layers.1.mlp."
  std::string linear_attention_prefix(int layer) const;  // "model.layers.1.linear_attn."
  std::string moe_prefix(int layer) const;        // "model.layers.1.mlp."
  std::string router_module(int layer) const;     // "model.layers.1.mlp.gate"
  std::string experts_prefix(int layer) const;    // "model.layers.1.mlp.experts."
  std::string expert_prefix(int layer, int expert) const;  // "model.layers.1.mlp.experts.3."
  std::string shared_expert_prefix(int layer) const;       // "model.layers.1.mlp.shared_experts."
  // A glob over one module of every layer, its pieces joined by dots ({moe_block, router}:
  // "model.layers.*.mlp.gate").
  std::string every_layer(std::initializer_list<const char*> module) const;
  // The layer a full name lies in ("model.layers.12.mlp.gate.weight": 12; INT_MAX for an index
  // past int), -1 outside the layers.
  int layer_of(std::string_view name) const;
};

}  // namespace moert
