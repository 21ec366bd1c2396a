// The single-rank reference forward: the transformer (runtime/model/transformer.h) over
// one sequence with a contiguous K/V history. Simple and exact; every engine path is
// tested against it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/transformer.h"

namespace moert {

// K/V of one sequence for every layer; row p holds position p. Linear-attention layers keep
// their recurrent state instead (allocated on the backend at first use, zero at the start).
class DenseKvCache : public AttentionContext {
 public:
  DenseKvCache(const ModelConfig& config);
  void attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
              DevicePtr<const float> q, DevicePtr<const float> k, DevicePtr<const float> v, int64_t num_tokens,
              DevicePtr<float> out) override;
  // The step's rows are this one sequence's new positions.
  std::vector<backend::Backend::RecurrentSequence> recurrent_sequences(backend::Backend& backend, int layer,
                                                                      int64_t num_tokens) override;
  // DSA layers keep their rows [c | k_pe | kI] in `sparse_rows_` and attend through the
  // backend's sparse ops over a one-position-per-block view of them (docs/sparse-attention.md).
  void attend_sparse(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                     DevicePtr<const float> q, DevicePtr<const float> rows, int key_width,
                     const attention::SparseIndexQuery& index, int64_t num_tokens, DevicePtr<float> out) override;
  // Positions already written; advanced by ReferenceForward::forward after all layers ran.
  int64_t length() const { return length_; }
  void advance(int64_t num_tokens) { length_ += num_tokens; }
  // Drops positions >= length of every layer (a speculative rollback); length <= length().
  // A model with linear-attention layers cannot go back (its state has no positions): only
  // length == length() is accepted (checked).
  void truncate(int64_t length);

 private:
  const ModelConfig& config_;
  std::vector<std::vector<float>> keys_;    // [layers][L * KVH * Dh]
  std::vector<std::vector<float>> values_;  // [layers][L * KVH * Dh]
  // Per linear-attention layer: conv state [W-1, C] and recurrent state [NV, DK, DV] (empty
  // Buffers until first used).
  std::vector<Buffer> conv_states_, recurrent_states_;
  // DSA layers: [layers][(1 + L) * W], row 0 a zero pad (block 0 of the view, never read),
  // position p in row 1 + p; W = the layer's row width. Empty for other layers.
  std::vector<std::vector<float>> sparse_rows_;
  std::vector<int32_t> selected_;  // [T, index_topk]: the last indexer's selection (this step's rows)
  int64_t length_ = 0;
};

class ReferenceForward {
 public:
  // Computes on `backend` (must outlive this object).
  ReferenceForward(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend);

  DenseKvCache new_cache() const { return DenseKvCache(transformer_.config()); }

  // Runs `tokens` at positions cache.length() .. + T - 1, appends their K/V and returns the
  // logits of every new position, [T, V] row-major.
  Result<std::vector<float>> forward(DenseKvCache& cache, const std::vector<int32_t>& tokens) const;

  const ModelConfig& config() const { return transformer_.config(); }
  const TransformerForward& transformer() const { return transformer_; }

 private:
  TransformerForward transformer_;
};

struct GreedyOutput {
  std::vector<int32_t> gen_tokens;   // [n_gen]
  std::vector<float> prompt_logits;  // [n_prompt, V]: row i = logits after prompt token i
  std::vector<float> gen_logits;     // [n_gen, V]: row j = logits from which gen_tokens[j] was picked
};

// Scores the prompt and generates `num_generate` greedy tokens (no stop tokens).
Result<GreedyOutput> greedy_generate(const ReferenceForward& model, const std::vector<int32_t>& prompt,
                                     int num_generate);

// The teacher-forced logits of MTP module 0 over `sequence` (n >= 2 tokens, e.g. prompt +
// generated; docs/mtp.md): row i < n - 1 predicts token i + 2 from the main model's g_i and
// token i + 1, at position i; [n - 1, V]. Needs a model loaded with its MTP (LoadOptions::mtp).
Result<std::vector<float>> mtp_teacher_forced_logits(const ReferenceForward& model,
                                                     const std::vector<int32_t>& sequence);

}  // namespace moert
