// The model runner: one forward over the paged KV cache for a batch described by plain
// data (tokens, positions, block tables, block copies), so the engine and the draft-model
// proposer never touch cache storage or attention plans, and a runner for another device
// can be dropped in. PagedModelRunner runs a TransformerForward on its backend, over K/V
// storage the backend allocated from the model's KV cache groups (attention/kv_cache_spec.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "attention/cache/kv_cache_manager.h"
#include "attention/cache/recurrent_state_pool.h"
#include "attention/kv_cache_spec.h"
#include "attention/paged_kv.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/model/transformer.h"

namespace moert::runner {

// One sequence's rows in a step: tokens at positions [start, start + tokens.size()), whose
// K/V go to (and whose attention reads from) the blocks of its block table in each KV cache
// group, in logical order (block i holds positions [i * BS, (i + 1) * BS); at least
// ceil((start + size) / BS) ids; a sliding group's blocks behind the window may be null).
struct SequenceChunk {
  int64_t start = 0;
  std::vector<int32_t> tokens;
  // Logits wanted: the last `num_logit_rows` rows of the chunk (0: none).
  int num_logit_rows = 0;
  std::vector<std::vector<int32_t>> block_tables;  // [group]
  // Models with linear-attention layers (docs/gated-deltanet.md): the recurrent-state slot the
  // sequence's rows continue from and update (attention::RecurrentStatePool), -1 otherwise.
  int32_t state_slot = -1;
  // Keep the state after each row of this chunk as candidates (a speculative verify): the next
  // run's RunnerBatch::state_rollbacks may restore one of them into the slot.
  bool keep_state_candidates = false;
  // Also copy the state after row `row` of the chunk into slot `slot` (prefix-cache snapshots
  // at block boundaries inside the chunk; rows ascending).
  struct StateSnapshot {
    int64_t row = 0;
    int32_t slot = -1;
  };
  std::vector<StateSnapshot> state_snapshots;
};

// The slot's state becomes its candidate after row `row` of the previous run's chunk that
// kept candidates for it (a verify whose drafts after that row were rejected).
struct StateRollback {
  int32_t slot = -1;
  int64_t row = 0;
};

struct RunnerBatch {
  std::vector<attention::BlockCopy> block_copies;  // copy-on-write, applied first, in order
  std::vector<SequenceChunk> chunks;                // run in order
  // When set, run() also writes g, every row's final hidden state (after the final norm),
  // [T, D] in chunk order (TransformerForward::forward_with_hidden; the step runs eagerly).
  std::vector<float>* final_hidden = nullptr;
  // Recurrent-state slots: rollbacks, then zero fills and copies (attention::SlotOp), in order,
  // applied after the block copies, before the step computes.
  std::vector<StateRollback> state_rollbacks;
  std::vector<attention::SlotOp> state_ops;
};

// The block tables of `seq` as a SequenceChunk wants them (the first ceil(end / BS) blocks
// of every group).
std::vector<std::vector<int32_t>> chunk_block_tables(const attention::KvCacheManager& kv, attention::SeqId seq,
                                                     int64_t end);
// The cache manager's group layouts for `groups` (same order).
std::vector<attention::KvGroupLayout> kv_group_layouts(const std::vector<attention::KvCacheSpec>& groups);
// Those of `model` (any dtype has the same layouts); precondition: the model's groups are
// supported (checked).
std::vector<attention::KvGroupLayout> kv_group_layouts(const ModelConfig& model);

struct KvCacheConfig {
  int num_blocks = 0;  // including the null block 0
  int block_size = 16;
  DType dtype = DType::kF32;
  // Recurrent-state slots (models with linear-attention layers; 0 otherwise): the size of the
  // attention::RecurrentStatePool whose slot ids the chunks carry.
  int num_state_slots = 0;
};

// The recurrent state one slot holds over every linear-attention layer of `model`
// (docs/gated-deltanet.md): F32 whatever the KV cache dtype, its size fixed per sequence.
struct RecurrentStateLayout {
  std::vector<int> layers;      // the linear-attention layers, ascending
  int64_t conv_values = 0;      // per layer and slot: [W-1, C]
  int64_t recurrent_values = 0; // per layer and slot: [NV, DK, DV]
  int64_t bytes_per_slot() const {
    return static_cast<int64_t>(layers.size()) * (conv_values + recurrent_values) * static_cast<int64_t>(sizeof(float));
  }
};
RecurrentStateLayout recurrent_state_layout(const ModelConfig& model);

// The largest decode batch a step graph is worth recording for: beyond it the CUDA backend
// plans a MoE layer's layout on the host (kDeviceLayoutMaxTokens), which a graph cannot do.
inline constexpr int kMaxStepGraphBatch = 16;

// How decode steps used step graphs (PagedModelRunner::enable_step_graphs).
struct StepGraphStats {
  int64_t captured = 0;  // graphs recorded (one per batch size)
  int64_t replayed = 0;  // steps run as a graph replay
  int64_t failed = 0;    // batch sizes whose capture failed (they run eagerly)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const std::vector<attention::KvCacheSpec>& kv_cache_groups() const = 0;
  // Applies the block copies, then runs the model over the chunks. Returns the logits of
  // every chunk's requested rows, concatenated in chunk order, [sum num_logit_rows, V]. An
  // empty batch still runs the model with no tokens (expert-parallel ranks without work
  // take part in every exchange).
  virtual Result<std::vector<float>> run(const RunnerBatch& batch) = 0;
  // The same step, with requested row r drawn on the model's backend under rows[r] instead
  // of its logits being returned (Backend::sample_rows): the tokens, in row order.
  virtual Result<std::vector<int32_t>> run_and_sample(const RunnerBatch& batch,
                                                      std::span<const backend::Backend::RowSampling> rows) = 0;
  virtual StepGraphStats step_graph_stats() const { return {}; }
};

class PagedModelRunner final : public ModelRunner {
 public:
  // `model` must outlive the runner. Fails (invalid_argument / unsupported) when the
  // model's layers need a cache kind or dtype the runner cannot store.
  static Result<std::unique_ptr<PagedModelRunner>> create(const TransformerForward& model, const KvCacheConfig& kv);

  const ModelConfig& config() const override { return model_.config(); }
  const std::vector<attention::KvCacheSpec>& kv_cache_groups() const override { return groups_; }
  Result<std::vector<float>> run(const RunnerBatch& batch) override;
  Result<std::vector<int32_t>> run_and_sample(const RunnerBatch& batch,
                                              std::span<const backend::Backend::RowSampling> rows) override;

  // Decode steps (one token and its logits per sequence) of up to max_batch sequences run as
  // step graphs where the backend records them (CUDA; docs/cuda-backend.md, Step graphs):
  // the first step of a batch size runs eagerly (its weights and expert tables become
  // resident), the next is recorded, later ones replay it over the step's inputs copied to
  // the device. Same outputs as eager steps. 0 (the default) runs every step eagerly.
  void enable_step_graphs(int max_batch) { step_graph_max_batch_ = max_batch; }
  StepGraphStats step_graph_stats() const override { return step_graph_stats_; }

 private:
  struct StepPlan;
  struct DecodeGraph;
  // The step's tokens, positions, slots and attention plans as host data (checked).
  StepPlan plan_step(const RunnerBatch& batch) const;
  void apply_block_copies(const RunnerBatch& batch);
  std::vector<attention::PagedKvLayer> layer_views() const;
  // The device logits [B, V] of a decode step run as a step graph, or null when the step
  // runs eagerly (not a decode step, graphs off or failed, or the batch size's first step).
  Result<DevicePtr<const float>> replay_decode_graph(const StepPlan& plan);
  // Applies the batch's block copies, then replays the step's graph (from_device_logits
  // turns its device logits [rows, V] into the result) or hands `eager` the step's tokens
  // and attention.
  template <typename T, typename Eager, typename FromDeviceLogits>
  Result<T> run_step(const RunnerBatch& batch, Eager&& eager, FromDeviceLogits&& from_device_logits);
  // One storage slot, allocated by the backend; `view` points into the buffers. Groups of
  // the same shape share slots (layer j of every group uses slot j: a block id belongs to
  // one group at a time), else every layer has its own.
  struct LayerStorage {
    Buffer keys, values, key_scales, value_scales;
    attention::PagedKvLayer view;
  };
  // One linear-attention layer's slots [slots, W-1, C] and [slots, NV, DK, DV], and the
  // candidates the last run kept ([rows, ...], rows of the chunks that asked, in order).
  struct StateStorage {
    Buffer conv, recurrent;
    Buffer conv_candidates, recurrent_candidates;
  };
  void apply_state_work(const RunnerBatch& batch);
  // Each linear-attention layer's sequences of the step (PagedAttentionContext), candidates
  // allocated for the chunks that keep them, and the snapshot copies their spans point into.
  struct StepRecurrent {
    std::vector<std::vector<backend::Backend::RecurrentSequence>> layers;  // [num_layers]
    std::vector<std::vector<attention::StateCopy>> copies;                 // [linear layer * chunk]
  };
  StepRecurrent plan_recurrent(const RunnerBatch& batch);
  PagedModelRunner(const TransformerForward& model, std::vector<attention::KvCacheSpec> groups,
                   const KvCacheConfig& kv);
 public:
  ~PagedModelRunner() override;

 private:

  const TransformerForward& model_;
  std::vector<attention::KvCacheSpec> groups_;
  KvCacheConfig kv_;
  std::vector<LayerStorage> storage_;    // [slots]
  RecurrentStateLayout state_layout_;
  std::vector<StateStorage> states_;     // [state_layout_.layers]
  std::map<int32_t, int64_t> candidate_rows_;  // slot -> first candidate row of the last run
  std::vector<int> layer_slot_;          // [num_layers] -> storage_ index, -1 for layers without K/V
  std::vector<int> layer_group_;         // [num_layers] -> group index
  int step_graph_max_batch_ = 0;
  std::map<int, std::unique_ptr<DecodeGraph>> decode_graphs_;  // by batch size
  StepGraphStats step_graph_stats_;
};

// Bytes of one block over every layer of `model` at `dtype` (the pool's unit when its size
// is given in MiB), and of one token (kv_cache_bytes_per_token).
Result<int64_t> kv_cache_bytes_per_block(const ModelConfig& model, int block_size, DType dtype);
Result<int64_t> kv_cache_bytes_per_token(const ModelConfig& model, DType dtype);

}  // namespace moert::runner
