#include "attention/cache/kv_cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace moert::attention {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : pool_(num_blocks, enable_prefix_caching), block_size_(block_size) {
  MOERT_CHECK(block_size >= 1, "block_size = " << block_size << " must be >= 1");
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

int64_t KvCacheManager::add_sequence(SeqId seq, const std::vector<int32_t>& tokens) {
  MOERT_CHECK(!has_sequence(seq), "sequence " << seq << " already exists");
  SeqState& s = seqs_[seq];
  if (!pool_.prefix_caching_enabled()) return 0;
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int64_t max_hit_blocks = len > 0 ? (len - 1) / block_size_ : 0;
  BlockHash parent = kRootBlockHash;
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    const int32_t* block_tokens = tokens.data() + i * block_size_;
    const BlockHash hash = hash_block_tokens(parent, block_tokens, block_size_);
    const std::optional<BlockId> hit = pool_.lookup_cached(hash, parent, block_tokens, block_size_);
    if (!hit) break;
    s.blocks.push_back(*hit);
    s.hashes.push_back(hash);
    parent = hash;
  }
  const int64_t num_hit_tokens = static_cast<int64_t>(s.blocks.size()) * block_size_;
  stats_.prefix_queries += len;
  stats_.prefix_hits += num_hit_tokens;
  note_usage();
  return num_hit_tokens;
}

bool KvCacheManager::reserve(SeqId seq, int64_t write_from, int64_t new_len) {
  SeqState& s = state(seq);
  MOERT_CHECK(write_from >= 0 && write_from <= new_len,
              "write_from = " << write_from << " must be in [0, new_len = " << new_len << "]");
  const int64_t num_have = static_cast<int64_t>(s.blocks.size());
  const int64_t num_needed = (new_len + block_size_ - 1) / block_size_;
  const int64_t num_append = std::max<int64_t>(0, num_needed - num_have);

  // Existing blocks that this step writes: logical [write_from / B, min(have, needed)).
  std::vector<int64_t> cow_idx;
  const int64_t first_written = write_from / block_size_;
  if (write_from < new_len) {
    for (int64_t i = first_written; i < std::min(num_have, num_needed); ++i) {
      const BlockId b = s.blocks[static_cast<size_t>(i)];
      if (pool_.ref_count(b) > 1 || pool_.is_cached(b)) cow_idx.push_back(i);
    }
  }
  const int64_t num_alloc = static_cast<int64_t>(cow_idx.size()) + num_append;
  if (num_alloc > pool_.num_free_blocks()) return false;

  // Allocate before dropping the old references so a copy never lands on its own source.
  std::optional<std::vector<BlockId>> fresh = pool_.allocate(static_cast<int>(num_alloc));
  MOERT_CHECK(fresh.has_value(), "allocate(" << num_alloc << ") failed after the free-block check");
  std::vector<BlockId> released;
  size_t next = 0;
  for (int64_t i : cow_idx) {
    const BlockId old_block = s.blocks[static_cast<size_t>(i)];
    const BlockId new_block = (*fresh)[next++];
    pending_copies_.push_back({old_block, new_block});
    s.blocks[static_cast<size_t>(i)] = new_block;
    released.push_back(old_block);
  }
  std::reverse(released.begin(), released.end());  // tail first, like free_sequence
  pool_.free_blocks(released);
  stats_.cow_copies += static_cast<int64_t>(cow_idx.size());
  for (; next < fresh->size(); ++next) s.blocks.push_back((*fresh)[next]);

  // Blocks from first_written on are rewritten: their hashes no longer describe them.
  if (write_from < new_len && static_cast<int64_t>(s.hashes.size()) > first_written) {
    s.hashes.resize(static_cast<size_t>(first_written));
  }
  note_usage();
  return true;
}

void KvCacheManager::commit_computed(SeqId seq, const std::vector<int32_t>& tokens, int64_t num_computed) {
  SeqState& s = state(seq);
  const int64_t capacity = static_cast<int64_t>(s.blocks.size()) * block_size_;
  MOERT_CHECK(num_computed >= 0 && num_computed <= static_cast<int64_t>(tokens.size()) && num_computed <= capacity,
              "num_computed = " << num_computed << " must be in [0, min(tokens " << tokens.size()
                                << ", capacity " << capacity << ")]");
  if (!pool_.prefix_caching_enabled()) return;
  const int64_t num_full = num_computed / block_size_;
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < num_full; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : s.hashes[static_cast<size_t>(i - 1)];
    const int32_t* block_tokens = tokens.data() + i * block_size_;
    const BlockHash hash = hash_block_tokens(parent, block_tokens, block_size_);
    pool_.cache_full_block(s.blocks[static_cast<size_t>(i)], hash, parent, block_tokens, block_size_);
    s.hashes.push_back(hash);
  }
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  MOERT_CHECK(!has_sequence(child), "fork child " << child << " already exists");
  const SeqState copy = state(parent);
  for (BlockId b : copy.blocks) pool_.add_ref(b);
  seqs_.emplace(child, copy);
}

void KvCacheManager::truncate(SeqId seq, int64_t new_len) {
  SeqState& s = state(seq);
  MOERT_CHECK(new_len >= 0, "new_len = " << new_len << " must be >= 0");
  const size_t num_keep = static_cast<size_t>((new_len + block_size_ - 1) / block_size_);
  if (s.blocks.size() > num_keep) {
    std::vector<BlockId> dropped(s.blocks.rbegin(), s.blocks.rend() - static_cast<std::ptrdiff_t>(num_keep));
    pool_.free_blocks(dropped);
    s.blocks.resize(num_keep);
  }
  const size_t num_whole = static_cast<size_t>(new_len / block_size_);
  if (s.hashes.size() > num_whole) s.hashes.resize(num_whole);
}

void KvCacheManager::free_sequence(SeqId seq) {
  SeqState& s = state(seq);
  pool_.free_blocks(std::vector<BlockId>(s.blocks.rbegin(), s.blocks.rend()));
  seqs_.erase(seq);
}

const std::vector<BlockId>& KvCacheManager::block_table(SeqId seq) const { return state(seq).blocks; }

int KvCacheManager::num_hashed_blocks(SeqId seq) const { return static_cast<int>(state(seq).hashes.size()); }

int64_t KvCacheManager::slot(SeqId seq, int64_t position) const {
  const SeqState& s = state(seq);
  const int64_t capacity = static_cast<int64_t>(s.blocks.size()) * block_size_;
  MOERT_CHECK(position >= 0 && position < capacity,
              "position " << position << " of sequence " << seq << " outside capacity " << capacity);
  return static_cast<int64_t>(s.blocks[static_cast<size_t>(position / block_size_)]) * block_size_ +
         position % block_size_;
}

std::vector<BlockCopy> KvCacheManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

}  // namespace moert::attention
