#include "runtime/engine/model_runner.h"

#include "core/check.h"
#include "runtime/model/kv_cache_groups.h"

namespace moert::engine {
namespace {

// Attention over the paged cache for one step's batch (rows grouped by sequence): each
// layer writes its K/V into the slots, then attends through the plan under the layer's
// variant.
// One group's share of a step: the slots its layers write and the plan they attend through.
struct GroupStep {
  std::vector<int64_t> slots;
  std::vector<int32_t> page_indptr{0}, page_indices, last_page_len;
  attention::PagedAttentionPlan plan;
};

class PagedAttentionContext : public AttentionContext {
 public:
  PagedAttentionContext(const std::vector<attention::PagedKvLayer>& layers, const std::vector<int>& layer_group,
                        const std::vector<GroupStep>& groups, int num_heads)
      : layers_(layers), layer_group_(layer_group), groups_(groups), num_heads_(num_heads) {}

  void attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant, const float* q,
              const float* k, const float* v, int64_t num_tokens, float* out) override {
    const attention::PagedKvLayer& kv = layers_[static_cast<size_t>(layer)];
    const GroupStep& group = groups_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
    backend.write_kv(kv, k, v, group.slots.data(), num_tokens);
    attention::PagedAttentionPlan plan = group.plan;
    plan.variant = variant;
    backend.paged_attention(q, kv, plan, num_heads_, out);
  }

 private:
  const std::vector<attention::PagedKvLayer>& layers_;
  const std::vector<int>& layer_group_;
  const std::vector<GroupStep>& groups_;
  int num_heads_;
};

}  // namespace

std::vector<std::vector<int32_t>> chunk_block_tables(const attention::KvCacheManager& kv, attention::SeqId seq,
                                                     int64_t end) {
  const int64_t needed = (end + kv.block_size() - 1) / kv.block_size();
  std::vector<std::vector<int32_t>> tables;
  for (int g = 0; g < kv.num_groups(); ++g) {
    const std::vector<attention::BlockId>& table = kv.block_table(seq, g);
    MOERT_CHECK(static_cast<int64_t>(table.size()) >= needed,
                "sequence " << seq << " has " << table.size() << " blocks, needs " << needed);
    tables.emplace_back(table.begin(), table.begin() + needed);
  }
  return tables;
}

std::vector<attention::KvGroupLayout> kv_group_layouts(const std::vector<attention::KvCacheSpec>& groups) {
  std::vector<attention::KvGroupLayout> layouts;
  for (const attention::KvCacheSpec& group : groups) layouts.push_back({group.sliding_window});
  return layouts;
}

std::vector<attention::KvGroupLayout> kv_group_layouts(const ModelConfig& model) {
  Result<std::vector<attention::KvCacheSpec>> groups = moert::kv_cache_groups(model, DType::kF32);
  MOERT_CHECK(groups.is_ok(), "" << groups.status().to_string());
  return kv_group_layouts(*groups);
}

Result<std::unique_ptr<PagedModelRunner>> PagedModelRunner::create(const TransformerForward& model,
                                                                   const KvCacheConfig& kv) {
  if (kv.num_blocks < 2 || kv.block_size < 1) {
    return invalid_argument("KV cache of " + std::to_string(kv.num_blocks) + " blocks x " +
                            std::to_string(kv.block_size) + " tokens: needs >= 2 blocks (one is the null block) of >= 1");
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<attention::KvCacheSpec> groups, moert::kv_cache_groups(model.config(), kv.dtype));
  for (const attention::KvCacheSpec& group : groups) {
    if (group.kind == attention::KvCacheKind::kLatent && (group.num_kv_heads != 1 || group.head_dim != group.latent_width)) {
      return invalid_argument("latent KV cache rows of " + std::to_string(group.latent_width) + " values must be one kv "
                              "head of that width (got " + std::to_string(group.num_kv_heads) + " x " +
                              std::to_string(group.head_dim) + ")");
    }
  }
  return std::unique_ptr<PagedModelRunner>(new PagedModelRunner(model, std::move(groups), kv));
}

PagedModelRunner::PagedModelRunner(const TransformerForward& model, std::vector<attention::KvCacheSpec> groups,
                                   const KvCacheConfig& kv)
    : model_(model),
      groups_(std::move(groups)),
      kv_(kv),
      layer_slot_(static_cast<size_t>(model.config().num_layers), -1),
      layer_group_(static_cast<size_t>(model.config().num_layers), -1) {
  backend::Backend& backend = model.backend();
  const bool shared = attention::kv_groups_share_storage(groups_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const attention::KvCacheSpec& group = groups_[g];
    const Shape shape{kv.num_blocks, kv.block_size, group.num_kv_heads, group.head_dim};
    for (size_t j = 0; j < group.layers.size(); ++j) {
      const int layer = group.layers[j];
      layer_group_[static_cast<size_t>(layer)] = static_cast<int>(g);
      if (shared && g > 0) {  // slot j already exists
        layer_slot_[static_cast<size_t>(layer)] = static_cast<int>(j);
        continue;
      }
      layer_slot_[static_cast<size_t>(layer)] = static_cast<int>(storage_.size());
      LayerStorage& storage = storage_.emplace_back();
      // A latent row is key and value at once: one storage, aliased (attention/paged_kv.h).
      const bool latent = group.kind == attention::KvCacheKind::kLatent;
      storage.keys = backend.allocate(group.dtype, shape);
      if (!latent) storage.values = backend.allocate(group.dtype, shape);
      const Buffer& values = latent ? storage.keys : storage.values;
      attention::PagedKvLayer& view = storage.view;
      view = {storage.keys.view().data, values.view().data, kv.num_blocks, kv.block_size,
              group.num_kv_heads, group.head_dim, group.dtype};
      if (group.dtype == DType::kF8E4M3) {
        storage.key_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        if (!latent) storage.value_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        view.k_scales = storage.key_scales.data<float>();
        view.v_scales = (latent ? storage.key_scales : storage.value_scales).data<float>();
      }
    }
  }
}

template <typename Forward>
auto PagedModelRunner::run_step(const RunnerBatch& batch, Forward&& run_forward) {
  backend::Backend& backend = model_.backend();
  const size_t num_groups = groups_.size();
  std::vector<attention::PagedKvLayer> views;  // [num_layers]
  for (int slot : layer_slot_) views.push_back(storage_[static_cast<size_t>(slot)].view);
  for (const attention::BlockCopy& copy : batch.block_copies) {
    MOERT_CHECK(copy.group >= 0 && static_cast<size_t>(copy.group) < num_groups, "block copy of group " << copy.group);
    for (int layer : groups_[static_cast<size_t>(copy.group)].layers) {
      backend.copy_kv_blocks(views[static_cast<size_t>(layer)], &copy.src, &copy.dst, 1);
    }
  }
  ForwardBatch forward;
  std::vector<int32_t> qo_indptr{0};
  std::vector<GroupStep> steps(num_groups);
  const int block_size = kv_.block_size;
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t size = static_cast<int64_t>(chunk.tokens.size());
    MOERT_CHECK(size >= 1 && chunk.num_logit_rows >= 0 && chunk.num_logit_rows <= size,
                "chunk at position " << chunk.start << ": " << size << " tokens, " << chunk.num_logit_rows
                                     << " logit rows");
    MOERT_CHECK(chunk.block_tables.size() == num_groups,
                "chunk has " << chunk.block_tables.size() << " block tables for " << num_groups << " cache groups");
    const int64_t kv_len = chunk.start + size;
    const int64_t num_pages = (kv_len + block_size - 1) / block_size;
    for (int64_t i = 0; i < size; ++i) {
      forward.tokens.push_back(chunk.tokens[static_cast<size_t>(i)]);
      forward.positions.push_back(chunk.start + i);
      if (i >= size - chunk.num_logit_rows) forward.logit_rows.push_back(static_cast<int64_t>(forward.tokens.size()) - 1);
    }
    qo_indptr.push_back(static_cast<int32_t>(forward.tokens.size()));
    for (size_t g = 0; g < num_groups; ++g) {
      const std::vector<int32_t>& table = chunk.block_tables[g];
      MOERT_CHECK(static_cast<int64_t>(table.size()) >= num_pages,
                  "chunk ending at position " << kv_len << " has " << table.size() << " blocks in group " << g
                                              << ", needs " << num_pages);
      GroupStep& step = steps[g];
      for (int64_t i = 0; i < size; ++i) {
        const int64_t position = chunk.start + i;
        step.slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(position / block_size)]) * block_size +
                             position % block_size);
      }
      step.page_indices.insert(step.page_indices.end(), table.begin(), table.begin() + num_pages);
      step.page_indptr.push_back(static_cast<int32_t>(step.page_indices.size()));
      step.last_page_len.push_back(static_cast<int32_t>(kv_len - (num_pages - 1) * block_size));
    }
  }
  for (GroupStep& step : steps) {
    step.plan.num_seqs = static_cast<int>(batch.chunks.size());
    step.plan.qo_indptr = qo_indptr.data();
    step.plan.kv_page_indptr = step.page_indptr.data();
    step.plan.kv_page_indices = step.page_indices.data();
    step.plan.kv_last_page_len = step.last_page_len.data();
  }
  PagedAttentionContext context(views, layer_group_, steps, model_.config().num_heads);
  return run_forward(forward, context);
}

Result<std::vector<float>> PagedModelRunner::run(const RunnerBatch& batch) {
  return run_step(batch, [&](const ForwardBatch& forward, AttentionContext& attention) {
    return model_.forward(forward, attention);
  });
}

Result<std::vector<int32_t>> PagedModelRunner::run_and_sample(const RunnerBatch& batch,
                                                              std::span<const backend::Backend::RowSampling> rows) {
  return run_step(batch, [&](const ForwardBatch& forward, AttentionContext& attention) {
    return model_.forward_and_sample(forward, attention, rows);
  });
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
