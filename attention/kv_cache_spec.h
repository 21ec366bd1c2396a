// What the paged KV cache stores for a group of layers (docs/kv-cache.md): the kind of
// attention (full, sliding window W, latent MLA with one compressed row per token), the
// per-token width and the element type. Plain data: the model derives the groups from its
// layer specs (runtime/model/kv_cache_groups.h), the runner allocates one storage per layer
// through the backend, the launcher sizes the pool from bytes_per_block.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace moert::attention {

enum class KvCacheKind {
  kFullAttention,  // every position's K and V rows [KVH, Dh]
  kSlidingWindow,  // the same rows; a query sees only the last `sliding_window` positions
  kLatent,         // one row of `latent_width` values per position (MLA: latent c | k_pe)
};
const char* kv_cache_kind_name(KvCacheKind kind);

struct KvCacheSpec {
  KvCacheKind kind = KvCacheKind::kFullAttention;
  int sliding_window = 0;  // W, kSlidingWindow only
  int num_kv_heads = 0;    // KVH (full / sliding)
  int head_dim = 0;        // Dh (full / sliding)
  int latent_width = 0;    // kLatent only
  DType dtype = DType::kF32;  // F32, BF16 or F8_E4M3
  std::vector<int> layers;    // the model layers of this group, ascending

  // Values one layer stores per token: 2 * KVH * Dh (K and V), or latent_width.
  int64_t values_per_token() const;
  // Bytes of one token in one layer at `dtype` (scales excluded).
  int64_t bytes_per_token() const;
  // Bytes one block of `block_size` tokens takes over all layers of the group, FP8 scales
  // included (one F32 per block, layer and kv head for each of K and V; one for a latent row).
  int64_t bytes_per_block(int block_size) const;
};

// Bytes one token takes in every layer of every group (what `kv_cache_bytes_per_token`
// reports): sum of bytes_per_token() * layers.
int64_t kv_cache_bytes_per_token(const std::vector<KvCacheSpec>& groups);
// True when the groups can share storage: the same number of layers, per-token shape and
// dtype, none latent. A block id belongs to one group at a time, so layer j of every group
// can then use the same storage (memory of one group's layers per block).
bool kv_groups_share_storage(const std::vector<KvCacheSpec>& groups);
// Bytes of storage behind one block id (the pool's unit when sizing from MiB): one group's
// layers when the groups share storage, else every group's.
int64_t kv_cache_bytes_per_block(const std::vector<KvCacheSpec>& groups, int block_size);

// The `--kv-cache-dtype` values: "f32", "bf16", "fp8_e4m3" (and "auto", resolved by the
// caller to its backend's preference). Errors name the value and the accepted ones.
Result<DType> parse_kv_cache_dtype(std::string_view name, DType auto_dtype);
// "f32", "bf16" or "fp8_e4m3".
const char* kv_cache_dtype_name(DType dtype);

}  // namespace moert::attention
