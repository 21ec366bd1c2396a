#include "runtime/model/generator.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/host_memory.h"
#include "quant/bf16.h"
#include "core/tensor.h"
#include "runtime/io/checkpoint.h"
#include "runtime/model/weights.h"

namespace moert {
namespace {

struct SizePreset {
  const char* name;
  int vocab_size, hidden_size, num_layers, num_experts, top_k, moe_intermediate_size, num_heads, num_kv_heads,
      head_dim;
};

constexpr SizePreset kPresets[] = {
    {"tiny", 1024, 256, 4, 8, 2, 512, 4, 2, 64},
    {"small", 2048, 512, 6, 8, 2, 768, 8, 2, 64},
    {"large", 4096, 1024, 8, 16, 4, 1024, 16, 4, 64},
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Counter-based: element i of a tensor depends only on (seed, name, i).
float random_value(const TensorSpec& spec, uint64_t key, int64_t index) {
  const uint64_t bits = splitmix64(key + static_cast<uint64_t>(index) * 0x632be59bd9b4e019ull);
  const double u1 = (static_cast<double>(bits >> 40) + 0.5) / 16777216.0;              // (0, 1)
  const double u2 = static_cast<double>((bits >> 16) & 0xffffffull) / 16777216.0;      // [0, 1)
  if (spec.init == TensorSpec::Init::kUniform) return static_cast<float>(spec.a + (spec.b - spec.a) * u2);
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(normal * spec.a);
}

void add(std::vector<TensorSpec>& specs, std::string name, Shape shape, TensorSpec::Init init, float a, float b = 0.0f,
         DType dtype = DType::kBF16) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.shape = std::move(shape);
  spec.dtype = dtype;
  spec.init = init;
  spec.a = a;
  spec.b = b;
  specs.push_back(std::move(spec));
}

// The weight gets `role`; a bias, kOther.
void add_linear(std::vector<TensorSpec>& specs, const std::string& prefix, int64_t out, int64_t in, bool bias,
                TensorSpec::Role role = TensorSpec::Role::kOther) {
  add(specs, prefix + ".weight", {out, in}, TensorSpec::Init::kNormal, static_cast<float>(1.0 / std::sqrt(in)));
  specs.back().role = role;
  if (bias) add(specs, prefix + ".bias", {out}, TensorSpec::Init::kNormal, 0.1f);
}

// A norm module: its ".weight", a scale near 1 as the forward uses it (near 0 when the model
// stores w for a (1 + w) norm: ModelConfig::norm_weights_offset_by_one).
void add_norm(std::vector<TensorSpec>& specs, const std::string& module, int64_t dim, bool offset_by_one = false) {
  const float centre = offset_by_one ? 0.0f : 1.0f;
  add(specs, module + ".weight", {dim}, TensorSpec::Init::kUniform, centre - 0.2f, centre + 0.2f);
}

// A Gated DeltaNet layer's tensors (docs/gated-deltanet.md): the four input projections, or
// Qwen3-Next's two fused ones grouped by key head, the depthwise conv, the gates' A_log and
// dt_bias (F32, decays of a few percent per token), the output norm (plain w) and projection.
void add_linear_attention(std::vector<TensorSpec>& specs, const ModelConfig& c, int layer) {
  using Init = TensorSpec::Init;
  const TensorNames& n = c.arch->names;
  const LinearAttentionDims& m = c.linear_attention;
  const std::string p = n.linear_attention_prefix(layer);
  const int64_t d = c.hidden_size, nv = m.num_value_heads, value_width = nv * m.value_head_dim;
  if (m.grouped_projections) {
    add_linear(specs, p + n.in_proj_qkvz, m.conv_channels() + value_width, d, false);
    add_linear(specs, p + n.in_proj_ba, 2 * nv, d, false);
  } else {
    add_linear(specs, p + n.in_proj_qkv, m.conv_channels(), d, false);
    add_linear(specs, p + n.in_proj_z, value_width, d, false);
    add_linear(specs, p + n.in_proj_b, nv, d, false);
    add_linear(specs, p + n.in_proj_a, nv, d, false);
  }
  add(specs, p + n.conv1d + ".weight", {m.conv_channels(), 1, m.conv_width}, Init::kNormal,
      static_cast<float>(1.0 / std::sqrt(m.conv_width)));
  add(specs, p + n.a_log, {nv}, Init::kUniform, -3.0f, -1.0f, DType::kF32);
  add(specs, p + n.dt_bias, {nv}, Init::kUniform, -1.0f, 1.0f, DType::kF32);
  add_norm(specs, p + n.linear_norm, m.value_head_dim);
  add_linear(specs, p + n.out_proj, d, value_width, false, TensorSpec::Role::kResidualWrite);
}

// projections: gate, up, down under `prefix` (TensorNames::Projection order).
void add_mlp(std::vector<TensorSpec>& specs, const std::string& prefix, const std::array<const char*, 3>& projections,
             int64_t hidden, int64_t width) {
  add_linear(specs, prefix + projections[TensorNames::kGate], width, hidden, false);
  add_linear(specs, prefix + projections[TensorNames::kUp], width, hidden, false);
  add_linear(specs, prefix + projections[TensorNames::kDown], hidden, width, false, TensorSpec::Role::kResidualWrite);
}

// Multi-head latent attention's tensors (docs/mla.md; weights.h says what each is).
void add_latent_attention(std::vector<TensorSpec>& specs, const ModelConfig& c, int layer) {
  const TensorNames& n = c.arch->names;
  const std::string p = n.attention_prefix(layer);
  const LatentAttentionDims& m = c.mla;
  const int64_t d = c.hidden_size, heads = c.num_heads;
  const int64_t q_out = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  if (m.q_lora_rank > 0) {
    add_linear(specs, p + n.q_a_proj, m.q_lora_rank, d, c.qkv_bias);
    add_norm(specs, p + n.q_a_norm, m.q_lora_rank);
    add_linear(specs, p + n.q_b_proj, q_out, m.q_lora_rank, false);
  } else {
    add_linear(specs, p + n.q_proj, q_out, d, false);
  }
  add_linear(specs, p + n.kv_a_proj, m.kv_lora_rank + m.qk_rope_head_dim, d, c.qkv_bias);
  add_norm(specs, p + n.kv_a_norm, m.kv_lora_rank);
  add_linear(specs, p + n.kv_b_proj, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, false);
  add_linear(specs, p + n.o_proj, d, heads * m.v_head_dim, c.o_bias, TensorSpec::Role::kResidualWrite);
  if (c.dsa.has_indexer(layer)) {  // the lightning indexer (docs/sparse-attention.md; not on shared layers)
    const std::string i = p + n.indexer + ".";
    const int64_t ni = c.dsa.index_n_heads, di = c.dsa.index_head_dim;
    add_linear(specs, i + n.indexer_wq_b, ni * di, m.q_lora_rank, false);
    add_linear(specs, i + n.indexer_wk, di, d, false);
    add_norm(specs, i + n.indexer_k_norm, di);
    add(specs, i + n.indexer_k_norm + ".bias", {di}, TensorSpec::Init::kNormal, 0.1f);
    add_linear(specs, i + n.indexer_weights_proj, ni, d, false);
  }
}

Status write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return io_error("cannot write " + path);
  return Status::ok();
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const SizePreset& p : kPresets) names.push_back(p.name);
  return names;
}

Result<ModelConfig> preset_model_config(const ArchSpec* arch, const std::string& preset,
                                        const ModelShapeOverrides& overrides) {
  const SizePreset* size = nullptr;
  for (const SizePreset& p : kPresets) {
    if (preset == p.name) size = &p;
  }
  if (size == nullptr) return invalid_argument("unknown preset '" + preset + "' (presets: tiny, small, large)");
  if (arch == nullptr) return invalid_argument("no architecture (supported: " + supported_architecture_names() + ")");
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = overrides.vocab_size.value_or(size->vocab_size);
  c.hidden_size = overrides.hidden_size.value_or(size->hidden_size);
  c.num_layers = overrides.num_layers.value_or(size->num_layers);
  c.router.num_experts = overrides.num_experts.value_or(size->num_experts);
  c.router.top_k = overrides.top_k.value_or(size->top_k);
  c.moe_intermediate_size = overrides.moe_intermediate_size.value_or(size->moe_intermediate_size);
  c.num_heads = overrides.num_heads.value_or(size->num_heads);
  c.num_kv_heads = overrides.num_kv_heads.value_or(size->num_kv_heads);
  c.head_dim = overrides.head_dim.value_or(size->head_dim);
  c.rotary_dim = c.head_dim;
  c.dense_intermediate_size = 2 * c.moe_intermediate_size;
  c.bos_token_id = c.eos_token_id = c.vocab_size - 3;
  c.layer_is_moe.assign(static_cast<size_t>(std::max(0, c.num_layers)), true);
  if (!arch->has_generator) {
    return unsupported(std::string("make-model cannot write ") + arch->hf_class + " checkpoints yet");
  }
  arch->apply_preset(&c);
  if (overrides.num_mtp_layers.has_value()) {
    if (*overrides.num_mtp_layers < 0) {
      return invalid_argument("MTP layers = " + std::to_string(*overrides.num_mtp_layers) + " must be >= 0");
    }
    c.num_mtp_layers = c.num_unused_extra_layers = *overrides.num_mtp_layers;
  }
  // Round-trip through the parser so a preset obeys exactly the rules a config.json does.
  MOERT_ASSIGN_OR_RETURN(ModelConfig parsed, parse_model_config(model_config_to_json(c)));
  if (parsed.num_mtp_layers != c.num_mtp_layers) {
    return unsupported(std::string(arch->hf_class) + " has no multi-token prediction layers (only DeepSeek-style "
                       "configs with num_nextn_predict_layers)");
  }
  return parsed;
}

namespace {
std::vector<TensorSpec> unshaped_tensor_specs(const ModelConfig& c);
void make_faithful_mtp(const ModelConfig& c, const WeightShaping& shaping, int layer, TensorSpec& spec);
}  // namespace

Status validate_weight_shaping(const WeightShaping& shaping) {
  if (!(shaping.router_skew >= 0.0f) || !std::isfinite(shaping.router_skew)) {
    return invalid_argument("router skew " + std::to_string(shaping.router_skew) + " must be finite and >= 0");
  }
  if (shaping.faithful_layers < 0) {
    return invalid_argument("faithful layers " + std::to_string(shaping.faithful_layers) + " must be >= 0");
  }
  if (!(shaping.late_layer_scale > 0.0f && shaping.late_layer_scale <= 1.0f)) {
    return invalid_argument("late layer scale " + std::to_string(shaping.late_layer_scale) + " must be in (0, 1]");
  }
  return Status::ok();
}

std::vector<TensorSpec> checkpoint_tensor_specs(const ModelConfig& c, const WeightShaping& shaping) {
  std::vector<TensorSpec> specs = unshaped_tensor_specs(c);
  const bool damp = shaping.faithful_layers > 0 && shaping.late_layer_scale != 1.0f;
  for (TensorSpec& spec : specs) {
    if (shaping.router_skew > 0.0f && spec.role == TensorSpec::Role::kEmbedding) spec.offset = 1.0f;
    if (shaping.router_skew > 0.0f && spec.role == TensorSpec::Role::kRouter) {
      spec.offset = shaping.router_skew / static_cast<float>(c.hidden_size);
      spec.offset_ramps = true;
    }
    if (damp && spec.role == TensorSpec::Role::kResidualWrite && spec.layer >= shaping.faithful_layers &&
        spec.layer < c.num_layers) {
      spec.a *= shaping.late_layer_scale;
    }
  }
  if (shaping.faithful_layers > 0 && check_faithful_mtp(c, shaping).is_ok()) {
    for (TensorSpec& spec : specs) {
      if (spec.layer >= c.num_layers) make_faithful_mtp(c, shaping, spec.layer, spec);
    }
  }
  return specs;
}

namespace {
// One decoder layer's tensors, each with its `layer`.
void add_layer(std::vector<TensorSpec>& specs, const ModelConfig& c, int layer, bool is_moe) {
  using Init = TensorSpec::Init;
  using Role = TensorSpec::Role;
  const TensorNames& n = c.arch->names;
  const int64_t d = c.hidden_size;
  const size_t first = specs.size();
  const std::string p = n.layer_prefix(layer), attention = n.attention_prefix(layer);
  const bool plus_one = c.norm_weights_offset_by_one;
  add_norm(specs, p + n.input_norm, d, plus_one);
  add_norm(specs, p + n.post_attention_norm, d, plus_one);
  const bool linear = static_cast<size_t>(layer) < c.layer_is_linear_attention.size() &&
                      c.layer_is_linear_attention[static_cast<size_t>(layer)];
  if (linear) {
    add_linear_attention(specs, c, layer);
  } else if (c.mla.enabled()) {
    add_latent_attention(specs, c, layer);
  } else {
    const int64_t q_out = static_cast<int64_t>(c.num_heads) * c.head_dim;
    const int64_t kv_out = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
    // Gated attention: per head [Dh query rows | Dh gate rows].
    add_linear(specs, attention + n.q_proj, c.attention_output_gate ? 2 * q_out : q_out, d, c.qkv_bias);
    add_linear(specs, attention + n.k_proj, kv_out, d, c.qkv_bias);
    add_linear(specs, attention + n.v_proj, kv_out, d, c.qkv_bias);
    add_linear(specs, attention + n.o_proj, d, q_out, c.o_bias, Role::kResidualWrite);
  }
  if (c.attention_sinks) add(specs, attention + n.sinks, {c.num_heads}, Init::kNormal, 1.0f);
  if (c.qk_norm && !linear) {
    add_norm(specs, attention + n.q_norm, c.head_dim, plus_one);
    add_norm(specs, attention + n.k_norm, c.head_dim, plus_one);
  }
  if (!is_moe) {
    add_mlp(specs, n.mlp_prefix(layer), n.mlp_projections, d, c.dense_intermediate_size);
  } else {
    const std::string router = n.router_module(layer);
    add_linear(specs, router, c.num_experts(), d, c.router_bias, Role::kRouter);
    if (c.router_has_correction_bias) {
      add(specs, router + "." + n.router_correction_bias, {c.num_experts()}, Init::kUniform, 0.0f, 0.1f, DType::kF32);
    }
    const size_t first_routed = specs.size();
    if (c.fused_gate_up_experts) {  // Qwen3.5: [E, 2I, D] (gate rows, then up rows) and [E, D, I]
      const int64_t e = c.num_experts(), width = c.moe_intermediate_size;
      add(specs, n.experts_prefix(layer) + n.stacked_experts[0], {e, 2 * width, d}, Init::kNormal,
          static_cast<float>(1.0 / std::sqrt(d)));
      add(specs, n.experts_prefix(layer) + n.stacked_experts[1], {e, d, width}, Init::kNormal,
          static_cast<float>(1.0 / std::sqrt(width)));
      specs.back().role = Role::kResidualWrite;
    } else if (c.stacked_experts) {  // [E, in, out] with interleaved gate/up outputs (docs/gpt-oss.md)
      const std::string gate_up = n.experts_prefix(layer) + n.stacked_experts[0];
      const std::string down = n.experts_prefix(layer) + n.stacked_experts[1];
      const int64_t e = c.num_experts(), width = c.moe_intermediate_size;
      add(specs, gate_up, {e, d, 2 * width}, Init::kNormal, static_cast<float>(1.0 / std::sqrt(d)));
      add(specs, gate_up + "_bias", {e, 2 * width}, Init::kNormal, 0.1f);
      add(specs, down, {e, width, d}, Init::kNormal, static_cast<float>(1.0 / std::sqrt(width)));
      specs.back().role = Role::kResidualWrite;
      add(specs, down + "_bias", {e, d}, Init::kNormal, 0.1f);
    }
    for (int e = 0; !c.stacked_experts && !c.fused_gate_up_experts && e < c.num_experts(); ++e) {
      add_mlp(specs, n.expert_prefix(layer, e), n.expert_projections, d, c.moe_intermediate_size);
    }
    for (size_t s = first_routed; s < specs.size(); ++s) specs[s].routed_expert = true;
    if (c.shared_expert != SharedExpertKind::kNone) {
      add_mlp(specs, n.shared_expert_prefix(layer), n.mlp_projections, d, c.shared_intermediate_size);
    }
    if (c.shared_expert == SharedExpertKind::kSigmoidGated) {
      add_linear(specs, n.moe_prefix(layer) + n.shared_expert_gate, 1, d, false);
    }
  }
  for (size_t s = first; s < specs.size(); ++s) specs[s].layer = layer;
}

std::vector<TensorSpec> unshaped_tensor_specs(const ModelConfig& c) {
  using Init = TensorSpec::Init;
  const TensorNames& n = c.arch->names;
  const std::string embed = std::string(n.embed_tokens) + ".weight", lm_head = std::string(n.lm_head) + ".weight";
  std::vector<TensorSpec> specs;
  const int64_t d = c.hidden_size;
  add(specs, embed, {c.vocab_size, d}, Init::kNormal, 1.0f);
  specs.back().role = TensorSpec::Role::kEmbedding;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    add_layer(specs, c, layer, c.layer_is_moe[static_cast<size_t>(layer)]);
  }
  add_norm(specs, n.final_norm, d, c.norm_weights_offset_by_one);
  if (!c.tie_word_embeddings) {
    add(specs, lm_head, {c.vocab_size, d}, Init::kNormal, static_cast<float>(2.0 / std::sqrt(d)));
  }
  // The MTP modules (docs/mtp.md); embed_tokens and shared_head.head are copies of the main
  // ones, as the release stores them.
  for (int k = 0; k < c.num_mtp_layers; ++k) {
    const int layer = c.num_layers + k;
    const std::string p = n.layer_prefix(layer);
    const size_t first = specs.size();
    add_norm(specs, p + n.mtp_enorm, d);
    add_norm(specs, p + n.mtp_hnorm, d);
    add_linear(specs, p + n.mtp_eh_proj, d, 2 * d, false);
    add_layer(specs, c, layer, /*is_moe=*/true);
    add_norm(specs, p + n.mtp_head_norm, d);
    add(specs, p + n.mtp_embed_tokens + ".weight", {c.vocab_size, d}, Init::kNormal, 0.0f);
    specs.back().copy_of = embed;
    add(specs, p + n.mtp_head + ".weight", {c.vocab_size, d}, Init::kNormal, 0.0f);
    specs.back().copy_of = c.tie_word_embeddings ? embed : lm_head;
    for (size_t s = first; s < specs.size(); ++s) specs[s].layer = layer;
  }
  return specs;
}

// The faithful MTP layer's tensor `spec` (of `layer` = num_layers + k) made
// from layer 0 (WeightShaping): x = eh_proj([enorm(e) | hnorm(g)]) = enorm(e) ~ e (enorm holds
// the embedding rows' expected RMS), then layer 0's attention and MLP: a MoE layer 0 is copied
// whole; a dense one [2I wide = shared I_s + routed I] is split into the shared expert (its
// first I_s rows of gate/up, columns of down) and E identical routed experts (the rest, down
// divided by routed_scaling_factor: the renormalised top-k weights sum to 1 before the scale).
void make_faithful_mtp(const ModelConfig& c, const WeightShaping& shaping, int layer, TensorSpec& spec) {
  const TensorNames& n = c.arch->names;
  const std::string p = n.layer_prefix(layer), p0 = n.layer_prefix(0);
  const std::string rest = spec.name.substr(p.size());
  auto copy = [&](const std::string& source, int64_t row, int64_t column, float scale) {
    spec.copy_of = source;
    spec.copy_row = row;
    spec.copy_column = column;
    spec.copy_scale = scale;
  };
  auto constant = [&](float value) {
    spec.init = TensorSpec::Init::kUniform;
    spec.a = spec.b = value;
  };
  auto is = [&](const char* module) { return rest == std::string(module) + ".weight"; };
  if (!spec.copy_of.empty()) return;  // embed_tokens, shared_head.head
  if (is(n.mtp_enorm)) return constant(std::sqrt(1.0f + (shaping.router_skew > 0.0f ? 1.0f : 0.0f)));
  if (is(n.mtp_hnorm)) return constant(1.0f);
  if (is(n.mtp_eh_proj)) {
    spec.init = TensorSpec::Init::kEye;
    spec.a = 1.0f;
    return;
  }
  if (is(n.mtp_head_norm)) return copy(std::string(n.final_norm) + ".weight", 0, 0, 1.0f);
  if (c.layer_is_moe[0] || !spec.name.starts_with(n.moe_prefix(layer))) return copy(p0 + rest, 0, 0, 1.0f);
  const int64_t shared_width = c.shared_intermediate_size;
  for (int proj : {TensorNames::kGate, TensorNames::kUp, TensorNames::kDown}) {
    const std::string dense = n.mlp_prefix(0) + n.mlp_projections[proj] + ".weight";  // layer 0's MLP
    const bool down = proj == TensorNames::kDown;
    if (spec.name == n.shared_expert_prefix(layer) + n.mlp_projections[proj] + ".weight") return copy(dense, 0, 0, 1.0f);
    if (spec.name.starts_with(n.experts_prefix(layer)) &&
        spec.name.ends_with(std::string(".") + n.expert_projections[proj] + ".weight")) {
      return copy(dense, down ? 0 : shared_width, down ? shared_width : 0,
                  down ? 1.0f / c.router.routed_scaling_factor : 1.0f);
    }
  }
  // The router and its correction bias stay random: every routed expert is the same.
}
}  // namespace

Status check_faithful_mtp(const ModelConfig& c, const WeightShaping& shaping) {
  if (shaping.faithful_layers == 0 || c.num_mtp_layers == 0 || c.layer_is_moe.empty() || c.layer_is_moe[0]) {
    return Status::ok();
  }
  if (c.shared_expert != SharedExpertKind::kUngated || !c.router.norm_topk_prob ||
      c.dense_intermediate_size != c.shared_intermediate_size + c.moe_intermediate_size) {
    return invalid_argument("a faithful MTP layer splits layer 0's dense MLP (width " +
                            std::to_string(c.dense_intermediate_size) + ") into one ungated shared expert and " +
                            "renormalised routed experts of widths " + std::to_string(c.shared_intermediate_size) +
                            " + " + std::to_string(c.moe_intermediate_size) + "; this model's shapes do not allow it");
  }
  return Status::ok();
}

ParameterCounts count_parameters(const ModelConfig& c) {
  ParameterCounts counts;
  for (const TensorSpec& spec : checkpoint_tensor_specs(c)) {
    if (spec.layer >= c.num_layers) continue;  // an MTP module (layer num_layers + k), not the model's
    const int64_t numel = shape_numel(spec.shape);
    counts.total += numel;
    counts.active_per_token += spec.routed_expert ? 0 : numel;
  }
  int num_moe = 0;
  for (bool moe : c.layer_is_moe) num_moe += moe ? 1 : 0;
  counts.active_per_token += static_cast<int64_t>(num_moe) * c.top_k() * 3 * c.hidden_size * c.moe_intermediate_size;
  return counts;
}

Status write_random_checkpoint(const ModelConfig& config, uint64_t seed, const std::string& dir,
                               uint64_t max_shard_bytes, ThreadPool& pool, const WeightShaping& shaping) {
  MOERT_RETURN_IF_ERROR(validate_weight_shaping(shaping));
  MOERT_RETURN_IF_ERROR(check_faithful_mtp(config, shaping));
  const std::vector<TensorSpec> specs = checkpoint_tensor_specs(config, shaping);
  // Every tensor is held in memory until the shards are written: check the total first.
  int64_t total_bytes = 0;
  for (const TensorSpec& spec : specs) {
    std::optional<int64_t> bytes = int64_t{dtype_bits(spec.dtype) / 8};
    for (int64_t d : spec.shape) {
      if (bytes.has_value()) bytes = checked_mul(bytes.value(), d);
    }
    const int64_t tensor_bytes = bytes.value_or(-1);
    if (tensor_bytes < 0 || __builtin_add_overflow(total_bytes, tensor_bytes, &total_bytes)) {
      return invalid_argument("tensor '" + spec.name + "' of shape " + shape_to_string(spec.shape) +
                              " is too large to generate");
    }
  }
  const std::optional<int64_t> available = available_memory_bytes();
  if (available && total_bytes > *available) {
    return invalid_argument("the checkpoint needs " + std::to_string(total_bytes >> 20) + " MiB in memory, more than the " +
                            std::to_string(*available >> 20) + " MiB available");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  std::vector<Buffer> buffers;
  buffers.reserve(specs.size());
  for (const TensorSpec& spec : specs) buffers.emplace_back(spec.dtype, spec.shape);
  // Fill element ranges in parallel; values depend on (seed, name, index) only.
  std::map<std::string, size_t> index_of;
  for (size_t s = 0; s < specs.size(); ++s) index_of[specs[s].name] = s;
  const uint64_t direction_key = splitmix64(seed ^ fnv1a_64("router-skew-direction"));
  // Element i of `spec`'s own values (copy_of unset).
  auto element = [&](const TensorSpec& spec, uint64_t key, int64_t i) {
    const int64_t rows = spec.shape.size() == 2 ? spec.shape[0] : 1;
    const int64_t row_length = rows > 0 ? shape_numel(spec.shape) / rows : 1;
    if (spec.init == TensorSpec::Init::kEye) return i / row_length == i % row_length ? spec.a : 0.0f;
    float value = random_value(spec, key, i);
    if (spec.offset != 0.0f) {
      const int64_t row = i / row_length, column = i % row_length;
      const float ramp = spec.offset_ramps && rows > 1
                             ? 1.0f - 2.0f * static_cast<float>(row) / static_cast<float>(rows - 1)
                             : 1.0f;
      const float sign = (splitmix64(direction_key + static_cast<uint64_t>(column)) >> 63) != 0 ? 1.0f : -1.0f;
      value += spec.offset * ramp * sign;
    }
    return value;
  };
  for (size_t s = 0; s < specs.size(); ++s) {
    const TensorSpec& spec = specs[s];
    const TensorSpec* source = nullptr;
    if (!spec.copy_of.empty()) {
      const auto found = index_of.find(spec.copy_of);
      if (found == index_of.end() || !specs[found->second].copy_of.empty()) {
        return invalid_argument("tensor '" + spec.name + "' copies '" + spec.copy_of + "', which is not generated");
      }
      source = &specs[found->second];
    }
    const TensorSpec& values_of = source != nullptr ? *source : spec;
    const uint64_t key = splitmix64(seed ^ fnv1a_64(values_of.name));
    const TensorView& view = buffers[s].view();
    const int64_t rows = spec.shape.size() == 2 ? spec.shape[0] : 1;
    const int64_t row_length = rows > 0 ? view.numel() / rows : 1;
    const int64_t source_rows = values_of.shape.size() == 2 ? values_of.shape[0] : 1;
    const int64_t source_row_length = source_rows > 0 ? shape_numel(values_of.shape) / source_rows : 1;
    pool.parallel_for(view.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float value;
        if (source != nullptr) {
          const int64_t j = (spec.copy_row + i / row_length) * source_row_length + spec.copy_column + i % row_length;
          value = element(*source, key, j) * spec.copy_scale;
        } else {
          value = element(spec, key, i);
        }
        if (spec.dtype == DType::kF32) {
          view.as<float>()[i] = value;
        } else {
          view.as<uint16_t>()[i] = quant::f32_to_bf16(value);
        }
      }
    });
  }
  std::vector<io::NamedTensor> named;
  for (size_t s = 0; s < specs.size(); ++s) named.push_back({specs[s].name, buffers[s].view()});
  MOERT_RETURN_IF_ERROR(io::write_sharded_checkpoint(dir, named, max_shard_bytes));
  MOERT_RETURN_IF_ERROR(write_json(dir + "/config.json", model_config_to_json(config)));
  nlohmann::json generation = {{"bos_token_id", config.bos_token_id}, {"eos_token_id", config.eos_token_id},
                               {"do_sample", false}};
  return write_json(dir + "/generation_config.json", generation);
}

}  // namespace moert
