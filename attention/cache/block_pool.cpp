#include "attention/cache/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace moert::attention {
namespace {

constexpr BlockId kNotQueued = -1;

// splitmix64 finaliser: a full-avalanche 64-bit mix.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

BlockHash hash_block_tokens(BlockHash parent, const int32_t* tokens, int num_tokens) {
  MOERT_CHECK(num_tokens >= 0, "num_tokens = " << num_tokens << " must be >= 0");
  uint64_t h = mix64(parent ^ 0x6b765f626c6f636bULL);
  for (int i = 0; i < num_tokens; ++i) h = mix64(h ^ static_cast<uint32_t>(tokens[i]));
  return mix64(h ^ (static_cast<uint64_t>(num_tokens) << 32));
}

BlockPool::BlockPool(int num_blocks, bool enable_prefix_caching)
    : num_blocks_(num_blocks), enable_prefix_caching_(enable_prefix_caching) {
  MOERT_CHECK(num_blocks >= 1, "num_blocks = " << num_blocks << " must be >= 1 (block 0 is the null block)");
  const size_t n = static_cast<size_t>(num_blocks);
  ref_count_.assign(n, 0);
  next_.assign(n + 1, kNotQueued);
  prev_.assign(n + 1, kNotQueued);
  next_[n] = prev_[n] = num_blocks_;  // empty circular list around the sentinel
  has_hash_.assign(n, false);
  key_.resize(n);
  for (BlockId b = 1; b < num_blocks_; ++b) queue_append(b);
}

void BlockPool::check_usable(BlockId block) const {
  MOERT_CHECK(block > kNullBlock && block < num_blocks_,
              "block " << block << " is not a usable id (1.." << num_blocks_ - 1 << ")");
}

void BlockPool::queue_append(BlockId block) {
  const BlockId sentinel = num_blocks_;
  const BlockId tail = prev_[sentinel];
  next_[tail] = block;
  prev_[block] = tail;
  next_[block] = sentinel;
  prev_[sentinel] = block;
  ++num_free_;
}

void BlockPool::queue_remove(BlockId block) {
  MOERT_CHECK(next_[block] != kNotQueued, "block " << block << " is not in the free queue");
  next_[prev_[block]] = next_[block];
  prev_[next_[block]] = prev_[block];
  next_[block] = prev_[block] = kNotQueued;
  --num_free_;
}

void BlockPool::evict_hash(BlockId block) {
  if (!has_hash_[block]) return;
  auto it = hash_to_block_.find(key_[block].hash);
  MOERT_CHECK(it != hash_to_block_.end() && it->second == block,
              "cached block " << block << " is missing from the hash map");
  hash_to_block_.erase(it);
  has_hash_[block] = false;
  key_[block] = CachedKey{};
}

std::optional<std::vector<BlockId>> BlockPool::allocate(int count) {
  MOERT_CHECK(count >= 0, "count = " << count << " must be >= 0");
  if (count > num_free_) return std::nullopt;
  std::vector<BlockId> blocks;
  blocks.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const BlockId block = next_[num_blocks_];  // head
    queue_remove(block);
    evict_hash(block);
    ref_count_[block] = 1;
    blocks.push_back(block);
  }
  return blocks;
}

void BlockPool::free_blocks(const std::vector<BlockId>& blocks) {
  for (BlockId block : blocks) {
    check_usable(block);
    MOERT_CHECK(ref_count_[block] > 0, "free of block " << block << " whose ref_count is 0");
    if (--ref_count_[block] == 0) queue_append(block);
  }
}

void BlockPool::add_ref(BlockId block) {
  check_usable(block);
  MOERT_CHECK(ref_count_[block] > 0, "add_ref of free block " << block);
  ++ref_count_[block];
}

int BlockPool::ref_count(BlockId block) const {
  MOERT_CHECK(block >= 0 && block < num_blocks_, "block " << block << " out of range [0, " << num_blocks_ << ")");
  return ref_count_[block];
}

bool BlockPool::has_cached(BlockHash hash, BlockHash parent, const int32_t* tokens, int num_tokens) const {
  if (!enable_prefix_caching_) return false;
  auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return false;
  const CachedKey& key = key_[it->second];
  return key.parent == parent && key.tokens.size() == static_cast<size_t>(num_tokens) &&
         std::equal(key.tokens.begin(), key.tokens.end(), tokens);
}

std::optional<BlockId> BlockPool::lookup_cached(BlockHash hash, BlockHash parent, const int32_t* tokens,
                                                int num_tokens) {
  if (!enable_prefix_caching_) return std::nullopt;
  auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  const BlockId block = it->second;
  const CachedKey& key = key_[block];
  if (key.parent != parent || key.tokens.size() != static_cast<size_t>(num_tokens) ||
      !std::equal(key.tokens.begin(), key.tokens.end(), tokens)) {
    return std::nullopt;  // same 64-bit hash, different contents: a collision, not a hit
  }
  if (ref_count_[block] == 0) queue_remove(block);
  ++ref_count_[block];
  return block;
}

void BlockPool::cache_full_block(BlockId block, BlockHash hash, BlockHash parent, const int32_t* tokens,
                                 int num_tokens) {
  if (!enable_prefix_caching_) return;
  check_usable(block);
  MOERT_CHECK(ref_count_[block] > 0, "cache_full_block of free block " << block);
  MOERT_CHECK(num_tokens > 0, "num_tokens = " << num_tokens << " must be > 0");
  if (has_hash_[block]) {
    MOERT_CHECK(key_[block].hash == hash,
                "block " << block << " already carries hash " << key_[block].hash << ", not " << hash);
    return;
  }
  if (!hash_to_block_.emplace(hash, block).second) return;  // another block holds this hash
  has_hash_[block] = true;
  key_[block] = CachedKey{hash, parent, std::vector<int32_t>(tokens, tokens + num_tokens)};
}

bool BlockPool::is_cached(BlockId block) const {
  MOERT_CHECK(block >= 0 && block < num_blocks_, "block " << block << " out of range [0, " << num_blocks_ << ")");
  return has_hash_[block];
}

std::vector<BlockId> BlockPool::free_queue_order() const {
  std::vector<BlockId> order;
  order.reserve(static_cast<size_t>(num_free_));
  for (BlockId b = next_[num_blocks_]; b != num_blocks_; b = next_[b]) order.push_back(b);
  return order;
}

}  // namespace moert::attention
