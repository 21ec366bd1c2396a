#include "attention/cache/recurrent_state_pool.h"

#include "core/check.h"

namespace moert::attention {

RecurrentStatePool::RecurrentStatePool(int num_slots, bool enable_snapshots)
    : enable_snapshots_(enable_snapshots), owner_(static_cast<size_t>(num_slots), kFreeOwner) {
  MOERT_CHECK(num_slots >= 0, "recurrent state pool of " << num_slots << " slots");
  for (SlotId s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

int RecurrentStatePool::num_free_slots() const { return static_cast<int>(free_.size() + snapshots_.size()); }

SlotId RecurrentStatePool::take_slot() {
  if (free_.empty()) {
    if (lru_.empty()) return kNoSlot;
    const auto oldest = snapshots_.find(lru_.front());
    free_.push_back(oldest->second.slot);
    owner_[static_cast<size_t>(oldest->second.slot)] = kFreeOwner;
    snapshots_.erase(oldest);
    lru_.pop_front();
    ++stats_.snapshots_evicted;
  }
  const SlotId slot = free_.back();
  free_.pop_back();
  return slot;
}

int64_t RecurrentStatePool::add_sequence(SeqId seq, std::span<const BlockHash> chain_hashes, int64_t hit_blocks) {
  MOERT_CHECK(!has_sequence(seq), "sequence " << seq << " already holds a recurrent state slot");
  MOERT_CHECK(hit_blocks >= 0 && hit_blocks <= static_cast<int64_t>(chain_hashes.size()),
              "hit of " << hit_blocks << " blocks with " << chain_hashes.size() << " chain hashes");
  // The longest boundary with a snapshot, found before taking a slot: taking one may evict.
  int64_t resumed = 0;
  if (enable_snapshots_) {
    for (resumed = hit_blocks; resumed > 0; --resumed) {
      if (snapshots_.count(chain_hashes[static_cast<size_t>(resumed - 1)]) != 0) break;
    }
  }
  SlotId source = kNoSlot;
  if (resumed > 0) {
    Snapshot& snapshot = snapshots_.at(chain_hashes[static_cast<size_t>(resumed - 1)]);
    lru_.splice(lru_.end(), lru_, snapshot.lru_entry);  // used: evicted last
    source = snapshot.slot;
  }
  SlotId slot = kNoSlot;
  if (source != kNoSlot && free_.empty() && lru_.size() == 1) {
    // take_slot would evict the source itself (the last snapshot of a full pool): the sequence
    // takes its slot over instead (the state is already there; the snapshot is gone).
    snapshots_.erase(lru_.front());
    lru_.clear();
    ++stats_.snapshots_evicted;
    slot = source;
  } else {
    slot = take_slot();
    if (slot == kNoSlot) return -1;
    pending_.push_back({source, slot});
  }
  if (hit_blocks > 0) {
    ++stats_.snapshot_queries;
    if (resumed > 0) ++stats_.snapshot_hits;
    stats_.blocks_cut += hit_blocks - resumed;
  }
  owner_[static_cast<size_t>(slot)] = seq;
  seq_slot_[seq] = slot;
  return resumed;
}

bool RecurrentStatePool::fork(SeqId parent, SeqId child) {
  MOERT_CHECK(!has_sequence(child), "sequence " << child << " already holds a recurrent state slot");
  const SlotId from = slot(parent);
  const SlotId to = take_slot();
  if (to == kNoSlot) return false;
  owner_[static_cast<size_t>(to)] = child;
  seq_slot_[child] = to;
  pending_.push_back({from, to});
  return true;
}

bool RecurrentStatePool::store_snapshot(SeqId seq, BlockHash chain_hash) {
  const SlotId from = slot(seq);
  const SlotId to = reserve_snapshot(chain_hash);
  if (to == kNoSlot) return false;
  pending_.push_back({from, to});
  return true;
}

SlotId RecurrentStatePool::reserve_snapshot(BlockHash chain_hash) {
  if (!enable_snapshots_ || snapshots_.count(chain_hash) != 0) return kNoSlot;
  const SlotId to = take_slot();
  if (to == kNoSlot) return kNoSlot;
  owner_[static_cast<size_t>(to)] = kSnapshotOwner;
  lru_.push_back(chain_hash);
  snapshots_[chain_hash] = Snapshot{to, std::prev(lru_.end())};
  return to;
}

void RecurrentStatePool::reset(SeqId seq) { pending_.push_back({kNoSlot, slot(seq)}); }

void RecurrentStatePool::free_sequence(SeqId seq) {
  const SlotId s = slot(seq);
  owner_[static_cast<size_t>(s)] = kFreeOwner;
  free_.push_back(s);
  seq_slot_.erase(seq);
}

SlotId RecurrentStatePool::slot(SeqId seq) const {
  const auto found = seq_slot_.find(seq);
  MOERT_CHECK(found != seq_slot_.end(), "sequence " << seq << " holds no recurrent state slot");
  return found->second;
}

std::vector<SlotOp> RecurrentStatePool::take_pending_ops() {
  std::vector<SlotOp> ops;
  ops.swap(pending_);
  return ops;
}

}  // namespace moert::attention
