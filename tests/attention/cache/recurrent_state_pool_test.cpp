// The recurrent-state slot pool: exact slot ids, snapshot hits cut to the longest boundary
// with a snapshot, eviction order, and the storage work it records.
#include <gtest/gtest.h>

#include <vector>

#include "attention/cache/recurrent_state_pool.h"

namespace moert::attention {
namespace {

using Ops = std::vector<SlotOp>;
const std::vector<BlockHash> kChain = {101, 102, 103, 104};

TEST(RecurrentStatePool, SequencesTakeTheLowestFreeSlotsAndStartFromZero) {
  RecurrentStatePool pool(3, true);
  EXPECT_EQ(pool.add_sequence(7, {}, 0), 0);
  EXPECT_EQ(pool.add_sequence(8, {}, 0), 0);
  EXPECT_EQ(pool.slot(7), 0);
  EXPECT_EQ(pool.slot(8), 1);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{kNoSlot, 0}, {kNoSlot, 1}}));
  EXPECT_TRUE(pool.take_pending_ops().empty());
  pool.free_sequence(7);
  EXPECT_EQ(pool.add_sequence(9, {}, 0), 0);
  EXPECT_EQ(pool.slot(9), 0);  // the freed slot comes back first
  EXPECT_EQ(pool.num_free_slots(), 1);
}

TEST(RecurrentStatePool, OutOfSlotsIsAValueAndChangesNothing) {
  RecurrentStatePool pool(1, true);
  ASSERT_EQ(pool.add_sequence(1, {}, 0), 0);
  pool.take_pending_ops();
  EXPECT_EQ(pool.add_sequence(2, kChain, 2), -1);
  EXPECT_FALSE(pool.has_sequence(2));
  EXPECT_FALSE(pool.fork(1, 3));
  EXPECT_FALSE(pool.has_sequence(3));
  EXPECT_FALSE(pool.store_snapshot(1, 101));
  EXPECT_TRUE(pool.take_pending_ops().empty());
  EXPECT_EQ(pool.stats().snapshot_queries, 0);
}

TEST(RecurrentStatePool, AHitResumesOnlyFromTheLongestBoundaryWithASnapshot) {
  RecurrentStatePool pool(4, true);
  pool.add_sequence(1, {}, 0);
  EXPECT_TRUE(pool.store_snapshot(1, kChain[0]));  // the state after block 0
  EXPECT_TRUE(pool.store_snapshot(1, kChain[2]));  // ... and after block 2 (say a later step)
  EXPECT_FALSE(pool.store_snapshot(1, kChain[2]));  // one snapshot per hash
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{kNoSlot, 0}, {0, 1}, {0, 2}}));
  // The KV cache serves 4 blocks; the state exists after block 2 only: resume 3 blocks.
  EXPECT_EQ(pool.add_sequence(2, kChain, 4), 3);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{2, 3}}));
  // Served 2 blocks: the longest boundary <= 2 with a snapshot is after block 0.
  pool.free_sequence(2);
  EXPECT_EQ(pool.add_sequence(3, kChain, 2), 1);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{1, 3}}));
  // Another chain: no snapshot, a zero state.
  pool.free_sequence(3);
  const std::vector<BlockHash> other = {201, 202};
  EXPECT_EQ(pool.add_sequence(4, other, 2), 0);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{kNoSlot, 3}}));
  EXPECT_EQ(pool.stats().snapshot_queries, 3);
  EXPECT_EQ(pool.stats().snapshot_hits, 2);
  EXPECT_EQ(pool.stats().blocks_cut, 1 + 1 + 2);
}

// A boundary inside a chunk: the slot is reserved before the step (the runner writes it while
// the step passes that row), so nothing is recorded; a later sequence resumes from it.
TEST(RecurrentStatePool, AReservedSnapshotIsWrittenByTheStepAndServesLaterHits) {
  RecurrentStatePool pool(3, true);
  pool.add_sequence(1, {}, 0);
  pool.take_pending_ops();
  EXPECT_EQ(pool.reserve_snapshot(kChain[1]), 1);
  EXPECT_EQ(pool.reserve_snapshot(kChain[1]), kNoSlot);  // one snapshot per hash
  EXPECT_TRUE(pool.take_pending_ops().empty());
  EXPECT_EQ(pool.add_sequence(2, kChain, 3), 2);  // the state after block 1
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{1, 2}}));
  RecurrentStatePool off(3, false);
  EXPECT_EQ(off.reserve_snapshot(kChain[0]), kNoSlot);
}

TEST(RecurrentStatePool, SnapshotsAreEvictedLeastRecentlyUsedFirstAndNeverSequences) {
  RecurrentStatePool pool(4, true);
  pool.add_sequence(1, {}, 0);                // slot 0
  pool.store_snapshot(1, kChain[0]);          // slot 1
  pool.store_snapshot(1, kChain[1]);          // slot 2
  pool.store_snapshot(1, kChain[2]);          // slot 3
  EXPECT_EQ(pool.num_snapshots(), 3);
  pool.take_pending_ops();
  // Using the oldest snapshot makes the middle one the least recently used.
  EXPECT_EQ(pool.add_sequence(2, kChain, 1), 1);  // needs a slot: evicts kChain[1]'s (slot 2)
  EXPECT_EQ(pool.slot(2), 2);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{1, 2}}));
  EXPECT_EQ(pool.stats().snapshots_evicted, 1);
  // A new snapshot evicts the least recently used one (kChain[2], slot 3).
  EXPECT_TRUE(pool.store_snapshot(2, kChain[3]));
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{2, 3}}));
  EXPECT_EQ(pool.add_sequence(3, kChain, 3), 1);  // after block 2: gone; after block 0: kept
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{1, 3}}));
  // A sequence evicts the last snapshot; then the pool holds only sequences and refuses.
  EXPECT_EQ(pool.num_snapshots(), 1);
  EXPECT_EQ(pool.add_sequence(4, {}, 0), 0);  // evicts kChain[0]'s snapshot (slot 1)
  EXPECT_EQ(pool.slot(4), 1);
  EXPECT_EQ(pool.add_sequence(5, {}, 0), -1);
  EXPECT_EQ(pool.num_free_slots(), 0);
}

TEST(RecurrentStatePool, TheLastSnapshotOfAFullPoolIsTakenOverWithoutACopy) {
  RecurrentStatePool pool(2, true);
  pool.add_sequence(1, {}, 0);
  pool.store_snapshot(1, kChain[0]);
  pool.take_pending_ops();
  EXPECT_EQ(pool.add_sequence(2, kChain, 2), 1);
  EXPECT_EQ(pool.slot(2), 1);  // the snapshot's slot, already holding the state
  EXPECT_TRUE(pool.take_pending_ops().empty());
  EXPECT_EQ(pool.num_snapshots(), 0);
}

TEST(RecurrentStatePool, ForkCopiesResetZeroesAndSnapshotsOffKeepNothing) {
  RecurrentStatePool pool(3, false);
  pool.add_sequence(1, {}, 0);
  EXPECT_TRUE(pool.fork(1, 2));
  pool.reset(1);
  EXPECT_FALSE(pool.store_snapshot(2, kChain[0]));
  EXPECT_EQ(pool.add_sequence(3, kChain, 2), 0);
  EXPECT_EQ(pool.take_pending_ops(), (Ops{{kNoSlot, 0}, {0, 1}, {kNoSlot, 0}, {kNoSlot, 2}}));
}

}  // namespace
}  // namespace moert::attention
