#include "runtime/engine/paged_forward.h"

#include "core/check.h"

namespace moert::engine {
namespace {

// Attention over the paged cache for one step's batch (rows grouped by sequence).
class PagedAttentionContext : public AttentionContext {
 public:
  PagedAttentionContext(const PagedKvStorage& storage, const attention::PagedAttentionPlan& plan,
                        const std::vector<int64_t>& slots, int num_heads)
      : storage_(storage), plan_(plan), slots_(slots), num_heads_(num_heads) {}

  void attend(backend::Backend& backend, int layer, const float* q, const float* k, const float* v,
              int64_t num_tokens, float* out) override {
    const attention::PagedKvLayer kv = storage_.layer(layer);
    backend.write_kv(kv, k, v, slots_.data(), num_tokens);
    backend.paged_attention(q, kv, plan_, num_heads_, out);
  }

 private:
  const PagedKvStorage& storage_;
  const attention::PagedAttentionPlan& plan_;
  const std::vector<int64_t>& slots_;
  int num_heads_;
};

}  // namespace

PagedKvStorage::PagedKvStorage(const ModelConfig& config, int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), num_kv_heads_(config.num_kv_heads), head_dim_(config.head_dim) {
  const size_t per_layer = static_cast<size_t>(num_blocks) * block_size * num_kv_heads_ * head_dim_;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    keys_.emplace_back(new float[per_layer]);
    values_.emplace_back(new float[per_layer]);
  }
}

attention::PagedKvLayer PagedKvStorage::layer(int index) const {
  return {keys_[static_cast<size_t>(index)].get(), values_[static_cast<size_t>(index)].get(), num_blocks_, block_size_,
          num_kv_heads_, head_dim_};
}

int64_t PagedKvStorage::bytes_per_block(const ModelConfig& config, int block_size) {
  return 2LL * config.num_layers * block_size * config.num_kv_heads * config.head_dim * static_cast<int64_t>(sizeof(float));
}

void apply_block_copies(backend::Backend& backend, const PagedKvStorage& storage,
                        const std::vector<attention::BlockCopy>& copies) {
  if (copies.empty()) return;
  std::vector<int32_t> src, dst;
  for (const attention::BlockCopy& copy : copies) {
    src.push_back(copy.src);
    dst.push_back(copy.dst);
  }
  for (int layer = 0; layer < storage.num_layers(); ++layer) {
    backend.copy_kv_blocks(storage.layer(layer), src.data(), dst.data(), static_cast<int64_t>(copies.size()));
  }
}

Result<std::vector<float>> paged_forward(const TransformerForward& model, const PagedKvStorage& storage,
                                         const attention::KvCacheManager& kv, const std::vector<PagedChunk>& chunks) {
  ForwardBatch batch;
  std::vector<int64_t> slots;
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, page_indices, last_page_len;
  const int block_size = kv.block_size();
  for (const PagedChunk& chunk : chunks) {
    const int64_t size = static_cast<int64_t>(chunk.tokens.size());
    MOERT_CHECK(size >= 1 && chunk.num_logit_rows >= 0 && chunk.num_logit_rows <= size,
                "chunk of sequence " << chunk.seq << ": " << size << " tokens, " << chunk.num_logit_rows
                                     << " logit rows");
    const std::vector<attention::BlockId>& table = kv.block_table(chunk.seq);
    for (int64_t i = 0; i < size; ++i) {
      batch.tokens.push_back(chunk.tokens[static_cast<size_t>(i)]);
      batch.positions.push_back(chunk.start + i);
      slots.push_back(kv.slot(chunk.seq, chunk.start + i));
      if (i >= size - chunk.num_logit_rows) batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
    }
    const int64_t kv_len = chunk.start + size;
    const int64_t num_pages = (kv_len + block_size - 1) / block_size;
    MOERT_CHECK(static_cast<int64_t>(table.size()) >= num_pages,
                "sequence " << chunk.seq << " has " << table.size() << " blocks, needs " << num_pages);
    page_indices.insert(page_indices.end(), table.begin(), table.begin() + num_pages);
    page_indptr.push_back(static_cast<int32_t>(page_indices.size()));
    last_page_len.push_back(static_cast<int32_t>(kv_len - (num_pages - 1) * block_size));
    qo_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
  }
  attention::PagedAttentionPlan plan;
  plan.num_seqs = static_cast<int>(chunks.size());
  plan.qo_indptr = qo_indptr.data();
  plan.kv_page_indptr = page_indptr.data();
  plan.kv_page_indices = page_indices.data();
  plan.kv_last_page_len = last_page_len.data();
  PagedAttentionContext context(storage, plan, slots, model.config().num_heads);
  return model.forward(batch, context);
}

}  // namespace moert::engine
