#include "runtime/runner/model_runner.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "runtime/model/kv_cache_groups.h"

namespace moert::runner {
namespace {

// Attention over the paged cache for one step's batch (rows grouped by sequence): each
// layer writes its K/V into the slots, then attends through the plan under the layer's
// variant.
// One group's share of a step: the slots its layers write and the plan they attend through.
// In a step graph the plan's arrays and the slots are device copies (device_slots set).
struct GroupStep {
  std::vector<int64_t> slots;
  std::vector<int32_t> page_indptr{0}, page_indices, last_page_len;
  attention::PagedAttentionPlan plan;
  DevicePtr<const int64_t> device_slots;  // a step graph's copy of slots

  DevicePtr<const int64_t> slots_for_ops() const {
    return device_slots != nullptr ? device_slots : DevicePtr<const int64_t>(slots);
  }
};

// Linear-attention layers read their sequences' state slots instead (recurrent[layer], empty
// for the other layers).
class PagedAttentionContext : public AttentionContext {
 public:
  using Recurrent = std::vector<std::vector<backend::Backend::RecurrentSequence>>;
  PagedAttentionContext(const std::vector<attention::PagedKvLayer>& layers, const std::vector<int>& layer_group,
                        const std::vector<GroupStep>& groups, int num_heads, const Recurrent* recurrent = nullptr)
      : layers_(layers), layer_group_(layer_group), groups_(groups), num_heads_(num_heads), recurrent_(recurrent) {}

  std::vector<backend::Backend::RecurrentSequence> recurrent_sequences(backend::Backend& /*backend*/, int layer,
                                                                      int64_t num_tokens) override {
    MOERT_CHECK(recurrent_ != nullptr && static_cast<size_t>(layer) < recurrent_->size(),
                "layer " << layer << " is linear attention but the step has no recurrent state for it");
    const std::vector<backend::Backend::RecurrentSequence>& sequences = (*recurrent_)[static_cast<size_t>(layer)];
    int64_t rows = 0;
    for (const backend::Backend::RecurrentSequence& sequence : sequences) rows += sequence.num_rows;
    MOERT_CHECK(rows == num_tokens, "recurrent state for " << rows << " rows of a step of " << num_tokens);
    return sequences;
  }

  void attend(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
              DevicePtr<const float> q, DevicePtr<const float> k, DevicePtr<const float> v, int64_t num_tokens,
              DevicePtr<float> out) override {
    const attention::PagedKvLayer& kv = layers_[static_cast<size_t>(layer)];
    const GroupStep& group = groups_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
    backend.write_kv(kv, k, v, group.slots_for_ops(), num_tokens);
    attention::PagedAttentionPlan plan = group.plan;
    plan.variant = variant;
    backend.paged_attention(q, kv, plan, num_heads_, out);
  }

  // DSA (docs/sparse-attention.md): the rows [c | k_pe | kI] fill the latent layer's slots;
  // the selection and the attention read them through the step's causal plan.
  void attend_sparse(backend::Backend& backend, int layer, const attention::AttentionVariant& variant,
                     DevicePtr<const float> q, DevicePtr<const float> rows, int key_width,
                     const attention::SparseIndexQuery& index, int64_t num_tokens, DevicePtr<float> out) override {
    const attention::PagedKvLayer& kv = layers_[static_cast<size_t>(layer)];
    const GroupStep& group = groups_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
    MOERT_CHECK(kv.head_dim == key_width + index.head_dim,
                "layer " << layer << ": cache rows of " << kv.head_dim << " values, expected " << key_width << " + "
                         << index.head_dim);
    backend.write_kv(kv, rows, rows, group.slots_for_ops(), num_tokens);
    attention::PagedAttentionPlan plan = group.plan;
    plan.variant = variant;
    // The selection is per query row of the step (positions, not slots), so a later layer
    // without an indexer (GLM-5.2 "shared") reads it through its own group's pages.
    if (num_tokens == 0) return;  // a rank's empty step (expert parallelism): nothing to select
    if (index.num_heads > 0) {
      selected_ = backend.allocate(DType::kI32, {std::max<int64_t>(1, num_tokens * index.top_k)});
      backend.sparse_index_select(index, kv, key_width, plan, selected_.ptr<int32_t>());
    }
    MOERT_CHECK(selected_.view().data != nullptr && selected_.view().numel() >= num_tokens * index.top_k,
                "layer " << layer << " shares an indexer selection that no earlier layer of this step made");
    backend.sparse_paged_attention(q, kv, key_width, plan, num_heads_, selected_.ptr<int32_t>(), index.top_k, out);
  }

 private:
  const std::vector<attention::PagedKvLayer>& layers_;
  const std::vector<int>& layer_group_;
  const std::vector<GroupStep>& groups_;
  int num_heads_;
  const Recurrent* recurrent_;
  Buffer selected_;  // [T, index_topk]: the last indexer's selection of this step (DSA)
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

RecurrentStateLayout recurrent_state_layout(const ModelConfig& model) {
  RecurrentStateLayout layout;
  for (int layer = 0; layer < static_cast<int>(model.layer_is_linear_attention.size()); ++layer) {
    if (model.layer_is_linear_attention[static_cast<size_t>(layer)]) layout.layers.push_back(layer);
  }
  const attention::GatedDeltaShape shape = model.linear_attention.shape();
  if (!layout.layers.empty()) {
    layout.conv_values = shape.conv_state_size();
    layout.recurrent_values = shape.recurrent_state_size();
  }
  return layout;
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
  if (!recurrent_state_layout(model.config()).layers.empty() && kv.num_state_slots < 1) {
    return invalid_argument("the model has linear-attention layers: the runner needs recurrent-state slots (got " +
                            std::to_string(kv.num_state_slots) + ")");
  }
  return std::unique_ptr<PagedModelRunner>(new PagedModelRunner(model, std::move(groups), kv));
}

PagedModelRunner::PagedModelRunner(const TransformerForward& model, std::vector<attention::KvCacheSpec> groups,
                                   const KvCacheConfig& kv)
    : model_(model),
      groups_(std::move(groups)),
      kv_(kv),
      layer_slot_(static_cast<size_t>(model.config().num_layers), -1),
      layer_group_(static_cast<size_t>(model.config().num_layers), -1),
      state_layout_(recurrent_state_layout(model.config())) {
  backend::Backend& backend = model.backend();
  for (size_t i = 0; i < state_layout_.layers.size(); ++i) {
    StateStorage& storage = states_.emplace_back();
    storage.conv = backend.allocate(DType::kF32, {kv.num_state_slots, std::max<int64_t>(state_layout_.conv_values, 1)});
    storage.recurrent = backend.allocate(DType::kF32, {kv.num_state_slots, state_layout_.recurrent_values});
  }
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
      view.device = storage.keys.view().device;
      if (group.dtype == DType::kF8E4M3) {
        storage.key_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        if (!latent) storage.value_scales = backend.allocate(DType::kF32, {kv.num_blocks, group.num_kv_heads});
        view.k_scales = storage.key_scales.data<float>();
        view.v_scales = (latent ? storage.key_scales : storage.value_scales).data<float>();
      }
    }
  }
}

struct PagedModelRunner::StepPlan {
  ForwardBatch forward;
  std::vector<int32_t> qo_indptr{0};
  std::vector<GroupStep> groups;
  bool decode_only = true;  // one token per sequence, each with its logits
};

PagedModelRunner::~PagedModelRunner() = default;

std::vector<attention::PagedKvLayer> PagedModelRunner::layer_views() const {
  std::vector<attention::PagedKvLayer> views;  // [num_layers]; empty for layers without K/V (linear attention)
  for (int slot : layer_slot_) views.push_back(slot >= 0 ? storage_[static_cast<size_t>(slot)].view : attention::PagedKvLayer{});
  return views;
}

void PagedModelRunner::apply_block_copies(const RunnerBatch& batch) {
  backend::Backend& backend = model_.backend();
  const std::vector<attention::PagedKvLayer> views = layer_views();
  for (const attention::BlockCopy& copy : batch.block_copies) {
    MOERT_CHECK(copy.group >= 0 && static_cast<size_t>(copy.group) < groups_.size(), "block copy of group " << copy.group);
    for (int layer : groups_[static_cast<size_t>(copy.group)].layers) {
      backend.copy_kv_blocks(views[static_cast<size_t>(layer)], &copy.src, &copy.dst, 1);
    }
  }
}

PagedModelRunner::StepPlan PagedModelRunner::plan_step(const RunnerBatch& batch) const {
  const size_t num_groups = groups_.size();
  StepPlan step;
  ForwardBatch& forward = step.forward;
  std::vector<int32_t>& qo_indptr = step.qo_indptr;
  std::vector<GroupStep>& steps = step.groups;
  steps.resize(num_groups);
  const int block_size = kv_.block_size;
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t size = static_cast<int64_t>(chunk.tokens.size());
    MOERT_CHECK(size >= 1 && chunk.num_logit_rows >= 0 && chunk.num_logit_rows <= size,
                "chunk at position " << chunk.start << ": " << size << " tokens, " << chunk.num_logit_rows
                                     << " logit rows");
    MOERT_CHECK(chunk.block_tables.size() == num_groups,
                "chunk has " << chunk.block_tables.size() << " block tables for " << num_groups << " cache groups");
    step.decode_only = step.decode_only && size == 1 && chunk.num_logit_rows == 1;
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
      GroupStep& group = steps[g];
      for (int64_t i = 0; i < size; ++i) {
        const int64_t position = chunk.start + i;
        group.slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(position / block_size)]) * block_size +
                              position % block_size);
      }
      group.page_indices.insert(group.page_indices.end(), table.begin(), table.begin() + num_pages);
      group.page_indptr.push_back(static_cast<int32_t>(group.page_indices.size()));
      group.last_page_len.push_back(static_cast<int32_t>(kv_len - (num_pages - 1) * block_size));
    }
  }
  step.decode_only = step.decode_only && !batch.chunks.empty();
  for (GroupStep& group : steps) {
    group.plan.num_seqs = static_cast<int>(batch.chunks.size());
    group.plan.qo_indptr = qo_indptr.data();
    group.plan.kv_page_indptr = group.page_indptr.data();
    group.plan.kv_page_indices = group.page_indices.data();
    group.plan.kv_last_page_len = group.last_page_len.data();
  }
  return step;
}

template <typename T, typename Eager, typename FromDeviceLogits>
Result<T> PagedModelRunner::run_step(const RunnerBatch& batch, Eager&& eager, FromDeviceLogits&& from_device_logits) {
  apply_block_copies(batch);
  apply_state_work(batch);
  StepPlan step = plan_step(batch);
  if (step_graph_max_batch_ > 0 && batch.final_hidden == nullptr) {
    MOERT_ASSIGN_OR_RETURN(const DevicePtr<const float> logits, replay_decode_graph(step));
    if (logits != nullptr) return from_device_logits(logits, static_cast<int64_t>(step.forward.logit_rows.size()));
  }
  const std::vector<attention::PagedKvLayer> views = layer_views();
  const StepRecurrent recurrent = plan_recurrent(batch);
  PagedAttentionContext context(views, layer_group_, step.groups, model_.config().num_heads, &recurrent.layers);
  return eager(step.forward, context);
}

// Rollbacks from the last run's candidates, then the pool's zero fills and copies, over every
// linear-attention layer. The candidates are valid until the next run plans new ones.
void PagedModelRunner::apply_state_work(const RunnerBatch& batch) {
  if (states_.empty()) {
    MOERT_CHECK(batch.state_rollbacks.empty() && batch.state_ops.empty(), "recurrent-state work for a model without any");
    return;
  }
  backend::Backend& backend = model_.backend();
  const int64_t conv = state_layout_.conv_values, recurrent = state_layout_.recurrent_values;
  const int64_t f32 = static_cast<int64_t>(sizeof(float));
  auto check_slot = [&](int32_t slot) {
    MOERT_CHECK(slot >= 0 && slot < kv_.num_state_slots, "recurrent-state slot " << slot << " of " << kv_.num_state_slots);
  };
  for (const StateRollback& rollback : batch.state_rollbacks) {
    check_slot(rollback.slot);
    const auto first = candidate_rows_.find(rollback.slot);
    MOERT_CHECK(first != candidate_rows_.end(), "rollback of slot " << rollback.slot << " that kept no candidates");
    const int64_t row = first->second + rollback.row;
    for (StateStorage& storage : states_) {
      backend.copy_bytes(storage.conv.ptr<float>() + rollback.slot * conv, storage.conv_candidates.ptr<float>() + row * conv,
                         conv * f32);
      backend.copy_bytes(storage.recurrent.ptr<float>() + rollback.slot * recurrent,
                         storage.recurrent_candidates.ptr<float>() + row * recurrent, recurrent * f32);
    }
  }
  const std::vector<float> zeros(static_cast<size_t>(std::max(conv, recurrent)), 0.0f);
  for (const attention::SlotOp& op : batch.state_ops) {
    check_slot(op.dst);
    if (op.src != attention::kNoSlot) check_slot(op.src);
    for (StateStorage& storage : states_) {
      const DevicePtr<float> conv_dst = storage.conv.ptr<float>() + op.dst * conv;
      const DevicePtr<float> recurrent_dst = storage.recurrent.ptr<float>() + op.dst * recurrent;
      if (op.src == attention::kNoSlot) {
        backend.copy_bytes(conv_dst, zeros, conv * f32);
        backend.copy_bytes(recurrent_dst, zeros, recurrent * f32);
      } else {
        backend.copy_bytes(conv_dst, storage.conv.ptr<float>() + op.src * conv, conv * f32);
        backend.copy_bytes(recurrent_dst, storage.recurrent.ptr<float>() + op.src * recurrent, recurrent * f32);
      }
    }
  }
}

PagedModelRunner::StepRecurrent PagedModelRunner::plan_recurrent(const RunnerBatch& batch) {
  StepRecurrent recurrent;
  recurrent.layers.resize(static_cast<size_t>(model_.config().num_layers));
  candidate_rows_.clear();
  if (states_.empty()) return recurrent;
  int64_t candidates = 0;
  for (const SequenceChunk& chunk : batch.chunks) {
    MOERT_CHECK(chunk.state_slot >= 0 && chunk.state_slot < kv_.num_state_slots,
                "chunk at position " << chunk.start << " has recurrent-state slot " << chunk.state_slot << " of "
                                     << kv_.num_state_slots);
    if (chunk.keep_state_candidates) {
      MOERT_CHECK(candidate_rows_.emplace(chunk.state_slot, candidates).second,
                  "two chunks keep candidates of slot " << chunk.state_slot);
      candidates += static_cast<int64_t>(chunk.tokens.size());
    }
    int64_t previous = -1;
    for (const SequenceChunk::StateSnapshot& snapshot : chunk.state_snapshots) {
      MOERT_CHECK(snapshot.row > previous && snapshot.row < static_cast<int64_t>(chunk.tokens.size()) &&
                      snapshot.slot >= 0 && snapshot.slot < kv_.num_state_slots && snapshot.slot != chunk.state_slot,
                  "state snapshot of row " << snapshot.row << " into slot " << snapshot.slot << " of a chunk of "
                                           << chunk.tokens.size() << " rows");
      previous = snapshot.row;
    }
  }
  recurrent.copies.reserve(states_.size() * batch.chunks.size());
  backend::Backend& backend = model_.backend();
  const int64_t conv = state_layout_.conv_values, values = state_layout_.recurrent_values;
  for (size_t i = 0; i < states_.size(); ++i) {
    StateStorage& storage = states_[i];
    if (candidates > 0) {
      storage.conv_candidates = backend.allocate(DType::kF32, {std::max<int64_t>(candidates * conv, 1)});
      storage.recurrent_candidates = backend.allocate(DType::kF32, {candidates * values});
    }
    std::vector<backend::Backend::RecurrentSequence>& sequences =
        recurrent.layers[static_cast<size_t>(state_layout_.layers[i])];
    int64_t row = 0;
    for (const SequenceChunk& chunk : batch.chunks) {
      backend::Backend::RecurrentSequence sequence;
      sequence.first_row = row;
      sequence.num_rows = static_cast<int64_t>(chunk.tokens.size());
      sequence.conv_state = storage.conv.ptr<float>() + chunk.state_slot * conv;
      sequence.recurrent_state = storage.recurrent.ptr<float>() + chunk.state_slot * values;
      if (chunk.keep_state_candidates) {
        const int64_t first = candidate_rows_.at(chunk.state_slot);
        sequence.conv_states_after = storage.conv_candidates.ptr<float>() + first * conv;
        sequence.recurrent_states_after = storage.recurrent_candidates.ptr<float>() + first * values;
      }
      std::vector<attention::StateCopy>& copies = recurrent.copies.emplace_back();
      for (const SequenceChunk::StateSnapshot& snapshot : chunk.state_snapshots) {
        copies.push_back({snapshot.row, storage.conv.data<float>() + snapshot.slot * conv,
                          storage.recurrent.data<float>() + snapshot.slot * values});
      }
      sequence.copies_after = copies;
      sequences.push_back(sequence);
      row += sequence.num_rows;
    }
  }
  return recurrent;
}

// ---- Step graphs ---------------------------------------------------------------------------
// One decode batch size's graph and the device buffers it reads and writes. Every array of a
// step lives at a fixed offset of `inputs` (copied there in one transfer before each replay),
// with room for the longest sequence (max_position_embeddings).
struct PagedModelRunner::DecodeGraph {
  struct GroupOffsets {
    size_t slots = 0, page_indptr = 0, last_page_len = 0, page_indices = 0;
  };
  int batch = 0;
  int64_t max_pages = 0;  // per sequence
  bool warmed_up = false, failed = false;
  size_t tokens = 0, positions = 0, qo_indptr = 0, bytes = 0;
  std::vector<GroupOffsets> groups;
  std::vector<uint8_t> host;  // the packed inputs, [bytes]
  Buffer inputs;              // the device copy
  Buffer logits;              // [B, V]
  std::unique_ptr<backend::Backend::StepGraph> graph;

  DecodeGraph(int batch_size, int64_t pages_per_sequence, size_t num_groups)
      : batch(batch_size), max_pages(pages_per_sequence), groups(num_groups) {
    const auto b = static_cast<size_t>(batch_size);
    auto take = [this](size_t count, size_t element) {
      bytes = (bytes + 7) / 8 * 8;
      const size_t offset = bytes;
      bytes += count * element;
      return offset;
    };
    tokens = take(b, sizeof(int32_t));
    positions = take(b, sizeof(int64_t));
    qo_indptr = take(b + 1, sizeof(int32_t));
    for (GroupOffsets& g : groups) {
      g.slots = take(b, sizeof(int64_t));
      g.page_indptr = take(b + 1, sizeof(int32_t));
      g.last_page_len = take(b, sizeof(int32_t));
      g.page_indices = take(b * static_cast<size_t>(pages_per_sequence), sizeof(int32_t));
    }
    host.assign(bytes, 0);
  }
  template <typename T>
  void pack(size_t offset, const std::vector<T>& values) {
    std::memcpy(host.data() + offset, values.data(), values.size() * sizeof(T));
  }
  template <typename T>
  DevicePtr<T> device(size_t offset) const {
    return {reinterpret_cast<T*>(inputs.data<uint8_t>() + offset), inputs.view().device};
  }
  // The step on the device arrays: what the recorded ops read.
  void bind(StepPlan& step) const {
    step.forward.device_tokens = device<int32_t>(tokens);
    step.forward.device_positions = device<int64_t>(positions);
    for (size_t g = 0; g < groups.size(); ++g) {
      GroupStep& group = step.groups[g];
      group.device_slots = device<int64_t>(groups[g].slots);
      group.plan.qo_indptr = device<int32_t>(qo_indptr).get();
      group.plan.kv_page_indptr = device<int32_t>(groups[g].page_indptr).get();
      group.plan.kv_last_page_len = device<int32_t>(groups[g].last_page_len).get();
      group.plan.kv_page_indices = device<int32_t>(groups[g].page_indices).get();
      group.plan.device = inputs.view().device;
      group.plan.num_rows_when_on_device = batch;
    }
  }
};

Result<DevicePtr<const float>> PagedModelRunner::replay_decode_graph(const StepPlan& plan) {
  const auto batch = static_cast<int>(plan.forward.tokens.size());
  if (!plan.decode_only || batch > step_graph_max_batch_ || !model_.step_graph_blocker().empty()) return DevicePtr<const float>();
  const ModelConfig& config = model_.config();
  const int64_t max_pages = std::min<int64_t>(
      (config.max_position_embeddings + kv_.block_size - 1) / kv_.block_size, kv_.num_blocks);
  for (const GroupStep& group : plan.groups) {
    for (int b = 0; b < batch; ++b) {
      if (group.page_indptr[static_cast<size_t>(b) + 1] - group.page_indptr[static_cast<size_t>(b)] > max_pages) {
        return DevicePtr<const float>();  // past the model's positions: the eager forward reports it
      }
    }
  }
  MOERT_RETURN_IF_ERROR(model_.validate(plan.forward));  // a replay runs no host code
  std::unique_ptr<DecodeGraph>& graph = decode_graphs_[batch];
  if (graph == nullptr) graph = std::make_unique<DecodeGraph>(batch, max_pages, plan.groups.size());
  DecodeGraph& g = *graph;
  if (g.failed) return DevicePtr<const float>();
  if (!g.warmed_up) {
    g.warmed_up = true;
    return DevicePtr<const float>();
  }
  backend::Backend& backend = model_.backend();
  if (g.graph == nullptr) {
    g.inputs = backend.allocate(DType::kU8, {static_cast<int64_t>(g.bytes)});
    g.logits = backend.allocate(DType::kF32, {static_cast<int64_t>(batch), config.vocab_size});
    model_.prepare_step_graphs();
    StepPlan recorded = plan;
    g.bind(recorded);
    const std::vector<attention::PagedKvLayer> views = layer_views();
    Status forward_status;
    Result<std::unique_ptr<backend::Backend::StepGraph>> captured = backend.capture([&] {
      PagedAttentionContext context(views, layer_group_, recorded.groups, config.num_heads);
      forward_status = model_.forward_into(recorded.forward, context, g.logits.ptr<float>());
    });
    if (!forward_status.is_ok() || !captured.is_ok()) {
      g.failed = true;
      g.inputs = Buffer();
      g.logits = Buffer();
      ++step_graph_stats_.failed;
      MOERT_WARN("decode steps of " << batch << " sequence(s) run without a step graph: "
                                    << (forward_status.is_ok() ? captured.status().message() : forward_status.message()));
      return DevicePtr<const float>();
    }
    g.graph = std::move(captured).value();
    ++step_graph_stats_.captured;
  }
  g.pack(g.tokens, plan.forward.tokens);
  g.pack(g.positions, plan.forward.positions);
  g.pack(g.qo_indptr, plan.qo_indptr);
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const GroupStep& group = plan.groups[i];
    g.pack(g.groups[i].slots, group.slots);
    g.pack(g.groups[i].page_indptr, group.page_indptr);
    g.pack(g.groups[i].last_page_len, group.last_page_len);
    g.pack(g.groups[i].page_indices, group.page_indices);
  }
  backend.copy_bytes(g.inputs.ptr<void>(), g.host, static_cast<int64_t>(g.bytes));
  g.graph->replay();
  ++step_graph_stats_.replayed;
  return DevicePtr<const float>(g.logits.ptr<float>());
}

Result<std::vector<float>> PagedModelRunner::run(const RunnerBatch& batch) {
  return run_step<std::vector<float>>(
      batch,
      [&](const ForwardBatch& forward, AttentionContext& attention) {
        if (batch.final_hidden != nullptr) return model_.forward_with_hidden(forward, attention, batch.final_hidden);
        return model_.forward(forward, attention);
      },
      [&](DevicePtr<const float> logits, int64_t num_rows) -> Result<std::vector<float>> {
        std::vector<float> host(static_cast<size_t>(num_rows * model_.config().vocab_size));
        model_.backend().to_host(logits, static_cast<int64_t>(host.size()), host.data());
        return host;
      });
}

Result<std::vector<int32_t>> PagedModelRunner::run_and_sample(const RunnerBatch& batch,
                                                              std::span<const backend::Backend::RowSampling> rows) {
  return run_step<std::vector<int32_t>>(
      batch,
      [&](const ForwardBatch& forward, AttentionContext& attention) {
        return model_.forward_and_sample(forward, attention, rows);
      },
      [&](DevicePtr<const float> logits, int64_t num_rows) -> Result<std::vector<int32_t>> {
        if (static_cast<int64_t>(rows.size()) != num_rows) {
          return invalid_argument(std::to_string(rows.size()) + " sampling rows for " + std::to_string(num_rows) +
                                  " logit rows");
        }
        std::vector<int32_t> tokens(rows.size());
        model_.backend().sample_rows(logits, model_.config().vocab_size, rows, tokens.data());
        return tokens;
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

}  // namespace moert::runner
