#include "attention/cache/kv_cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace moert::attention {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                               std::vector<KvGroupLayout> groups)
    : pool_(num_blocks, enable_prefix_caching), block_size_(block_size), groups_(std::move(groups)) {
  MOERT_CHECK(block_size >= 1, "block_size = " << block_size << " must be >= 1");
  MOERT_CHECK(!groups_.empty(), "a KV cache needs at least one group");
  for (const KvGroupLayout& group : groups_) {
    MOERT_CHECK(group.sliding_window >= 0, "sliding_window = " << group.sliding_window << " must be >= 0");
  }
}

KvCacheManager::SeqState& KvCacheManager::state(SeqId seq) {
  auto it = seqs_.find(seq);
  MOERT_CHECK(it != seqs_.end(), "unknown sequence " << seq);
  return it->second;
}

const KvCacheManager::SeqState& KvCacheManager::state(SeqId seq) const {
  auto it = seqs_.find(seq);
  MOERT_CHECK(it != seqs_.end(), "unknown sequence " << seq);
  return it->second;
}

void KvCacheManager::note_usage() {
  stats_.peak_used_blocks = std::max(stats_.peak_used_blocks, pool_.num_used_blocks());
}

BlockHash KvCacheManager::group_hash(BlockHash hash, int group) const {
  if (group == 0) return hash;
  const int32_t salt = group;
  return hash_block_tokens(hash, &salt, 1);
}

int64_t KvCacheManager::max_blocks_held(int64_t length) const {
  return static_cast<int64_t>(groups_.size()) * ((length + block_size_ - 1) / block_size_);
}

int64_t KvCacheManager::add_sequence(SeqId seq, const std::vector<int32_t>& tokens) {
  MOERT_CHECK(!has_sequence(seq), "sequence " << seq << " already exists");
  SeqState& s = seqs_[seq];
  s.tables.assign(groups_.size(), {});
  if (!pool_.prefix_caching_enabled()) return 0;
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int64_t max_hit_blocks = len > 0 ? (len - 1) / block_size_ : 0;
  std::vector<BlockHash> hashes;  // chain hashes of the tokens, group-independent
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : hashes.back();
    hashes.push_back(hash_block_tokens(parent, tokens.data() + i * block_size_, block_size_));
  }
  auto cached = [&](int group, int64_t i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : hashes[static_cast<size_t>(i - 1)];
    return pool_.has_cached(group_hash(hashes[static_cast<size_t>(i)], group), group_hash(parent, group),
                            tokens.data() + i * block_size_, block_size_);
  };
  // The first block a sliding group needs when the next query sits at position n * B.
  auto first_needed = [&](int group, int64_t n) -> int64_t {
    const int window = groups_[static_cast<size_t>(group)].sliding_window;
    return window == 0 ? 0 : std::max<int64_t>(0, n * block_size_ - window + 1) / block_size_;
  };
  int64_t n = max_hit_blocks;
  for (int64_t hit = 0; hit < n; ++hit) {  // every group must hold the blocks its next query reads
    bool all = true;
    for (int g = 0; g < num_groups() && all; ++g) all = groups_[static_cast<size_t>(g)].sliding_window > 0 || cached(g, hit);
    if (!all) n = hit;
  }
  for (; n > 0; --n) {
    bool usable = true;
    for (int g = 0; g < num_groups() && usable; ++g) {
      for (int64_t i = first_needed(g, n); i < n && usable; ++i) usable = cached(g, i);
    }
    if (usable) break;
  }
  for (int g = 0; g < num_groups(); ++g) {
    std::vector<BlockId>& table = s.tables[static_cast<size_t>(g)];
    const int64_t first = first_needed(g, n);
    for (int64_t i = 0; i < n; ++i) {
      if (i < first) {
        table.push_back(kNullBlock);
        continue;
      }
      const BlockHash parent = i == 0 ? kRootBlockHash : hashes[static_cast<size_t>(i - 1)];
      const std::optional<BlockId> hit = pool_.lookup_cached(group_hash(hashes[static_cast<size_t>(i)], g),
                                                             group_hash(parent, g), tokens.data() + i * block_size_,
                                                             block_size_);
      MOERT_CHECK(hit.has_value(), "prefix block " << i << " of group " << g << " vanished during lookup");
      table.push_back(*hit);
    }
  }
  s.hashes.assign(hashes.begin(), hashes.begin() + n);
  s.freed_for = n * block_size_;
  const int64_t num_hit_tokens = n * block_size_;
  stats_.prefix_queries += len;
  stats_.prefix_hits += num_hit_tokens;
  note_usage();
  return num_hit_tokens;
}

bool KvCacheManager::reserve(SeqId seq, int64_t write_from, int64_t new_len) {
  SeqState& s = state(seq);
  MOERT_CHECK(write_from >= 0 && write_from <= new_len,
              "write_from = " << write_from << " must be in [0, new_len = " << new_len << "]");
  const int64_t num_have = static_cast<int64_t>(s.tables[0].size());
  const int64_t num_needed = (new_len + block_size_ - 1) / block_size_;
  const int64_t num_append = std::max<int64_t>(0, num_needed - num_have);

  // Existing blocks that this step writes: logical [write_from / B, min(have, needed)).
  std::vector<std::vector<int64_t>> cow_idx(groups_.size());
  const int64_t first_written = write_from / block_size_;
  int64_t num_alloc = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (write_from < new_len) {
      for (int64_t i = first_written; i < std::min(num_have, num_needed); ++i) {
        const BlockId b = s.tables[g][static_cast<size_t>(i)];
        MOERT_CHECK(b != kNullBlock, "sequence " << seq << " writes position " << i * block_size_
                                                 << " behind its window (group " << g << ")");
        if (pool_.ref_count(b) > 1 || pool_.is_cached(b)) cow_idx[g].push_back(i);
      }
    }
    num_alloc += static_cast<int64_t>(cow_idx[g].size()) + num_append;
  }
  if (num_alloc > pool_.num_free_blocks()) return false;

  // Allocate before dropping the old references so a copy never lands on its own source.
  std::optional<std::vector<BlockId>> fresh = pool_.allocate(static_cast<int>(num_alloc));
  MOERT_CHECK(fresh.has_value(), "allocate(" << num_alloc << ") failed after the free-block check");
  size_t next = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<BlockId>& table = s.tables[g];
    std::vector<BlockId> released;
    for (int64_t i : cow_idx[g]) {
      const BlockId old_block = table[static_cast<size_t>(i)];
      const BlockId new_block = (*fresh)[next++];
      pending_copies_.push_back({old_block, new_block, static_cast<int>(g)});
      table[static_cast<size_t>(i)] = new_block;
      released.push_back(old_block);
    }
    std::reverse(released.begin(), released.end());  // tail first, like free_sequence
    pool_.free_blocks(released);
    stats_.cow_copies += static_cast<int64_t>(cow_idx[g].size());
    for (int64_t a = 0; a < num_append; ++a) table.push_back((*fresh)[next++]);
  }

  // Blocks from first_written on are rewritten: their hashes no longer describe them.
  if (write_from < new_len && static_cast<int64_t>(s.hashes.size()) > first_written) {
    s.hashes.resize(static_cast<size_t>(first_written));
  }
  note_usage();
  return true;
}

void KvCacheManager::commit_computed(SeqId seq, const std::vector<int32_t>& tokens, int64_t num_computed) {
  SeqState& s = state(seq);
  const int64_t capacity = static_cast<int64_t>(s.tables[0].size()) * block_size_;
  MOERT_CHECK(num_computed >= 0 && num_computed <= static_cast<int64_t>(tokens.size()) && num_computed <= capacity,
              "num_computed = " << num_computed << " must be in [0, min(tokens " << tokens.size()
                                << ", capacity " << capacity << ")]");
  if (pool_.prefix_caching_enabled()) {
    const int64_t num_full = num_computed / block_size_;
    for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < num_full; ++i) {
      const BlockHash parent = i == 0 ? kRootBlockHash : s.hashes[static_cast<size_t>(i - 1)];
      const int32_t* block_tokens = tokens.data() + i * block_size_;
      const BlockHash hash = hash_block_tokens(parent, block_tokens, block_size_);
      for (int g = 0; g < num_groups(); ++g) {
        const BlockId block = s.tables[static_cast<size_t>(g)][static_cast<size_t>(i)];
        if (block == kNullBlock) continue;
        pool_.cache_full_block(block, group_hash(hash, g), group_hash(parent, g), block_tokens, block_size_);
      }
      s.hashes.push_back(hash);
    }
  }
  // Sliding groups: blocks wholly before num_computed - W + 1 can never be read again.
  for (int g = 0; g < num_groups(); ++g) {
    const int window = groups_[static_cast<size_t>(g)].sliding_window;
    if (window == 0) continue;
    const int64_t dead = std::max<int64_t>(0, num_computed - window + 1) / block_size_;
    std::vector<BlockId>& table = s.tables[static_cast<size_t>(g)];
    std::vector<BlockId> released;
    for (int64_t i = 0; i < std::min<int64_t>(dead, static_cast<int64_t>(table.size())); ++i) {
      if (table[static_cast<size_t>(i)] == kNullBlock) continue;
      released.push_back(table[static_cast<size_t>(i)]);
      table[static_cast<size_t>(i)] = kNullBlock;
    }
    if (!released.empty()) s.freed_for = std::max(s.freed_for, num_computed);
    pool_.free_blocks(released);  // head first: the oldest blocks are evicted first
  }
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  MOERT_CHECK(!has_sequence(child), "fork child " << child << " already exists");
  const SeqState copy = state(parent);
  for (const std::vector<BlockId>& table : copy.tables) {
    for (BlockId b : table) {
      if (b != kNullBlock) pool_.add_ref(b);
    }
  }
  seqs_.emplace(child, copy);
}

void KvCacheManager::truncate(SeqId seq, int64_t new_len) {
  SeqState& s = state(seq);
  MOERT_CHECK(new_len >= 0, "new_len = " << new_len << " must be >= 0");
  bool freed_behind_window = false;
  for (const std::vector<BlockId>& table : s.tables) {
    for (BlockId b : table) freed_behind_window = freed_behind_window || b == kNullBlock;
  }
  MOERT_CHECK(!freed_behind_window || new_len >= s.freed_for,
              "truncating sequence " << seq << " to " << new_len << " below " << s.freed_for
                                     << ", whose window blocks are already freed");
  const size_t num_keep = static_cast<size_t>((new_len + block_size_ - 1) / block_size_);
  for (std::vector<BlockId>& table : s.tables) {
    if (table.size() > num_keep) {
      std::vector<BlockId> dropped;
      for (size_t i = table.size(); i > num_keep; --i) {
        if (table[i - 1] != kNullBlock) dropped.push_back(table[i - 1]);
      }
      pool_.free_blocks(dropped);
      table.resize(num_keep);
    }
  }
  const size_t num_whole = static_cast<size_t>(new_len / block_size_);
  if (s.hashes.size() > num_whole) s.hashes.resize(num_whole);
}

void KvCacheManager::free_sequence(SeqId seq) {
  SeqState& s = state(seq);
  for (const std::vector<BlockId>& table : s.tables) {
    std::vector<BlockId> blocks;
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it != kNullBlock) blocks.push_back(*it);
    }
    pool_.free_blocks(blocks);
  }
  seqs_.erase(seq);
}

const std::vector<BlockId>& KvCacheManager::block_table(SeqId seq, int group) const {
  const SeqState& s = state(seq);
  MOERT_CHECK(group >= 0 && group < num_groups(), "group " << group << " of " << num_groups());
  return s.tables[static_cast<size_t>(group)];
}

int KvCacheManager::num_hashed_blocks(SeqId seq) const { return static_cast<int>(state(seq).hashes.size()); }

int64_t KvCacheManager::slot(SeqId seq, int64_t position, int group) const {
  const std::vector<BlockId>& table = block_table(seq, group);
  const int64_t capacity = static_cast<int64_t>(table.size()) * block_size_;
  MOERT_CHECK(position >= 0 && position < capacity,
              "position " << position << " of sequence " << seq << " outside capacity " << capacity);
  return static_cast<int64_t>(table[static_cast<size_t>(position / block_size_)]) * block_size_ +
         position % block_size_;
}

std::vector<BlockCopy> KvCacheManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

}  // namespace moert::attention
