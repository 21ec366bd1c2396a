// Per-sequence block tables over a BlockPool (spec §4): prefix-cache hits for new
// sequences, on-demand all-or-nothing reservation with copy-on-write, hashing of computed
// full blocks, fork for n > 1 sampling, truncation for speculative-decoding rollback.
//
// Terms: B = block_size tokens per block; a sequence's "table" maps logical block i
// (positions [i*B, (i+1)*B)) to a physical BlockId; its capacity is table.size() * B.
// A model whose layers store different things (full attention and sliding-window layers,
// docs/kv-cache.md) has several cache groups: every sequence has one table per group, all
// on the one pool. A sliding group (window W) frees the blocks no future query can see:
// after commit_computed(n), block i with (i+1)*B <= n - W + 1 becomes the null block in
// that group's table (tables keep their length, so table[i] still means logical block i).
//
// Invariants:
//   * each block in a table holds one reference of that table in the pool (a block
//     shared by k tables, or appearing through k forks, has ref_count >= k);
//   * a sequence's first num_hashed blocks are full and their chain hashes are known
//     (hashes[i] is the hash of block i, parent of block i+1); only these can be cached;
//   * a block that is shared (ref_count > 1) or cached is never written in place:
//     reserve() copies it first (copy-on-write), so cached contents never change;
//   * out of blocks is a value (false), never a crash; a failed call changes nothing;
//   * a null entry (sliding groups) holds no reference and is never written or read;
//   * groups never share a block: the prefix cache keys each group's blocks apart.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "attention/cache/block_pool.h"

namespace moert::attention {

using SeqId = int64_t;

// Copy-on-write work for the KV storage: copy all B slots of block src into block dst
// before this step's writes.
struct BlockCopy {
  BlockId src = kNullBlock;
  BlockId dst = kNullBlock;
  int group = 0;  // the cache group whose layers hold the block
};

// What one cache group keeps: everything (0), or the last `sliding_window` positions.
struct KvGroupLayout {
  int sliding_window = 0;
  bool operator==(const KvGroupLayout&) const = default;
};

struct KvCacheStats {
  int64_t prefix_queries = 0;  // tokens looked up in the prefix cache (caching enabled only)
  int64_t prefix_hits = 0;     // of those, tokens served from the cache
  int peak_used_blocks = 0;    // max of num_used_blocks() seen after add_sequence / reserve
  int64_t cow_copies = 0;      // BlockCopy records produced
};

class KvCacheManager {
 public:
  // num_blocks includes the null block (usable ids 1..num_blocks-1); block_size >= 1;
  // one table per entry of `groups` (default: one group that keeps everything).
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching,
                 std::vector<KvGroupLayout> groups = {KvGroupLayout{}});

  int num_groups() const { return static_cast<int>(groups_.size()); }
  const KvGroupLayout& group_layout(int group) const { return groups_.at(static_cast<size_t>(group)); }
  // The most blocks one sequence of `length` tokens can hold at once over all groups (a
  // bound: sliding groups are counted like full ones, since a single prefill chunk may
  // cover the whole sequence before anything behind its window is freed).
  int64_t max_blocks_held(int64_t length) const;

  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  int num_used_blocks() const { return pool_.num_used_blocks(); }
  const BlockPool& pool() const { return pool_; }

  // Registers a new sequence (precondition: `seq` unknown) whose known tokens are `tokens`
  // (the prompt). Takes the longest chain of leading FULL blocks found in the prefix cache,
  // at most (len - 1) / B blocks so that at least one token is left to compute, as the
  // sequence's first blocks. With several groups the hit length L is the longest one every
  // group can serve: full groups need all L / B blocks cached; a sliding group only those
  // its next query (position L) can see, the others enter its table as null. Returns the
  // tokens covered (a multiple of B); the caller then reserve()s from there. Never
  // allocates, so it cannot run out of blocks.
  int64_t add_sequence(SeqId seq, const std::vector<int32_t>& tokens);

  // Makes the table hold ceil(new_len / B) blocks where positions >= write_from will be
  // written (0 <= write_from <= new_len). Every existing block covering a position in
  // [write_from, new_len) that is shared or cached is replaced by a fresh copy (BlockCopy
  // recorded, this table's reference on the old block dropped). New and copied blocks are
  // allocated in one batch over all groups: copies first (in table order), then appended
  // blocks, group after group. Returns false and changes nothing if the pool has fewer free
  // blocks than that batch needs.
  // Never shrinks the table (see truncate).
  bool reserve(SeqId seq, int64_t write_from, int64_t new_len);

  // K/V of positions [0, num_computed) are written and `tokens` (all tokens so far,
  // size >= num_computed) are known: every block wholly inside [0, num_computed) that is
  // not yet hashed gets its chain hash and enters the prefix cache. Blocks holding any
  // position >= num_computed (e.g. unverified speculative tokens) are never hashed. Then
  // every sliding group frees its blocks wholly before num_computed - W + 1 (no query at a
  // position >= num_computed can see them).
  void commit_computed(SeqId seq, const std::vector<int32_t>& tokens, int64_t num_computed);

  // `child` (precondition: unknown) gets a copy of `parent`'s table; every block gains a
  // reference. Writes by either side then copy shared blocks (see reserve).
  void fork(SeqId parent, SeqId child);

  // Frees, tail first, the blocks wholly past new_len (>= 0); keeps ceil(new_len / B).
  // Blocks that are no longer wholly inside new_len lose their place in the hashed chain.
  // Precondition (checked): new_len is not below a length whose commit freed blocks
  // behind a window (speculative rollback never drops committed tokens).
  void truncate(SeqId seq, int64_t new_len);

  // Frees the sequence's blocks in REVERSE table order (chain tails evicted first) and
  // forgets it.
  void free_sequence(SeqId seq);

  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  const std::vector<BlockId>& block_table(SeqId seq, int group = 0) const;
  // Number of leading blocks of the sequence whose chain hash is known.
  int num_hashed_blocks(SeqId seq) const;
  // KV slot of `position` in `group`: block_table[position / B] * B + position % B.
  int64_t slot(SeqId seq, int64_t position, int group = 0) const;

  // Returns the copies recorded since the last call, in order, and clears them.
  std::vector<BlockCopy> take_pending_copies();
  const KvCacheStats& stats() const { return stats_; }

 private:
  struct SeqState {
    std::vector<std::vector<BlockId>> tables;  // [group] the block tables, equal lengths
    std::vector<BlockHash> hashes;   // chain hashes of the tokens of the first hashes.size() blocks
    int64_t freed_for = 0;           // the num_computed behind whose windows blocks were freed
  };

  SeqState& state(SeqId seq);
  const SeqState& state(SeqId seq) const;
  void note_usage();

  // Group g's key of a chain hash in the pool (group 0: the hash itself).
  BlockHash group_hash(BlockHash hash, int group) const;

  BlockPool pool_;
  int block_size_;
  std::vector<KvGroupLayout> groups_;
  std::unordered_map<SeqId, SeqState> seqs_;
  std::vector<BlockCopy> pending_copies_;
  KvCacheStats stats_;
};

}  // namespace moert::attention
