// The KV block pool (after vLLM's v1 BlockPool / FreeKVCacheBlockQueue, spec §4.2).
//
// Terms, defined once:
//   block      a fixed slot of B token positions in the KV storage, named by a BlockId.
//   null block id 0 (kNullBlock): reserved, never handed out, never freed, never cached.
//   ref_count  how many sequence block tables hold the block.
//   free queue the blocks with ref_count 0, in eviction order (head = evicted first). It is
//              an intrusive doubly-linked list over block ids held in arrays, so popleft,
//              remove and append are O(1).
//   cached     a FULL block whose contents are registered in the prefix cache under a
//              chained BlockHash (hash of the parent block's hash and the block's tokens).
//
// Invariants:
//   * a block is in the free queue  <=>  it is not the null block and ref_count == 0;
//   * a freed block keeps its hash (it stays hittable) until allocate() pops it (eviction);
//   * only full blocks carry a hash (the caller caches only full blocks), at most one block
//     carries a given hash, and a block carries at most one hash;
//   * num_free_blocks() + num_used_blocks() == num_blocks() - 1.
//
// Collision safety: each cached block stores its parent hash and its token ids; a lookup
// hits only if hash, parent hash and tokens all match. A 64-bit collision of the block's
// own hash therefore never yields a wrong hit. (Chains trust the parent hash: a wrong hit
// would further need two different prefixes with the same 64-bit chain hash.)
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace moert::attention {

using BlockId = int32_t;
constexpr BlockId kNullBlock = 0;
using BlockHash = uint64_t;
// Parent hash of a sequence's first block ("moertKV\0"); fixed so hashes are reproducible.
constexpr BlockHash kRootBlockHash = 0x6d6f6572744b5600ULL;

// Chained hash of one full block: depends on `parent`, `num_tokens` and the exact token ids.
BlockHash hash_block_tokens(BlockHash parent, const int32_t* tokens, int num_tokens);

class BlockPool {
 public:
  // Usable ids are 1..num_blocks-1 (num_blocks >= 1); the initial free queue is 1, 2, 3, ...
  BlockPool(int num_blocks, bool enable_prefix_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return num_blocks_; }  // includes the null block
  int num_free_blocks() const { return num_free_; }
  int num_used_blocks() const { return num_blocks_ - 1 - num_free_; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }

  // Pops `count` blocks from the free-queue head, in queue order, each with ref_count 1.
  // A popped block that carried a hash loses it (eviction). Returns nullopt and changes
  // nothing if fewer than `count` blocks are free. count >= 0.
  std::optional<std::vector<BlockId>> allocate(int count);
  // Decrements each block's ref_count in the given order; a block reaching 0 is appended
  // to the free-queue tail and keeps its hash. Each block must be in use (ref_count > 0).
  void free_blocks(const std::vector<BlockId>& blocks);
  // Another table takes the block. Precondition: the block is in use (ref_count > 0);
  // free cached blocks are taken through lookup_cached.
  void add_ref(BlockId block);
  int ref_count(BlockId block) const;

  // Prefix cache lookup. On a hit (hash, parent and tokens all equal to the cached block's)
  // returns the block, removed from the free queue if it was free, with ref_count + 1.
  // Always nullopt when prefix caching is disabled.
  std::optional<BlockId> lookup_cached(BlockHash hash, BlockHash parent, const int32_t* tokens,
                                       int num_tokens);
  // The same lookup without taking the block (no reference, queue unchanged).
  bool has_cached(BlockHash hash, BlockHash parent, const int32_t* tokens, int num_tokens) const;
  // Registers a full, in-use block under `hash`. No-op if caching is disabled or `hash` is
  // already cached (by this or another block). Precondition: the block carries no other hash.
  void cache_full_block(BlockId block, BlockHash hash, BlockHash parent, const int32_t* tokens,
                        int num_tokens);
  bool is_cached(BlockId block) const;
  int64_t num_cached_blocks() const { return static_cast<int64_t>(hash_to_block_.size()); }

  // The free queue, head (next to be evicted) first. For tests and debugging.
  std::vector<BlockId> free_queue_order() const;

 private:
  struct CachedKey {
    BlockHash hash = 0;
    BlockHash parent = 0;
    std::vector<int32_t> tokens;
  };

  void check_usable(BlockId block) const;
  void queue_append(BlockId block);
  void queue_remove(BlockId block);
  void evict_hash(BlockId block);

  int num_blocks_;
  bool enable_prefix_caching_;
  int num_free_ = 0;
  std::vector<int> ref_count_;     // [num_blocks]
  // Free-queue links; index num_blocks_ is the sentinel (next = head, prev = tail).
  // kNotQueued marks a block outside the queue.
  std::vector<BlockId> next_;      // [num_blocks + 1]
  std::vector<BlockId> prev_;      // [num_blocks + 1]
  std::vector<bool> has_hash_;     // [num_blocks]
  std::vector<CachedKey> key_;     // [num_blocks]; meaningful where has_hash_
  std::unordered_map<BlockHash, BlockId> hash_to_block_;
};

}  // namespace moert::attention
