#include "runtime/engine/model_runner.h"

#include "core/check.h"
#include "runtime/model/kv_cache_groups.h"

namespace moert::engine {
namespace {

// Attention over the paged cache for one step's batch (rows grouped by sequence): each
// layer writes its K/V into the slots, then attends through the plan under the layer's
// variant.
class PagedAttentionContext : public AttentionContext {
 public:
  PagedAttentionContext(const std::vector<attention::PagedKvLayer>& layers, const attention::PagedAttentionPlan& plan,
                        const std::vector<int64_t>& slots, int num_heads)
      : layers_(layers), plan_(plan), slots_(slots), num_heads_(num_heads) {}

  void attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant, const float* q,
              const float* k, const float* v, int64_t num_tokens, float* out) override {
    const attention::PagedKvLayer& kv = layers_[static_cast<size_t>(layer)];
    backend.write_kv(kv, k, v, slots_.data(), num_tokens);
    attention::PagedAttentionPlan plan = plan_;
    plan.variant = variant;
    backend.paged_attention(q, kv, plan, num_heads_, out);
  }

 private:
  const std::vector<attention::PagedKvLayer>& layers_;
  const attention::PagedAttentionPlan& plan_;
  const std::vector<int64_t>& slots_;
  int num_heads_;
};

}  // namespace

std::vector<int32_t> chunk_block_table(const attention::KvCacheManager& kv, attention::SeqId seq, int64_t end) {
  const std::vector<attention::BlockId>& table = kv.block_table(seq);
  const int64_t needed = (end + kv.block_size() - 1) / kv.block_size();
  MOERT_CHECK(static_cast<int64_t>(table.size()) >= needed,
              "sequence " << seq << " has " << table.size() << " blocks, needs " << needed);
  return std::vector<int32_t>(table.begin(), table.begin() + needed);
}

Result<std::unique_ptr<PagedModelRunner>> PagedModelRunner::create(const TransformerForward& model,
                                                                   const KvCacheConfig& kv) {
  if (kv.num_blocks < 2 || kv.block_size < 1) {
    return invalid_argument("KV cache of " + std::to_string(kv.num_blocks) + " blocks x " +
                            std::to_string(kv.block_size) + " tokens: needs >= 2 blocks (one is the null block) of >= 1");
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<attention::KvCacheSpec> groups, moert::kv_cache_groups(model.config(), kv.dtype));
  for (const attention::KvCacheSpec& group : groups) {
    if (group.kind == attention::KvCacheKind::kLatent) {
      return unsupported(std::string("the paged runner cannot store a ") + attention::kv_cache_kind_name(group.kind) +
                         " cache yet");
    }
  }
  return std::unique_ptr<PagedModelRunner>(new PagedModelRunner(model, std::move(groups), kv));
}

PagedModelRunner::PagedModelRunner(const TransformerForward& model, std::vector<attention::KvCacheSpec> groups,
                                   const KvCacheConfig& kv)
    : model_(model), groups_(std::move(groups)), kv_(kv), layers_(static_cast<size_t>(model.config().num_layers)) {
  backend::Backend& backend = model.backend();
  for (const attention::KvCacheSpec& group : groups_) {
    const Shape shape{kv.num_blocks, kv.block_size, group.num_kv_heads, group.head_dim};
    for (int layer : group.layers) {
      LayerStorage& storage = layers_[static_cast<size_t>(layer)];
      storage.keys = backend.allocate(group.dtype, shape);
      storage.values = backend.allocate(group.dtype, shape);
      attention::PagedKvLayer& view = storage.view;
      view = {storage.keys.view().data, storage.values.view().data, kv.num_blocks, kv.block_size,
              group.num_kv_heads, group.head_dim, group.dtype};
      if (group.dtype == DType::kF8E4M3) {
        storage.key_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        storage.value_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        view.k_scales = storage.key_scales.data<float>();
        view.v_scales = storage.value_scales.data<float>();
      }
    }
  }
}

Result<std::vector<float>> PagedModelRunner::run(const RunnerBatch& batch) {
  backend::Backend& backend = model_.backend();
  if (!batch.block_copies.empty()) {
    std::vector<int32_t> src, dst;
    for (const attention::BlockCopy& copy : batch.block_copies) {
      src.push_back(copy.src);
      dst.push_back(copy.dst);
    }
    for (const LayerStorage& layer : layers_) {
      backend.copy_kv_blocks(layer.view, src.data(), dst.data(), static_cast<int64_t>(src.size()));
    }
  }
  ForwardBatch forward;
  std::vector<int64_t> slots;
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, page_indices, last_page_len;
  const int block_size = kv_.block_size;
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t size = static_cast<int64_t>(chunk.tokens.size());
    MOERT_CHECK(size >= 1 && chunk.num_logit_rows >= 0 && chunk.num_logit_rows <= size,
                "chunk at position " << chunk.start << ": " << size << " tokens, " << chunk.num_logit_rows
                                     << " logit rows");
    const int64_t kv_len = chunk.start + size;
    const int64_t num_pages = (kv_len + block_size - 1) / block_size;
    MOERT_CHECK(static_cast<int64_t>(chunk.block_table.size()) >= num_pages,
                "chunk ending at position " << kv_len << " has " << chunk.block_table.size() << " blocks, needs "
                                            << num_pages);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t position = chunk.start + i;
      forward.tokens.push_back(chunk.tokens[static_cast<size_t>(i)]);
      forward.positions.push_back(position);
      slots.push_back(static_cast<int64_t>(chunk.block_table[static_cast<size_t>(position / block_size)]) * block_size +
                      position % block_size);
      if (i >= size - chunk.num_logit_rows) forward.logit_rows.push_back(static_cast<int64_t>(forward.tokens.size()) - 1);
    }
    page_indices.insert(page_indices.end(), chunk.block_table.begin(), chunk.block_table.begin() + num_pages);
    page_indptr.push_back(static_cast<int32_t>(page_indices.size()));
    last_page_len.push_back(static_cast<int32_t>(kv_len - (num_pages - 1) * block_size));
    qo_indptr.push_back(static_cast<int32_t>(forward.tokens.size()));
  }
  attention::PagedAttentionPlan plan;
  plan.num_seqs = static_cast<int>(batch.chunks.size());
  plan.qo_indptr = qo_indptr.data();
  plan.kv_page_indptr = page_indptr.data();
  plan.kv_page_indices = page_indices.data();
  plan.kv_last_page_len = last_page_len.data();
  std::vector<attention::PagedKvLayer> views;
  for (const LayerStorage& layer : layers_) views.push_back(layer.view);
  PagedAttentionContext context(views, plan, slots, model_.config().num_heads);
  return model_.forward(forward, context);
}

Result<int64_t> kv_cache_bytes_per_block(const ModelConfig& model, int block_size, DType dtype) {
  MOERT_ASSIGN_OR_RETURN(std::vector<attention::KvCacheSpec> groups, kv_cache_groups(model, dtype));
  return attention::kv_cache_bytes_per_block(groups, block_size);
}

Result<int64_t> kv_cache_bytes_per_token(const ModelConfig& model, DType dtype) {
  MOERT_ASSIGN_OR_RETURN(std::vector<attention::KvCacheSpec> groups, kv_cache_groups(model, dtype));
  return attention::kv_cache_bytes_per_token(groups);
}

}  // namespace moert::engine
