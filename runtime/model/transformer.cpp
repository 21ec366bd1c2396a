#include "runtime/model/transformer.h"

#include <algorithm>
#include <cmath>

#include "quant/weight.h"
#include "runtime/backend/reference_ops.h"
#include "core/check.h"

namespace moert {

void rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps) {
  backend::reference_rms_norm(x, num_rows, dim, weight, eps);
}

int32_t argmax_lowest_index(const float* values, int64_t count) { return backend::reference_argmax(values, count); }

std::vector<backend::Backend::RecurrentSequence> AttentionContext::recurrent_sequences(backend::Backend& /*backend*/,
                                                                                   int layer, int64_t /*num_tokens*/) {
  MOERT_CHECK(false, "layer " << layer << " is linear attention, but this attention context keeps no recurrent state");
  return {};
}

void AttentionContext::attend_sparse(backend::Backend& /*backend*/, int layer,
                                     const attention::AttentionVariant& /*variant*/, DevicePtr<const float> /*q*/,
                                     DevicePtr<const float> /*rows*/, int /*key_width*/,
                                     const attention::SparseIndexQuery& /*index*/, int64_t /*num_tokens*/,
                                     DevicePtr<float> /*out*/) {
  MOERT_CHECK(false, "layer " << layer << ": this attention context has no sparse attention (DSA)");
}

TransformerForward::TransformerForward(const ModelConfig& config, const ModelWeights& weights,
                                       backend::Backend& backend)
    : config_(config),
      weights_(weights),
      backend_(backend),
      rope_(model_rotary_embedding(config)),
      local_experts_(config) {
  if (config.dsa.enabled()) {
    index_rope_.emplace(config.dsa.index_head_dim, config.mla.qk_rope_head_dim, config.rope_theta, config.rope_scaling,
                        config.dsa.rope_pairing, /*first_channel=*/0);
  }
  const std::vector<LayerSpec> specs = build_layer_specs(*config.arch, config);
  for (size_t layer = 0; layer < specs.size(); ++layer) {
    attention::AttentionVariant variant;
    variant.softmax_scale = config.attention_softmax_scale;
    if (specs[layer].attention == AttentionKind::kSlidingWindow) variant.sliding_window = specs[layer].sliding_window;
    const std::vector<float>& sinks = weights.layers[layer].attention.sinks;
    if (!sinks.empty()) variant.sinks = sinks.data();
    layer_variants_.push_back(variant);
  }
  // The MTP blocks attend as any layer of the model's attention kind (no window, no sinks).
  for (size_t module = 0; module < weights.mtp.size(); ++module) {
    attention::AttentionVariant variant;
    variant.softmax_scale = config.attention_softmax_scale;
    layer_variants_.push_back(variant);
  }
}

Result<std::vector<float>> TransformerForward::forward(const ForwardBatch& batch, AttentionContext& attention) const {
  MOERT_ASSIGN_OR_RETURN(Buffer logits_on_device, device_logits(batch, attention));
  std::vector<float> logits(static_cast<size_t>(logits_on_device.view().numel()));
  backend_.to_host(logits_on_device.ptr<float>(), logits_on_device.view().numel(), logits.data());
  return logits;
}

Result<std::vector<int32_t>> TransformerForward::forward_and_sample(
    const ForwardBatch& batch, AttentionContext& attention, std::span<const backend::Backend::RowSampling> rows) const {
  if (rows.size() != batch.logit_rows.size()) {
    return invalid_argument(std::to_string(rows.size()) + " sampling rows for " +
                            std::to_string(batch.logit_rows.size()) + " logit rows");
  }
  MOERT_ASSIGN_OR_RETURN(Buffer logits_on_device, device_logits(batch, attention));
  std::vector<int32_t> tokens(rows.size());
  backend_.sample_rows(logits_on_device.ptr<float>(), config_.vocab_size, rows, tokens.data());
  return tokens;
}

Status TransformerForward::validate(const ForwardBatch& batch) const {
  const ModelConfig& c = config_;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  if (batch.positions.size() != batch.tokens.size()) {
    return invalid_argument("batch has " + std::to_string(batch.tokens.size()) + " tokens but " +
                            std::to_string(batch.positions.size()) + " positions");
  }
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= c.vocab_size) {
      return invalid_argument("token id " + std::to_string(batch.tokens[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
    if (batch.positions[i] < 0 || batch.positions[i] >= c.max_position_embeddings) {
      return invalid_argument("position " + std::to_string(batch.positions[i]) + " at index " + std::to_string(i) +
                              " is outside [0, max_position_embeddings = " +
                              std::to_string(c.max_position_embeddings) + ")");
    }
  }
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    if (batch.logit_rows[i] < 0 || batch.logit_rows[i] >= num_tokens) {
      return invalid_argument("logit row " + std::to_string(batch.logit_rows[i]) + " is outside the batch of " +
                              std::to_string(num_tokens) + " tokens");
    }
  }
  return {};
}

Status TransformerForward::forward_into(const ForwardBatch& batch, AttentionContext& attention,
                                        DevicePtr<float> logits) const {
  MOERT_ASSIGN_OR_RETURN(Buffer logits_on_device, device_logits(batch, attention));
  backend_.copy(logits, logits_on_device.ptr<float>(), logits_on_device.view().numel());
  return {};
}

std::string TransformerForward::step_graph_blocker() const {
  // The state slots' pointers are baked into each step's op arguments (not device inputs).
  if (config_.linear_attention.enabled()) return "linear-attention layers address their state slots per step";
  if (config_.dsa.enabled()) return "sparse attention (DSA) selects its positions through host-side plans";
  if (!routed_experts_->routes_on_device()) return "the routed experts plan each MoE layer's dispatch on the host";
  if (selection_bias_ != nullptr) {
    for (const std::vector<float>& bias : *selection_bias_) {
      if (!bias.empty()) return "a load-balancing bias is uploaded at every step";
    }
  }
  return {};
}

void TransformerForward::prepare_step_graphs() const {
  backend_.prepare_device_positions(rope_, config_.max_position_embeddings);
}

Result<Buffer> TransformerForward::device_logits(const ForwardBatch& batch, AttentionContext& attention,
                                                 DevicePtr<float> final_hidden) const {
  const ModelConfig& c = config_;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t dim = c.hidden_size;
  MOERT_RETURN_IF_ERROR(validate(batch));
  // x: [T, D] residual stream, embedded.
  const Buffer x = activations(num_tokens * dim);
  // The embedding's dtype was checked when the weights were bound; the ids just above.
  backend_.embedding_gather(weights_.embed_tokens, batch.tokens_for_ops(), num_tokens, x.ptr<float>());
  for (int layer = 0; layer < c.num_layers; ++layer) decoder_layer(layer, batch, attention, x.ptr<float>());
  if (final_hidden != nullptr) {
    // g for every row; the logit rows are taken from it (RMSNorm is row-invariant, so the
    // logits are the same bits as without final_hidden).
    backend_.copy(final_hidden, x.ptr<float>(), num_tokens * dim);
    backend_.rms_norm(final_hidden, num_tokens, dim, weights_.final_norm.data(), c.rms_norm_eps);
    const int64_t num_rows = static_cast<int64_t>(batch.logit_rows.size());
    const Buffer rows = activations(num_rows * dim);
    backend_.gather_rows(final_hidden, dim, batch.logit_rows.data(), num_rows, rows.ptr<float>());
    Buffer logits = activations(num_rows * c.vocab_size);
    backend_.linear(weights_.lm_head, rows.ptr<float>(), num_rows, nullptr, logits.ptr<float>());
    return logits;
  }
  return head_logits(batch, x.ptr<float>(), weights_.final_norm, weights_.lm_head);
}

void TransformerForward::decoder_layer(int layer, const ForwardBatch& batch, AttentionContext& attention,
                                       DevicePtr<float> x) const {
  // The MTP blocks (layer >= num_layers) have no LayerSpec; their attention is the model's.
  const bool latent = layer < config_.num_layers
                          ? config_.layers[static_cast<size_t>(layer)].attention == AttentionKind::kMla
                          : config_.mla.enabled();
  const bool linear = layer < config_.num_layers &&
                      config_.layers[static_cast<size_t>(layer)].attention == AttentionKind::kGatedDeltaNet;
  if (linear) {
    linear_attention_block(layer, batch, attention, x);
  } else if (latent) {
    latent_attention_block(layer, batch, attention, x);
  } else {
    attention_block(layer, batch, attention, x);
  }
  ffn_block(layer, static_cast<int64_t>(batch.tokens.size()), x);
}

Buffer TransformerForward::head_logits(const ForwardBatch& batch, DevicePtr<float> x, const std::vector<float>& norm,
                                       const quant::LinearWeight& head) const {
  const ModelConfig& c = config_;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t dim = c.hidden_size;
  // Final norm and LM head only for the rows that need logits (every row, as in decode: x
  // itself, no gather).
  const int64_t num_rows = static_cast<int64_t>(batch.logit_rows.size());
  bool every_row = num_rows == num_tokens;
  for (int64_t r = 0; every_row && r < num_rows; ++r) every_row = batch.logit_rows[static_cast<size_t>(r)] == r;
  Buffer selected;
  if (!every_row) {
    selected = activations(num_rows * dim);
    backend_.gather_rows(x, dim, batch.logit_rows.data(), num_rows, selected.ptr<float>());
  }
  const DevicePtr<float> rows = every_row ? x : selected.ptr<float>();
  backend_.rms_norm(rows, num_rows, dim, norm.data(), c.rms_norm_eps);
  Buffer logits = activations(num_rows * c.vocab_size);
  backend_.linear(head, rows, num_rows, nullptr, logits.ptr<float>());
  return logits;
}

Result<std::vector<float>> TransformerForward::forward_with_hidden(const ForwardBatch& batch,
                                                                   AttentionContext& attention,
                                                                   std::vector<float>* final_hidden) const {
  const int64_t count = static_cast<int64_t>(batch.tokens.size()) * config_.hidden_size;
  const Buffer hidden = activations(count);
  MOERT_ASSIGN_OR_RETURN(Buffer logits_on_device, device_logits(batch, attention, hidden.ptr<float>()));
  final_hidden->resize(static_cast<size_t>(count));
  backend_.to_host(hidden.ptr<float>(), count, final_hidden->data());
  std::vector<float> logits(static_cast<size_t>(logits_on_device.view().numel()));
  backend_.to_host(logits_on_device.ptr<float>(), logits_on_device.view().numel(), logits.data());
  return logits;
}

// x = eh_proj([enorm(embed(t)) | hnorm(h)]) (embedding half first, docs/mtp.md), one decoder
// layer, then shared_head.norm and the module's head.
Result<std::vector<float>> TransformerForward::mtp_forward(int module, const ForwardBatch& batch,
                                                           DevicePtr<const float> hidden,
                                                           AttentionContext& attention,
                                                           std::vector<float>* block_out) const {
  const ModelConfig& c = config_;
  if (module < 0 || module >= num_mtp_modules()) {
    return invalid_argument("MTP module " + std::to_string(module) + " is not loaded (" +
                            std::to_string(num_mtp_modules()) + " loaded)");
  }
  MOERT_RETURN_IF_ERROR(validate(batch));
  const MtpWeights& m = weights_.mtp[static_cast<size_t>(module)];
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t dim = c.hidden_size;
  const Buffer embedded = activations(num_tokens * dim);  // [T, D]
  backend_.embedding_gather(m.embed_tokens.data != nullptr ? m.embed_tokens : weights_.embed_tokens,
                            batch.tokens_for_ops(), num_tokens, embedded.ptr<float>());
  backend_.rms_norm(embedded.ptr<float>(), num_tokens, dim, m.enorm.data(), c.rms_norm_eps);
  const Buffer h = normed_copy(hidden, num_tokens, m.hnorm);  // [T, D]
  const Buffer joined = activations(num_tokens * 2 * dim);  // [T, 2D] = [e | h]
  backend_.copy_rows(joined.ptr<float>(), 2 * dim, embedded.ptr<float>(), dim, num_tokens, dim);
  backend_.copy_rows(joined.ptr<float>() + dim, 2 * dim, h.ptr<float>(), dim, num_tokens, dim);
  const Buffer x = activations(num_tokens * dim);  // [T, D] the block's residual stream
  backend_.linear(m.eh_proj.weight, joined.ptr<float>(), num_tokens,
                  m.eh_proj.bias.empty() ? nullptr : m.eh_proj.bias.data(), x.ptr<float>());
  decoder_layer(c.num_layers + module, batch, attention, x.ptr<float>());
  if (block_out != nullptr) {
    block_out->resize(static_cast<size_t>(num_tokens * dim));
    backend_.to_host(x.ptr<float>(), num_tokens * dim, block_out->data());
  }
  const Buffer logits = head_logits(batch, x.ptr<float>(), m.head_norm, m.head.has_value() ? *m.head : weights_.lm_head);
  std::vector<float> out(static_cast<size_t>(logits.view().numel()));
  backend_.to_host(logits.ptr<float>(), logits.view().numel(), out.data());
  return out;
}

Buffer TransformerForward::activations(int64_t count) const { return backend_.allocate(DType::kF32, {count}); }

Buffer TransformerForward::normed_copy(DevicePtr<const float> x, int64_t num_rows, const std::vector<float>& norm) const {
  const int64_t dim = config_.hidden_size;
  Buffer h = activations(num_rows * dim);
  backend_.copy(h.ptr<float>(), x, num_rows * dim);
  backend_.rms_norm(h.ptr<float>(), num_rows, dim, norm.data(), config_.rms_norm_eps);
  return h;
}

void TransformerForward::add_projection(const quant::LinearWeight& weight, const float* bias, DevicePtr<const float> in,
                                        int64_t num_rows, DevicePtr<float> x) const {
  const int64_t dim = config_.hidden_size;
  const Buffer projected = activations(num_rows * dim);
  backend_.linear(weight, in, num_rows, bias, projected.ptr<float>());
  backend_.add(x, projected.ptr<float>(), num_rows * dim);
}

void TransformerForward::attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention,
                                         DevicePtr<float> x) const {
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const AttentionWeights& a = l.attention;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t q_width = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_width = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;

  const Buffer h = normed_copy(x, num_tokens, l.input_norm);  // [T, D]
  const Buffer q = activations(num_tokens * q_width);   // [T, H, Dh]
  const Buffer k = activations(num_tokens * kv_width);  // [T, KVH, Dh]
  const Buffer v = activations(num_tokens * kv_width);  // [T, KVH, Dh]
  // Gated attention: q_proj gives per head [Dh query | Dh gate], split apart here.
  const bool gated = c.attention_output_gate;
  const Buffer query_and_gate = gated ? activations(2 * num_tokens * q_width) : Buffer();  // [T, H, 2 Dh]
  const Buffer gate = gated ? activations(num_tokens * q_width) : Buffer();               // [T, H, Dh]
  auto bias_or_null = [](const Linear& linear) { return linear.bias.empty() ? nullptr : linear.bias.data(); };
  const backend::Backend::LinearOfX projections[] = {
      {&a.q.weight, bias_or_null(a.q), gated ? query_and_gate.ptr<float>() : q.ptr<float>()},
      {&a.k.weight, bias_or_null(a.k), k.ptr<float>()},
      {&a.v.weight, bias_or_null(a.v), v.ptr<float>()}};
  backend_.linears_of(h.ptr<float>(), num_tokens, projections);
  if (gated) {
    const int64_t rows = num_tokens * c.num_heads, head = c.head_dim;
    backend_.copy_rows(q.ptr<float>(), head, query_and_gate.ptr<float>(), 2 * head, rows, head);
    backend_.copy_rows(gate.ptr<float>(), head, query_and_gate.ptr<float>() + head, 2 * head, rows, head);
  }
  if (c.qk_norm) {
    backend_.rms_norm(q.ptr<float>(), num_tokens * c.num_heads, c.head_dim, a.q_norm.data(), c.rms_norm_eps);
    backend_.rms_norm(k.ptr<float>(), num_tokens * c.num_kv_heads, c.head_dim, a.k_norm.data(), c.rms_norm_eps);
  }
  backend_.rope(rope_, q.ptr<float>(), num_tokens, c.num_heads, batch.positions_for_ops());
  backend_.rope(rope_, k.ptr<float>(), num_tokens, c.num_kv_heads, batch.positions_for_ops());
  const Buffer attn = activations(num_tokens * q_width);  // [T, H, Dh]
  attention.attend(backend_, layer, layer_variants_[static_cast<size_t>(layer)], q.ptr<float>(), k.ptr<float>(),
                   v.ptr<float>(), num_tokens, attn.ptr<float>());
  if (gated) backend_.sigmoid_mul(attn.ptr<float>(), gate.ptr<float>(), num_tokens * q_width);
  add_projection(a.o.weight, bias_or_null(a.o), attn.ptr<float>(), num_tokens, x);
}

// Multi-head latent attention in the absorbed form (docs/mla.md). Every head attends over
// the same latent rows [c | k_pe] (R = dc + dr values per token, what the KV cache stores):
// the query's nope part is absorbed through W_UK (q_lat = W_UK^T q_nope), the attention
// output over the latents is expanded per head through W_UV.
void TransformerForward::latent_attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention,
                                                DevicePtr<float> x) const {
  const ModelConfig& c = config_;
  const LatentAttentionDims& m = c.mla;
  const LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const AttentionWeights& a = l.attention;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t heads = c.num_heads;
  const int64_t dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim, dc = m.kv_lora_rank, dv = m.v_head_dim;
  const int64_t q_head = dn + dr, row = c.head_dim;  // row == dc + dr
  auto bias_or_null = [](const Linear& linear) { return linear.bias.empty() ? nullptr : linear.bias.data(); };

  const Buffer h = normed_copy(x, num_tokens, l.input_norm);  // [T, D]
  const Buffer q = activations(num_tokens * heads * q_head);  // [T, H, dn + dr]
  // latent: [T, R] = [c | k_pe]; the norm applies to c only.
  const Buffer latent = activations(num_tokens * row);
  const float latent_eps = m.norm_eps > 0.0f ? m.norm_eps : c.rms_norm_eps;
  const backend::Backend::LinearOfX kv_a{&a.kv_a.weight, bias_or_null(a.kv_a), latent.ptr<float>()};
  Buffer compressed;  // [T, qr]: the normed q LoRA latent (the indexer reads it too)
  if (m.q_lora_rank > 0) {
    compressed = activations(num_tokens * m.q_lora_rank);
    const backend::Backend::LinearOfX from_h[] = {{&a.q_a.weight, bias_or_null(a.q_a), compressed.ptr<float>()}, kv_a};
    backend_.linears_of(h.ptr<float>(), num_tokens, from_h);
    backend_.rms_norm(compressed.ptr<float>(), num_tokens, m.q_lora_rank, a.q_a_norm.data(), latent_eps);
    backend_.linear(a.q.weight, compressed.ptr<float>(), num_tokens, nullptr, q.ptr<float>());
  } else {
    const backend::Backend::LinearOfX from_h[] = {{&a.q.weight, nullptr, q.ptr<float>()}, kv_a};
    backend_.linears_of(h.ptr<float>(), num_tokens, from_h);
  }
  const Buffer compressed_kv = activations(num_tokens * dc);  // [T, dc]
  backend_.copy_rows(compressed_kv.ptr<float>(), dc, latent.ptr<float>(), row, num_tokens, dc);
  backend_.rms_norm(compressed_kv.ptr<float>(), num_tokens, dc, a.kv_a_norm.data(), latent_eps);
  backend_.copy_rows(latent.ptr<float>(), row, compressed_kv.ptr<float>(), dc, num_tokens, dc);
  // absorbed: [T, H, R] = [W_UK[h]^T q_nope | q_pe] per head.
  const Buffer absorbed = activations(num_tokens * heads * row);
  backend_.per_head_linear(a.key_absorb.as<const float>(), static_cast<int>(heads), dc, dn, q.ptr<float>(), q_head,
                           num_tokens, absorbed.ptr<float>(), row);
  backend_.copy_rows(absorbed.ptr<float>() + dc, row, q.ptr<float>() + dn, q_head, num_tokens * heads, dr);
  backend_.rope(rope_, absorbed.ptr<float>(), num_tokens, static_cast<int>(heads), batch.positions_for_ops());
  backend_.rope(rope_, latent.ptr<float>(), num_tokens, 1, batch.positions_for_ops());
  // The latent row is both the key and the value (only its first dc values matter as a value).
  const Buffer attended = activations(num_tokens * heads * row);  // [T, H, R]
  if (c.dsa.enabled()) {
    sparse_attention(layer, batch, attention, h.ptr<float>(), compressed.ptr<float>(), absorbed.ptr<float>(),
                     latent.ptr<float>(), attended.ptr<float>());
  } else {
    attention.attend(backend_, layer, layer_variants_[static_cast<size_t>(layer)], absorbed.ptr<float>(),
                     latent.ptr<float>(), latent.ptr<float>(), num_tokens, attended.ptr<float>());
  }
  const Buffer values = activations(num_tokens * heads * dv);  // [T, H, dv]
  backend_.per_head_linear(a.value_up.as<const float>(), static_cast<int>(heads), dv, dc, attended.ptr<float>(), row,
                           num_tokens, values.ptr<float>(), dv);
  add_projection(a.o.weight, bias_or_null(a.o), values.ptr<float>(), num_tokens, x);
}

// A Gated DeltaNet layer (docs/gated-deltanet.md): the four input projections of the normed
// input, the token mixer over each sequence's rows with the state the context carries for it,
// the output projection into the residual stream.
void TransformerForward::linear_attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention,
                                                DevicePtr<float> x) const {
  const ModelConfig& c = config_;
  const LinearAttentionDims& m = c.linear_attention;
  const LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const LinearAttentionWeights& w = l.linear_attention;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t nv = m.num_value_heads, width = nv * m.value_head_dim;
  const Buffer h = normed_copy(x, num_tokens, l.input_norm);  // [T, D]
  const Buffer u = activations(num_tokens * m.conv_channels());  // [T, C]
  const Buffer z = activations(num_tokens * width);              // [T, NV, DV]
  const Buffer a = activations(num_tokens * nv), b = activations(num_tokens * nv);
  const backend::Backend::LinearOfX projections[] = {{&w.qkv.weight, nullptr, u.ptr<float>()},
                                                     {&w.z.weight, nullptr, z.ptr<float>()},
                                                     {&w.b.weight, nullptr, b.ptr<float>()},
                                                     {&w.a.weight, nullptr, a.ptr<float>()}};
  backend_.linears_of(h.ptr<float>(), num_tokens, projections);
  const attention::GatedDeltaParams params{w.conv.data(), w.a_log.data(), w.dt_bias.data(), w.norm.data(),
                                           c.rms_norm_eps};
  const std::vector<backend::Backend::RecurrentSequence> sequences = attention.recurrent_sequences(backend_, layer, num_tokens);
  const Buffer mixed = activations(num_tokens * width);  // [T, NV, DV]
  backend_.gated_delta_net(m.shape(), params, u.ptr<float>(), z.ptr<float>(), a.ptr<float>(), b.ptr<float>(),
                           sequences, mixed.ptr<float>());
  add_projection(w.out.weight, nullptr, mixed.ptr<float>(), num_tokens, x);
}

// DeepSeek Sparse Attention (docs/sparse-attention.md): the lightning indexer of `layer` (none
// on GLM-5.2's shared layers, which take the last indexer's selection)
// (qI = wq_b qr and kI = LayerNorm(wk h), both [rope (dr) | rest] with the indexer's RoPE;
// head weights weights_proj h, times NI^-1/2 in the selection), then the absorbed attention
// over the selected positions. h: [T, D] normed input; qr: [T, q_lora]; absorbed: [T, H, R];
// latent: [T, R] (RoPE'd); out: [T, H, R]. The cache row is [latent | kI].
void TransformerForward::sparse_attention(int layer, const ForwardBatch& batch, AttentionContext& attention,
                                          DevicePtr<const float> h, DevicePtr<const float> qr,
                                          DevicePtr<const float> absorbed, DevicePtr<const float> latent,
                                          DevicePtr<float> out) const {
  const ModelConfig& c = config_;
  const SparseAttentionDims& s = c.dsa;
  const int64_t num_tokens = static_cast<int64_t>(batch.tokens.size());
  const int64_t row = c.head_dim;
  attention::SparseIndexQuery index;
  index.top_k = s.index_topk;
  if (!s.has_indexer(layer)) {  // GLM-5.2 shared layer: the last indexer's selection, rows [c | k_pe]
    attention.attend_sparse(backend_, layer, layer_variants_[static_cast<size_t>(layer)], absorbed, latent,
                            static_cast<int>(row), index, num_tokens, out);
    return;
  }
  const IndexerWeights& ix = weights_.layers[static_cast<size_t>(layer)].attention.indexer;
  const int64_t ni = s.index_n_heads, di = s.index_head_dim;
  const Buffer index_q = activations(num_tokens * ni * di);  // [T, NI, DI]
  backend_.linear(ix.wq_b.weight, qr, num_tokens, nullptr, index_q.ptr<float>());
  const Buffer index_k = activations(num_tokens * di);       // [T, DI]
  const Buffer index_w = activations(num_tokens * ni);       // [T, NI]
  const backend::Backend::LinearOfX from_h[] = {{&ix.wk.weight, nullptr, index_k.ptr<float>()},
                                                {&ix.weights_proj.weight, nullptr, index_w.ptr<float>()}};
  backend_.linears_of(h, num_tokens, from_h);
  backend_.layer_norm(index_k.ptr<float>(), num_tokens, di, ix.k_norm_weight.data(), ix.k_norm_bias.data(),
                      s.key_norm_eps);
  backend_.rope(*index_rope_, index_q.ptr<float>(), num_tokens, static_cast<int>(ni), batch.positions_for_ops());
  backend_.rope(*index_rope_, index_k.ptr<float>(), num_tokens, 1, batch.positions_for_ops());
  const Buffer rows = activations(num_tokens * (row + di));  // [T, R + DI] = [c | k_pe | kI]
  backend_.copy_rows(rows.ptr<float>(), row + di, latent, row, num_tokens, row);
  backend_.copy_rows(rows.ptr<float>() + row, row + di, index_k.ptr<float>(), di, num_tokens, di);
  index.queries = index_q.data<float>();
  index.weights = index_w.data<float>();
  index.device = index_q.view().device;
  index.num_heads = static_cast<int>(ni);
  index.head_dim = static_cast<int>(di);
  index.weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ni)));
  index.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)));
  attention.attend_sparse(backend_, layer, layer_variants_[static_cast<size_t>(layer)], absorbed,
                          rows.ptr<float>(), static_cast<int>(row), index, num_tokens, out);
}

void TransformerForward::ffn_block(int layer, int64_t num_tokens, DevicePtr<float> x) const {
  const ModelConfig& c = config_;
  const LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const int64_t dim = c.hidden_size;
  const Buffer h = normed_copy(x, num_tokens, l.post_attention_norm);  // [T, D]
  const Buffer out = activations(num_tokens * dim);
  if (l.is_moe) {
    moe_ffn(layer, l.moe, h.ptr<float>(), num_tokens, out.ptr<float>());
  } else {
    backend_.swiglu_ffn(h.ptr<float>(), num_tokens, l.dense_mlp.gate.weight, l.dense_mlp.up.weight,
                        l.dense_mlp.down.weight, out.ptr<float>());
  }
  backend_.add(x, out.ptr<float>(), num_tokens * dim);
}

std::function<backend::Backend::ExpertWeights(int)> routed_expert_weights(const MoeWeights& moe) {
  return [&moe](int expert) {
    const GatedMlp& mlp = moe.experts[static_cast<size_t>(expert)];
    auto bias = [](const Linear& linear) { return linear.bias.empty() ? nullptr : linear.bias.data(); };
    return backend::Backend::ExpertWeights{&mlp.gate.weight, &mlp.up.weight, &mlp.down.weight, bias(mlp.gate),
                                           bias(mlp.up),     bias(mlp.down),  moe.expert_activation};
  };
}

// Grouped by expert, then each token's contributions summed in ascending expert id
// (backend::routed_experts_on; the ids may be device memory).
void LocalRoutedExperts::run(backend::Backend& backend, int /*layer*/, const MoeWeights& moe, DevicePtr<const float> h,
                             int64_t num_tokens, DevicePtr<const int32_t> expert_ids,
                             DevicePtr<const float> gate_weights, DevicePtr<float> out,
                             const std::function<void()>& overlapped) {
  overlapped();  // nothing is in flight here
  backend::routed_experts_on(backend, h, num_tokens, config_.hidden_size, expert_ids, gate_weights, config_.top_k(),
                             config_.num_experts(), routed_expert_weights(moe), out);
}

// out[t] = sum over t's selected experts in ascending expert id of w * expert(h[t]),
// then + the (gated) shared expert. The fixed order is what lets expert-parallel runs
// reproduce this bit for bit.
void TransformerForward::moe_ffn(int layer, const MoeWeights& moe, DevicePtr<const float> h, int64_t num_tokens,
                                 DevicePtr<float> out) const {
  const ModelConfig& c = config_;
  const int64_t dim = c.hidden_size;
  const int num_experts = c.num_experts();
  const int top_k = c.top_k();
  const Buffer router_logits = activations(num_tokens * num_experts);  // [T, E]
  backend_.linear(quant::LinearWeight::from_dense(moe.router), h, num_tokens,
                  moe.router_bias.empty() ? nullptr : moe.router_bias.data(), router_logits.ptr<float>());
  // The routing [T, K]: on the backend's device when the routed experts take it there (the
  // backend may plan their layout there, and a step graph must), else on the host for the
  // expert-parallel dispatch plan.
  const bool on_device = routed_experts_->routes_on_device();
  const int64_t num_entries = num_tokens * top_k;
  std::vector<int32_t> host_ids(on_device ? 0 : static_cast<size_t>(num_entries));
  std::vector<float> host_weights(host_ids.size());
  Buffer device_ids, device_weights;
  if (on_device) {
    device_ids = backend_.allocate(DType::kI32, {num_entries});
    device_weights = activations(num_entries);
  }
  const DevicePtr<int32_t> expert_ids = on_device ? device_ids.ptr<int32_t>() : DevicePtr<int32_t>(host_ids);
  const DevicePtr<float> gate_weights = on_device ? device_weights.ptr<float>() : DevicePtr<float>(host_weights);
  // Selection bias: the model's correction bias plus the balancer's, if any.
  const float* bias = moe.correction_bias.empty() ? nullptr : moe.correction_bias.data();
  std::vector<float> combined_bias;
  if (selection_bias_ != nullptr && static_cast<size_t>(layer) < selection_bias_->size() &&
      !(*selection_bias_)[static_cast<size_t>(layer)].empty()) {
    combined_bias = (*selection_bias_)[static_cast<size_t>(layer)];
    MOERT_CHECK(static_cast<int>(combined_bias.size()) == num_experts,
                "selection bias of layer " << layer << " has " << combined_bias.size() << " entries, expected "
                                           << num_experts);
    if (bias != nullptr) {
      for (int e = 0; e < num_experts; ++e) combined_bias[static_cast<size_t>(e)] += bias[e];
    }
    bias = combined_bias.data();
  }
  backend::route_on(backend_, c.router, router_logits.ptr<float>(), num_tokens, bias, expert_ids, gate_weights);

  // The shared expert (and its gate) runs while the routed experts' dispatch is in flight.
  Buffer shared, gate_logits;
  const bool gated = moe.shared_expert_gate.data != nullptr;
  auto shared_expert = [&] {
    if (!moe.shared_expert.has_value()) return;
    shared = activations(num_tokens * dim);
    backend_.swiglu_ffn(h, num_tokens, moe.shared_expert->gate.weight, moe.shared_expert->up.weight,
                        moe.shared_expert->down.weight, shared.ptr<float>());
    if (gated) {
      gate_logits = activations(num_tokens);
      backend_.linear(quant::LinearWeight::from_dense(moe.shared_expert_gate), h, num_tokens, nullptr,
                      gate_logits.ptr<float>());
    }
  };
  routed_experts_->run(backend_, layer, moe, h, num_tokens, expert_ids, gate_weights, out, shared_expert);
  if (moe.shared_expert.has_value()) {
    backend_.gated_add(out, shared.ptr<float>(), gated ? gate_logits.ptr<float>() : DevicePtr<float>(), num_tokens,
                       dim);
  }
}

}  // namespace moert
