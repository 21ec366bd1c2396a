// The model runner: one forward over the paged KV cache for a batch described by plain
// data (tokens, positions, block tables, block copies), so the engine and the draft-model
// proposer never touch cache storage or attention plans, and a runner for another device
// can be dropped in. PagedModelRunner runs a TransformerForward on its backend, over K/V
// storage the backend allocated from the model's KV cache groups (attention/kv_cache_spec.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention/cache/kv_cache_manager.h"
#include "attention/kv_cache_spec.h"
#include "attention/paged_kv.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/model/transformer.h"

namespace moert::engine {

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
};

struct RunnerBatch {
  std::vector<attention::BlockCopy> block_copies;  // copy-on-write, applied first, in order
  std::vector<SequenceChunk> chunks;                // run in order
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

 private:
  // Applies the batch's block copies and hands `forward` the step's tokens and attention.
  template <typename Forward>
  auto run_step(const RunnerBatch& batch, Forward&& forward);
  // One storage slot, allocated by the backend; `view` points into the buffers. Groups of
  // the same shape share slots (layer j of every group uses slot j: a block id belongs to
  // one group at a time), else every layer has its own.
  struct LayerStorage {
    Buffer keys, values, key_scales, value_scales;
    attention::PagedKvLayer view;
  };
  PagedModelRunner(const TransformerForward& model, std::vector<attention::KvCacheSpec> groups,
                   const KvCacheConfig& kv);

  const TransformerForward& model_;
  std::vector<attention::KvCacheSpec> groups_;
  KvCacheConfig kv_;
  std::vector<LayerStorage> storage_;    // [slots]
  std::vector<int> layer_slot_;          // [num_layers] -> storage_ index
  std::vector<int> layer_group_;         // [num_layers] -> group index
};

// Bytes of one block over every layer of `model` at `dtype` (the pool's unit when its size
// is given in MiB), and of one token (kv_cache_bytes_per_token).
Result<int64_t> kv_cache_bytes_per_block(const ModelConfig& model, int block_size, DType dtype);
Result<int64_t> kv_cache_bytes_per_token(const ModelConfig& model, DType dtype);

}  // namespace moert::engine
