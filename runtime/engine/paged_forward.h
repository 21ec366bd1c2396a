// One transformer forward over the paged KV cache: the K/V storage of every layer, the
// attention context that writes and reads it through block tables, and the batch builder
// shared by the engine (target model) and the draft-model proposer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention/cache/kv_cache_manager.h"
#include "attention/paged_kv.h"
#include "core/status.h"
#include "runtime/model/transformer.h"

namespace moert::engine {

// K/V of every layer, F32, [num_blocks, block_size, KVH, Dh] each; uninitialised memory
// (a slot is always written before it is read).
class PagedKvStorage {
 public:
  PagedKvStorage(const ModelConfig& config, int num_blocks, int block_size);
  attention::PagedKvLayer layer(int index) const;
  int num_layers() const { return static_cast<int>(keys_.size()); }
  static int64_t bytes_per_block(const ModelConfig& config, int block_size);

 private:
  int num_blocks_, block_size_, num_kv_heads_, head_dim_;
  std::vector<std::unique_ptr<float[]>> keys_, values_;
};

// One sequence's rows in a paged forward: tokens at positions [start, start + size) of
// sequence `seq`, whose block table (in the KvCacheManager) already covers them.
struct PagedChunk {
  attention::SeqId seq = 0;
  int64_t start = 0;
  std::vector<int32_t> tokens;
  // Logits wanted: the last `num_logit_rows` rows of the chunk (0: none).
  int num_logit_rows = 0;
};

// Copies the blocks of `copies` (copy-on-write) in every layer, on `backend`.
void apply_block_copies(backend::Backend& backend, const PagedKvStorage& storage,
                        const std::vector<attention::BlockCopy>& copies);

// Runs `model` over the chunks (in order) with their K/V written to and read from
// `storage` through `kv`'s tables. Returns the logits of every chunk's requested rows,
// concatenated in chunk order, [sum num_logit_rows, V]. An empty chunk list runs the
// model with no tokens (expert-parallel ranks without work still take part).
Result<std::vector<float>> paged_forward(const TransformerForward& model, const PagedKvStorage& storage,
                                         const attention::KvCacheManager& kv, const std::vector<PagedChunk>& chunks);

}  // namespace moert::engine
