// The transformer forward for any batch of tokens, written once for one rank: embedding,
// per layer (RMSNorm, q/k/v, qk-norm, RoPE, attention, o-proj, residual, RMSNorm, dense or
// MoE FFN with shared experts, residual), final norm and the LM head for the rows that
// need logits. Where K/V live is the AttentionContext's business (a contiguous history
// for the reference, paged blocks for the engine), so both paths share every other line.
// Shapes: T tokens in the step, D hidden, V vocab, H/KVH heads, Dh head_dim, E experts, K top-k.
//
// Invariant (batch invariance): every row's result depends only on that token and its own
// sequence's K/V history, never on the other rows: linear kernels are row-invariant, the
// MoE sum runs in ascending expert id, and attention contexts must keep the same property.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/rope.h"
#include "runtime/backend/backend.h"
#include "core/status.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

namespace moert {

class AttentionContext {
 public:
  virtual ~AttentionContext() = default;
  // Stores this step's k/v of `layer` (already RoPE'd), then computes causal attention of
  // the step's queries over each row's sequence history including the new rows.
  // q: [T, H, Dh]; k, v: [T, KVH, Dh]; out: [T, H, Dh].
  // Computes through `backend` (the model's), under the layer's `variant` (window, sinks,
  // scale, soft-cap: the model's knowledge of the layer).
  virtual void attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                      DevicePtr<const float> q, DevicePtr<const float> k, DevicePtr<const float> v,
                      int64_t num_tokens, DevicePtr<float> out) = 0;
  // Linear-attention layers (docs/gated-deltanet.md): each sequence's rows of the step, in row
  // order and covering every row, with the state of `layer` it carries from step to step
  // (on the backend's device). A context that keeps no recurrent state refuses (checked).
  virtual std::vector<backend::Backend::RecurrentSequence> recurrent_sequences(backend::Backend& backend, int layer,
                                                                      int64_t num_tokens);
  // DeepSeek Sparse Attention (docs/sparse-attention.md): stores this step's rows of `layer`
  // (rows: [T, key_width + DI] = [c | k_pe | kI], RoPE'd), selects for each query row the
  // positions of highest index score over its sequence's history including the new rows
  // (Backend::sparse_index_select), and attends over those only (sparse_paged_attention).
  // q, out: [T, H, key_width]. A layer without an indexer (GLM-5.2 "shared"; index.num_heads
  // and index.head_dim 0, rows [T, key_width]) attends over the selection the context kept
  // from the last layer of this step that had one. Contexts without sparse attention fail
  // (the default).
  virtual void attend_sparse(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                             DevicePtr<const float> q, DevicePtr<const float> rows, int key_width,
                             const attention::SparseIndexQuery& index, int64_t num_tokens, DevicePtr<float> out);
};

// Runs the routed experts of one MoE layer for this rank's tokens:
// out[t] = sum over t's K selected experts, in ascending expert id, of w * expert(h[t]),
// starting from +0. The single-rank version computes every expert here; the
// expert-parallel one (runtime/parallel) moves rows to the ranks owning the experts.
// Every rank calls run() for every MoE layer of every step, also with T = 0.
class RoutedExperts {
 public:
  virtual ~RoutedExperts() = default;
  // h: [T, D]; expert_ids, weights: [T, K]; out: [T, D] (overwritten).
  // `overlapped` is work that does not depend on `out` (the shared experts): run() calls
  // it exactly once, on this thread, while its exchange is in flight where it has one.
  // Compute goes through `backend` (the model's).
  virtual void run(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h,
                   int64_t num_tokens, DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights,
                   DevicePtr<float> out, const std::function<void()>& overlapped) = 0;
  // Whether run() takes expert_ids and weights in the backend's device memory and issues
  // device work only (no host reads, nothing kept on the host per step): then the routing
  // stays on the device and a step graph may record the layer. Otherwise they are host data.
  virtual bool routes_on_device() const { return false; }
};

// The routed experts' weights of `moe` for Backend::grouped_expert_ffn (moe must outlive it).
std::function<backend::Backend::ExpertWeights(int)> routed_expert_weights(const MoeWeights& moe);

// All experts on this rank (the default).
class LocalRoutedExperts : public RoutedExperts {
 public:
  explicit LocalRoutedExperts(const ModelConfig& config) : config_(config) {}
  void run(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h, int64_t num_tokens,
           DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, DevicePtr<float> out,
           const std::function<void()>& overlapped) override;
  bool routes_on_device() const override { return true; }

 private:
  const ModelConfig& config_;
};

struct ForwardBatch {
  std::vector<int32_t> tokens;       // [T]
  std::vector<int64_t> positions;    // [T] absolute position of each token in its sequence
  std::vector<int64_t> logit_rows;   // rows (indices into tokens) whose logits are returned, ascending
  // A step graph's copies of tokens and positions in the backend's device memory (what its
  // ops read; the vectors above still hold the same values for the checks); null otherwise.
  // Positions on the device need Backend::prepare_device_positions (prepare_step_graphs).
  DevicePtr<const int32_t> device_tokens;
  DevicePtr<const int64_t> device_positions;

  DevicePtr<const int32_t> tokens_for_ops() const {
    return device_tokens != nullptr ? device_tokens : DevicePtr<const int32_t>(tokens);
  }
  DevicePtr<const int64_t> positions_for_ops() const {
    return device_positions != nullptr ? device_positions : DevicePtr<const int64_t>(positions);
  }
};

class TransformerForward {
 public:
  // Computes on `backend`, which has laid the weights out (Backend::prepare_weights) where it
  // needs its own layout. config, weights and backend must outlive this object.
  TransformerForward(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend);
  // Routes the MoE layers' experts through `experts` (must outlive this object); the
  // default computes them all locally.
  void set_routed_experts(RoutedExperts* experts) { routed_experts_ = experts; }
  // Load balancing: bias[layer] ([E], or empty) is added to the router's selection score
  // (on top of a model's own correction bias), never to the gate weights (docs/moe.md
  // §2.1). `bias` must outlive this object; null (the default) means no balancing bias.
  void set_selection_bias(const std::vector<std::vector<float>>* bias) { selection_bias_ = bias; }

  // Logits of batch.logit_rows, [logit_rows.size(), V]. Token ids must be in [0, V) and
  // positions below max_position_embeddings (errors name the offending index).
  Result<std::vector<float>> forward(const ForwardBatch& batch, AttentionContext& attention) const;
  // The same forward, with logit row r drawn on the backend under rows[r] instead of being
  // returned (Backend::sample_rows): one token per logit row. rows.size() == logit_rows.size().
  Result<std::vector<int32_t>> forward_and_sample(const ForwardBatch& batch, AttentionContext& attention,
                                                  std::span<const backend::Backend::RowSampling> rows) const;

  // DeepSeek multi-token prediction (docs/mtp.md). forward() that also returns, in
  // `final_hidden` ([T, D] host), every row's residual stream after the last layer normalised
  // by model.norm (g, what an MTP module reads). The logits are the same bits as forward()'s.
  Result<std::vector<float>> forward_with_hidden(const ForwardBatch& batch, AttentionContext& attention,
                                                 std::vector<float>* final_hidden) const;
  // MTP module `module` (ModelWeights::mtp, decoder block layer num_layers + module, whose K/V
  // `attention` holds) over T rows: row i takes the token batch.tokens[i] (the one after the
  // hidden state's), at batch.positions[i], and hidden[i] ([T, D] host, a g row or a chained
  // draft's block output). Returns the logits of batch.logit_rows, [R, V]; `block_out`
  // (may be null) receives the block's output y ([T, D], before shared_head.norm).
  Result<std::vector<float>> mtp_forward(int module, const ForwardBatch& batch, DevicePtr<const float> hidden,
                                         AttentionContext& attention, std::vector<float>* block_out) const;
  int num_mtp_modules() const { return static_cast<int>(weights_.mtp.size()); }

  // The checks every forward makes first: token ids in [0, V), positions below
  // max_position_embeddings, logit rows inside the batch (errors name the offending index).
  Status validate(const ForwardBatch& batch) const;
  // The same forward writing the logits into `logits` ([logit_rows.size(), V], the backend's
  // device memory), so that it can run inside Backend::capture (nothing is returned to the
  // host and every buffer it allocates is released before it returns).
  Status forward_into(const ForwardBatch& batch, AttentionContext& attention, DevicePtr<float> logits) const;

  // Step graphs (docs/cuda-backend.md, Step graphs). Why this model's steps cannot be
  // recorded whatever the batch (empty: they can): the routed experts need the routing on
  // the host (expert parallelism over several ranks plans its dispatch there), a balancing
  // bias changes between steps.
  std::string step_graph_blocker() const;
  // Lets the backend take the steps' positions from device memory (call before capturing).
  void prepare_step_graphs() const;

  const ModelConfig& config() const { return config_; }
  backend::Backend& backend() const { return backend_; }

 private:
  // x: [T, D] residual stream on the backend's device, updated in place.
  void attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention, DevicePtr<float> x) const;
  void latent_attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention,
                              DevicePtr<float> x) const;
  void linear_attention_block(int layer, const ForwardBatch& batch, AttentionContext& attention,
                              DevicePtr<float> x) const;
  void sparse_attention(int layer, const ForwardBatch& batch, AttentionContext& attention, DevicePtr<const float> h,
                        DevicePtr<const float> qr, DevicePtr<const float> absorbed, DevicePtr<const float> latent,
                        DevicePtr<float> out) const;
  void ffn_block(int layer, int64_t num_tokens, DevicePtr<float> x) const;
  // The logits of batch.logit_rows on the backend's device, [logit_rows.size(), V];
  // final_hidden (device [T, D], may be null) receives g (forward_with_hidden).
  Result<Buffer> device_logits(const ForwardBatch& batch, AttentionContext& attention,
                               DevicePtr<float> final_hidden = nullptr) const;
  // The logits of batch.logit_rows from x ([T, D] device, unnormalised; left unchanged
  // unless every row is a logit row): head(RMSNorm(x[rows], norm)).
  Buffer head_logits(const ForwardBatch& batch, DevicePtr<float> x, const std::vector<float>& norm,
                     const quant::LinearWeight& head) const;
  // One decoder layer on the residual stream x ([T, D] device, updated in place).
  void decoder_layer(int layer, const ForwardBatch& batch, AttentionContext& attention, DevicePtr<float> x) const;
  // Scratch F32 storage of `count` values allocated by the backend.
  Buffer activations(int64_t count) const;
  // RMSNorm(x) with `norm` into new storage, x ([R, D]) unchanged: a block's normed input.
  Buffer normed_copy(DevicePtr<const float> x, int64_t num_rows, const std::vector<float>& norm) const;
  // x [R, D] += in . W^T (+ bias): a block's output projection into the residual stream.
  void add_projection(const quant::LinearWeight& weight, const float* bias, DevicePtr<const float> in,
                      int64_t num_rows, DevicePtr<float> x) const;
  void moe_ffn(int layer, const MoeWeights& moe, DevicePtr<const float> h, int64_t num_tokens,
               DevicePtr<float> out) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  backend::Backend& backend_;
  attention::RotaryEmbedding rope_;
  // The lightning indexer's RoPE (DSA only): the MLA frequencies on the first dr channels of
  // each DI-wide indexer head, with the model's indexer pairing (docs/sparse-attention.md).
  std::optional<attention::RotaryEmbedding> index_rope_;
  std::vector<attention::AttentionVariant> layer_variants_;  // [num_layers + MTP modules], from the layer specs
  LocalRoutedExperts local_experts_;
  RoutedExperts* routed_experts_ = &local_experts_;
  const std::vector<std::vector<float>>* selection_bias_ = nullptr;
};

// The reference ops (runtime/backend/reference_ops.h), for the reference forward and eval.
// x: [T, D] normalised in place: x * rsqrt(mean(x^2) + eps) * weight (sum of squares in float64).
void rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps);

// Index of the largest value; the lowest index wins ties.
int32_t argmax_lowest_index(const float* values, int64_t count);

}  // namespace moert
