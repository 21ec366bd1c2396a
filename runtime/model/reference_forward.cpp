#include "runtime/model/reference_forward.h"

#include <algorithm>

#include "core/check.h"

namespace moert {

DenseKvCache::DenseKvCache(const ModelConfig& config)
    : config_(config),
      keys_(static_cast<size_t>(config.num_layers + config.num_mtp_layers)),
      values_(keys_.size()),
      sparse_rows_(keys_.size()) {}

// The new rows sit at positions length_ .. length_ + T - 1 of this one sequence.
void DenseKvCache::attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                          DevicePtr<const float> q, DevicePtr<const float> k, DevicePtr<const float> v,
                          int64_t num_tokens, DevicePtr<float> out) {
  const ModelConfig& c = config_;
  const int64_t kv_width = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  std::vector<float>& keys = keys_[static_cast<size_t>(layer)];
  std::vector<float>& values = values_[static_cast<size_t>(layer)];
  // k and v are on the backend's device; the history stays in host memory (this is the
  // simple reference path).
  const size_t old_size = keys.size();
  const int64_t new_floats = num_tokens * kv_width;
  keys.resize(old_size + static_cast<size_t>(new_floats));
  values.resize(keys.size());
  backend.copy_bytes(host_ptr(keys.data() + old_size), k, new_floats * static_cast<int64_t>(sizeof(float)));
  backend.copy_bytes(host_ptr(values.data() + old_size), v, new_floats * static_cast<int64_t>(sizeof(float)));
  backend.contiguous_attention(q, num_tokens, keys, values, length_, c.num_heads, c.num_kv_heads,
                               c.head_dim, variant, out);
}

std::vector<backend::Backend::RecurrentSequence> DenseKvCache::recurrent_sequences(backend::Backend& backend, int layer,
                                                                                   int64_t num_tokens) {
  const attention::GatedDeltaShape shape = config_.linear_attention.shape();
  const size_t index = static_cast<size_t>(layer);
  if (conv_states_.size() <= index) {
    conv_states_.resize(index + 1);
    recurrent_states_.resize(index + 1);
  }
  Buffer& conv = conv_states_[index];
  Buffer& state = recurrent_states_[index];
  if (conv.view().data == nullptr) {  // a fresh sequence: zero states
    conv = backend.allocate(DType::kF32, {std::max<int64_t>(shape.conv_state_size(), 1)});
    state = backend.allocate(DType::kF32, {shape.recurrent_state_size()});
    const std::vector<float> zeros(static_cast<size_t>(std::max(conv.view().numel(), state.view().numel())), 0.0f);
    backend.copy_bytes(conv.ptr<void>(), zeros, conv.view().numel() * static_cast<int64_t>(sizeof(float)));
    backend.copy_bytes(state.ptr<void>(), zeros, state.view().numel() * static_cast<int64_t>(sizeof(float)));
  }
  return {{0, num_tokens, conv.ptr<float>(), state.ptr<float>(), nullptr, nullptr, {}}};
}

void DenseKvCache::attend_sparse(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                                 DevicePtr<const float> q, DevicePtr<const float> rows, int key_width,
                                 const attention::SparseIndexQuery& index, int64_t num_tokens, DevicePtr<float> out) {
  const int64_t width = key_width + index.head_dim;
  std::vector<float>& stored = sparse_rows_[static_cast<size_t>(layer)];
  if (stored.empty()) stored.assign(static_cast<size_t>(width), 0.0f);  // the pad row
  MOERT_CHECK(static_cast<int64_t>(stored.size()) == (1 + length_) * width,
              "layer " << layer << " holds " << stored.size() / width - 1 << " positions, expected " << length_);
  const size_t old_size = stored.size();
  stored.resize(old_size + static_cast<size_t>(num_tokens * width));
  backend.copy_bytes(host_ptr(stored.data() + old_size), rows, num_tokens * width * static_cast<int64_t>(sizeof(float)));
  // One position per block: block 1 + p holds position p (block 0 is the pad row).
  const int64_t kv_len = length_ + num_tokens;
  attention::PagedKvLayer view{stored.data(), stored.data(), static_cast<int>(kv_len + 1), 1, 1,
                               static_cast<int>(width), DType::kF32};
  std::vector<int32_t> qo_indptr{0, static_cast<int32_t>(num_tokens)}, page_indptr{0, static_cast<int32_t>(kv_len)};
  std::vector<int32_t> pages(static_cast<size_t>(kv_len)), last_page_len{1};
  for (int64_t p = 0; p < kv_len; ++p) pages[static_cast<size_t>(p)] = static_cast<int32_t>(p + 1);
  attention::PagedAttentionPlan plan;
  plan.num_seqs = 1;
  plan.qo_indptr = qo_indptr.data();
  plan.kv_page_indptr = page_indptr.data();
  plan.kv_page_indices = pages.data();
  plan.kv_last_page_len = last_page_len.data();
  plan.variant = variant;
  // A layer without an indexer (GLM-5.2 "shared") reuses the last indexer's selection of these rows.
  if (index.num_heads > 0) {
    selected_.assign(static_cast<size_t>(num_tokens * index.top_k), -1);
    backend.sparse_index_select(index, view, key_width, plan, selected_);
  }
  MOERT_CHECK(static_cast<int64_t>(selected_.size()) == num_tokens * index.top_k,
              "layer " << layer << " shares an indexer selection that no earlier layer of this step made");
  backend.sparse_paged_attention(q, view, key_width, plan, config_.num_heads, selected_, index.top_k, out);
}

void DenseKvCache::truncate(int64_t length) {
  MOERT_CHECK(length >= 0 && length <= length_, "truncate to " << length << " of a cache of " << length_);
  MOERT_CHECK(length == length_ || !config_.linear_attention.enabled(),
              "truncate to " << length << " of " << length_ << " positions: a linear-attention state cannot go back");
  const size_t floats = static_cast<size_t>(length * config_.num_kv_heads * config_.head_dim);
  for (std::vector<float>& keys : keys_) keys.resize(std::min(keys.size(), floats));
  for (std::vector<float>& values : values_) values.resize(std::min(values.size(), floats));
  for (std::vector<float>& rows : sparse_rows_) {
    if (rows.empty()) continue;
    const size_t width = rows.size() / static_cast<size_t>(1 + length_);
    rows.resize(static_cast<size_t>(1 + length) * width);
  }
  length_ = length;
}

ReferenceForward::ReferenceForward(const ModelConfig& config, const ModelWeights& weights, backend::Backend& backend)
    : transformer_(config, weights, backend) {}

Result<std::vector<float>> ReferenceForward::forward(DenseKvCache& cache, const std::vector<int32_t>& tokens) const {
  ForwardBatch batch;
  batch.tokens = tokens;
  for (size_t t = 0; t < tokens.size(); ++t) {
    batch.positions.push_back(cache.length() + static_cast<int64_t>(t));
    batch.logit_rows.push_back(static_cast<int64_t>(t));
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<float> logits, transformer_.forward(batch, cache));
  cache.advance(static_cast<int64_t>(tokens.size()));
  return logits;
}

Result<GreedyOutput> greedy_generate(const ReferenceForward& model, const std::vector<int32_t>& prompt,
                                     int num_generate) {
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (num_generate < 0) return invalid_argument("number of tokens to generate = " + std::to_string(num_generate) + " must be >= 0");
  const int64_t vocab = model.config().vocab_size;
  GreedyOutput output;
  DenseKvCache cache = model.new_cache();
  MOERT_ASSIGN_OR_RETURN(output.prompt_logits, model.forward(cache, prompt));
  std::vector<float> last(output.prompt_logits.end() - vocab, output.prompt_logits.end());
  for (int j = 0; j < num_generate; ++j) {
    const int32_t token = argmax_lowest_index(last.data(), vocab);
    output.gen_tokens.push_back(token);
    output.gen_logits.insert(output.gen_logits.end(), last.begin(), last.end());
    if (j + 1 == num_generate) break;
    MOERT_ASSIGN_OR_RETURN(last, model.forward(cache, {token}));
  }
  return output;
}

Result<std::vector<float>> mtp_teacher_forced_logits(const ReferenceForward& model,
                                                     const std::vector<int32_t>& sequence) {
  const TransformerForward& forward = model.transformer();
  if (forward.num_mtp_modules() == 0) return invalid_argument("the model was loaded without its MTP layer");
  if (sequence.size() < 2) return invalid_argument("MTP logits need at least 2 tokens, got " + std::to_string(sequence.size()));
  const int64_t n = static_cast<int64_t>(sequence.size());
  ForwardBatch batch;
  batch.tokens = sequence;
  for (int64_t t = 0; t < n; ++t) batch.positions.push_back(t);
  batch.logit_rows = {n - 1};
  DenseKvCache cache = model.new_cache();
  std::vector<float> hidden;  // [n, D] g
  MOERT_ASSIGN_OR_RETURN(std::vector<float> unused, forward.forward_with_hidden(batch, cache, &hidden));
  (void)unused;
  // Rows 0..n-2: (g_i, t_{i+1}) at position i, causal over the MTP rows only (its own cache).
  ForwardBatch rows;
  rows.tokens.assign(sequence.begin() + 1, sequence.end());
  for (int64_t i = 0; i + 1 < n; ++i) {
    rows.positions.push_back(i);
    rows.logit_rows.push_back(i);
  }
  DenseKvCache mtp_cache = model.new_cache();
  return forward.mtp_forward(0, rows, hidden, mtp_cache, nullptr);
}

}  // namespace moert
