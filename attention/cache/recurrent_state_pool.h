// The slots of the "recurrent" cache kind (docs/gated-deltanet.md "What a sequence carries"):
// a linear-attention layer's state is one fixed-size slot per sequence (conv rows + delta-rule
// state for every such layer of the model), not pages per token. This pool hands out slot ids
// and keeps prefix-cache snapshots; the runner owns the storage and applies the zero fills and
// copies the pool records (take_pending_ops), in order, before a step computes.
//
// Prefix caching (vLLM's "align" mode): the state after a block boundary can be kept as a
// snapshot under the chain hash of the block ending there (attention/cache/block_pool.h
// hash_block_tokens). A new sequence whose prompt hits the KV prefix cache for n blocks resumes
// from the longest boundary i <= n that has a snapshot; it never resumes from a state of
// another length (the hit is cut down to i blocks, or to 0: a zero state).
//
// Invariants:
//   * every live sequence owns exactly one working slot; a slot is a sequence's, a
//     snapshot's, or free, never two of them;
//   * a snapshot's slot is never written after its copy-in: sequences copy out of it;
//   * snapshots are evicted least recently stored or used first, only to free a slot for a
//     sequence or a newer snapshot; a sequence is never evicted;
//   * running out of slots is a value (kNoSlot / false), never a crash; a failed call changes
//     nothing.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "attention/cache/block_pool.h"
#include "attention/cache/kv_cache_manager.h"  // SeqId

namespace moert::attention {

using SlotId = int32_t;
inline constexpr SlotId kNoSlot = -1;

// Storage work for the runner: zero slot `dst` (src == kNoSlot), or copy slot src into dst.
struct SlotOp {
  SlotId src = kNoSlot;
  SlotId dst = kNoSlot;
  bool operator==(const SlotOp&) const = default;
};

struct RecurrentStateStats {
  int64_t snapshot_queries = 0;  // add_sequence calls offered a KV prefix hit of >= 1 block
  int64_t snapshot_hits = 0;     // of those, resumed from a snapshot
  int64_t blocks_cut = 0;        // KV hit blocks given up for want of a snapshot at their end
  int64_t snapshots_evicted = 0;
};

class RecurrentStatePool {
 public:
  // Slots 0 .. num_slots-1; with snapshots off, no state is kept past its sequence.
  RecurrentStatePool(int num_slots, bool enable_snapshots);

  int num_slots() const { return static_cast<int>(owner_.size()); }
  int num_free_slots() const;  // free now, or freeable by evicting snapshots
  int num_snapshots() const { return static_cast<int>(snapshots_.size()); }

  // Registers `seq` (precondition: unknown) whose prompt's first `hit_blocks` blocks the KV
  // cache serves; chain_hashes[i] is the chain hash of block i (size >= hit_blocks). Takes a
  // working slot and starts it from the snapshot at the longest boundary i <= hit_blocks that
  // has one (a copy), or from zeros. Returns i, the blocks the sequence may skip, or -1 when
  // no slot can be had (nothing changed).
  int64_t add_sequence(SeqId seq, std::span<const BlockHash> chain_hashes, int64_t hit_blocks);

  // `child` (precondition: unknown) gets a slot holding a copy of `parent`'s state. False
  // (nothing changed) when no slot can be had.
  bool fork(SeqId parent, SeqId child);

  // Keeps `seq`'s current state, which must be its state after the block whose chain hash is
  // `chain_hash` (the caller calls this when a computed length ends exactly on a block
  // boundary), as a snapshot, evicting the least recently used snapshot when no slot is free.
  // No-op when snapshots are off, the hash has one already, or every slot is a sequence's.
  // Returns whether one was stored.
  bool store_snapshot(SeqId seq, BlockHash chain_hash);
  // The slot a snapshot under `chain_hash` is to be written into by the step about to run (a
  // block boundary inside a chunk: the runner copies the state there after that row), taken
  // as store_snapshot takes one; kNoSlot when none is kept (snapshots off, the hash has one,
  // no slot). Precondition: no sequence resumes from it before that step ran (reserve after
  // the step's admissions).
  SlotId reserve_snapshot(BlockHash chain_hash);

  // The sequence's state restarts from zero (preemption by recompute reuses the slot).
  void reset(SeqId seq);
  // Releases the sequence's slot and forgets it.
  void free_sequence(SeqId seq);

  bool has_sequence(SeqId seq) const { return seq_slot_.count(seq) != 0; }
  SlotId slot(SeqId seq) const;

  // The zero fills and copies recorded since the last call, in order, and clears them.
  std::vector<SlotOp> take_pending_ops();
  const RecurrentStateStats& stats() const { return stats_; }

 private:
  // A free slot, evicting the least recently used snapshot if none is free; kNoSlot if the
  // pool holds only sequences.
  SlotId take_slot();

  static constexpr SeqId kSnapshotOwner = -1;
  static constexpr SeqId kFreeOwner = -2;

  bool enable_snapshots_;
  std::vector<SeqId> owner_;     // [num_slots] the sequence, kSnapshotOwner or kFreeOwner
  std::vector<SlotId> free_;     // free slots, taken from the back (lowest id first)
  std::list<BlockHash> lru_;     // snapshot hashes, least recently stored or used first
  struct Snapshot {
    SlotId slot;
    std::list<BlockHash>::iterator lru_entry;
  };
  std::unordered_map<BlockHash, Snapshot> snapshots_;
  std::unordered_map<SeqId, SlotId> seq_slot_;
  std::vector<SlotOp> pending_;
  RecurrentStateStats stats_;
};

}  // namespace moert::attention
