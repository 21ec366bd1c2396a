// BlockPool: exact block ids and exact free-queue (eviction) order after every operation,
// in the style of vLLM tests/v1/core/test_prefix_caching.py.
#include "attention/cache/block_pool.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <vector>

namespace moert::attention {
namespace {

using Ids = std::vector<BlockId>;

// Caches `block` as the first block of a chain holding `tokens`; returns its hash.
BlockHash cache_root_block(BlockPool& pool, BlockId block, const std::vector<int32_t>& tokens) {
  const BlockHash hash = hash_block_tokens(kRootBlockHash, tokens.data(), static_cast<int>(tokens.size()));
  pool.cache_full_block(block, hash, kRootBlockHash, tokens.data(), static_cast<int>(tokens.size()));
  return hash;
}

TEST(BlockPool, InitialStateAndAllocationOrder) {
  BlockPool pool(11, /*enable_prefix_caching=*/true);
  EXPECT_EQ(pool.num_blocks(), 11);
  EXPECT_EQ(pool.num_free_blocks(), 10);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  EXPECT_EQ(pool.free_queue_order(), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));

  EXPECT_EQ(pool.allocate(3), (Ids{1, 2, 3}));
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(pool.num_free_blocks(), 7);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  for (BlockId b : {1, 2, 3}) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.ref_count(4), 0);

  EXPECT_EQ(pool.allocate(0), Ids{});
  EXPECT_EQ(pool.allocate(2), (Ids{4, 5}));
  EXPECT_EQ(pool.free_queue_order(), (Ids{6, 7, 8, 9, 10}));
}

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(5, true);
  EXPECT_EQ(pool.allocate(4), (Ids{1, 2, 3, 4}));
  EXPECT_EQ(pool.allocate(1), std::nullopt);
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
  pool.free_blocks({4, 3, 2, 1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 3, 2, 1}));
  EXPECT_EQ(pool.allocate(4), (Ids{4, 3, 2, 1}));

  BlockPool only_null(1, true);
  EXPECT_EQ(only_null.num_free_blocks(), 0);
  EXPECT_EQ(only_null.allocate(1), std::nullopt);
  EXPECT_EQ(only_null.allocate(0), Ids{});
}

TEST(BlockPool, OutOfBlocksChangesNothing) {
  BlockPool pool(5, true);
  ASSERT_EQ(pool.allocate(2), (Ids{1, 2}));
  const std::vector<int32_t> tokens = {7, 8, 9, 10};
  const BlockHash hash = cache_root_block(pool, 1, tokens);
  pool.free_blocks({1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 4, 1}));

  EXPECT_EQ(pool.allocate(4), std::nullopt);
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 4, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  EXPECT_TRUE(pool.is_cached(1));  // the failed call evicted nothing
  EXPECT_EQ(pool.lookup_cached(hash, kRootBlockHash, tokens.data(), 4), BlockId{1});
}

TEST(BlockPool, FreeAppendsToTailInGivenOrderWhenRefCountReachesZero) {
  BlockPool pool(8, true);
  ASSERT_EQ(pool.allocate(4), (Ids{1, 2, 3, 4}));
  pool.free_blocks({3, 1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{5, 6, 7, 3, 1}));

  pool.add_ref(2);
  EXPECT_EQ(pool.ref_count(2), 2);
  pool.free_blocks({2});
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.free_queue_order(), (Ids{5, 6, 7, 3, 1}));  // still held once
  pool.free_blocks({4, 2});
  EXPECT_EQ(pool.free_queue_order(), (Ids{5, 6, 7, 3, 1, 4, 2}));
  EXPECT_EQ(pool.num_used_blocks(), 0);

  // Reuse follows the queue: the oldest freed first.
  EXPECT_EQ(pool.allocate(5), (Ids{5, 6, 7, 3, 1}));
}

TEST(BlockPool, FreedCachedBlocksStayHittableAndHitsLeaveTheQueue) {
  BlockPool pool(7, true);  // usable 1..6
  ASSERT_EQ(pool.allocate(3), (Ids{1, 2, 3}));
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  const BlockHash ha = cache_root_block(pool, 1, a);
  const BlockHash hb = hash_block_tokens(ha, b.data(), 4);
  pool.cache_full_block(2, hb, ha, b.data(), 4);
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  EXPECT_FALSE(pool.is_cached(3));

  // Freed in reverse (chain tail first); both keep their hashes.
  pool.free_blocks({3, 2, 1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 6, 3, 2, 1}));
  EXPECT_EQ(pool.num_cached_blocks(), 2);

  // A hit on a free cached block in the middle of the queue removes it from there.
  EXPECT_EQ(pool.lookup_cached(hb, ha, b.data(), 4), BlockId{2});
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 6, 3, 1}));
  // A second hit on an in-use block just adds a reference.
  EXPECT_EQ(pool.lookup_cached(hb, ha, b.data(), 4), BlockId{2});
  EXPECT_EQ(pool.ref_count(2), 2);
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 6, 3, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 5);

  // Hit on the head-of-chain block at the queue tail.
  EXPECT_EQ(pool.lookup_cached(ha, kRootBlockHash, a.data(), 4), BlockId{1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 6, 3}));
}

TEST(BlockPool, AllocationEvictsTheLeastRecentlyFreedCachedBlock) {
  BlockPool pool(4, true);  // usable 1..3
  ASSERT_EQ(pool.allocate(3), (Ids{1, 2, 3}));
  const std::vector<int32_t> t1 = {1, 1, 1, 1}, t2 = {2, 2, 2, 2}, t3 = {3, 3, 3, 3};
  const BlockHash h1 = cache_root_block(pool, 1, t1);
  const BlockHash h2 = cache_root_block(pool, 2, t2);
  const BlockHash h3 = cache_root_block(pool, 3, t3);
  pool.free_blocks({2, 3, 1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{2, 3, 1}));
  EXPECT_EQ(pool.num_cached_blocks(), 3);

  // The head (block 2, freed first) is evicted: its hash is gone, a later lookup misses.
  EXPECT_EQ(pool.allocate(1), Ids{2});
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  EXPECT_EQ(pool.lookup_cached(h2, kRootBlockHash, t2.data(), 4), std::nullopt);
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 1}));

  // The survivors still hit.
  EXPECT_EQ(pool.lookup_cached(h1, kRootBlockHash, t1.data(), 4), BlockId{1});
  EXPECT_EQ(pool.free_queue_order(), Ids{3});
  EXPECT_EQ(pool.allocate(1), Ids{3});
  EXPECT_EQ(pool.lookup_cached(h3, kRootBlockHash, t3.data(), 4), std::nullopt);
  EXPECT_EQ(pool.num_cached_blocks(), 1);

  // The evicted block can be cached again under a new hash.
  const BlockHash h2b = cache_root_block(pool, 2, t3);
  EXPECT_EQ(pool.lookup_cached(h2b, kRootBlockHash, t3.data(), 4), BlockId{2});
  EXPECT_EQ(pool.ref_count(2), 2);
}

TEST(BlockPool, HashCollisionNeverGivesAWrongHit) {
  BlockPool pool(4, true);
  ASSERT_EQ(pool.allocate(2), (Ids{1, 2}));
  const std::vector<int32_t> cached = {1, 2, 3, 4}, other = {1, 2, 3, 5};
  constexpr BlockHash kForced = 42;  // both token lists presented under the same hash
  pool.cache_full_block(1, kForced, kRootBlockHash, cached.data(), 4);
  pool.free_blocks({1});
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 1}));

  EXPECT_EQ(pool.lookup_cached(kForced, kRootBlockHash, other.data(), 4), std::nullopt);
  EXPECT_EQ(pool.lookup_cached(kForced, kRootBlockHash + 1, cached.data(), 4), std::nullopt);  // other parent
  EXPECT_EQ(pool.lookup_cached(kForced, kRootBlockHash, cached.data(), 3), std::nullopt);      // other length
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 1}));  // misses touch nothing
  EXPECT_EQ(pool.ref_count(1), 0);

  // A second block under an already cached hash is not cached (first one wins).
  pool.cache_full_block(2, kForced, kRootBlockHash, other.data(), 4);
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  EXPECT_EQ(pool.lookup_cached(kForced, kRootBlockHash, other.data(), 4), std::nullopt);
  EXPECT_EQ(pool.lookup_cached(kForced, kRootBlockHash, cached.data(), 4), BlockId{1});
}

TEST(BlockPool, DisabledPrefixCachingNeverCachesOrHits) {
  BlockPool pool(4, /*enable_prefix_caching=*/false);
  ASSERT_EQ(pool.allocate(1), Ids{1});
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockHash hash = cache_root_block(pool, 1, tokens);
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  pool.free_blocks({1});
  EXPECT_EQ(pool.lookup_cached(hash, kRootBlockHash, tokens.data(), 4), std::nullopt);
  EXPECT_EQ(pool.free_queue_order(), (Ids{2, 3, 1}));
}

TEST(BlockHashTest, ChainedHashDependsOnParentTokensOrderAndLength) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, swapped = {2, 1, 3, 4}, longer = {1, 2, 3, 4, 0};
  const BlockHash h = hash_block_tokens(kRootBlockHash, a.data(), 4);
  EXPECT_EQ(h, hash_block_tokens(kRootBlockHash, a.data(), 4));  // deterministic
  EXPECT_NE(h, hash_block_tokens(kRootBlockHash + 1, a.data(), 4));
  EXPECT_NE(h, hash_block_tokens(kRootBlockHash, swapped.data(), 4));
  EXPECT_NE(h, hash_block_tokens(kRootBlockHash, longer.data(), 5));
  EXPECT_NE(h, hash_block_tokens(h, a.data(), 4));  // same tokens, next position in a chain
}

TEST(BlockPoolDeathTest, BrokenInvariantsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(4, true);
  MOERT_EXPECT_DEATH(pool.free_blocks({1}), "ref_count is 0");
  MOERT_EXPECT_DEATH(pool.free_blocks({kNullBlock}), "not a usable id");
  MOERT_EXPECT_DEATH(pool.add_ref(2), "add_ref of free block 2");
  MOERT_EXPECT_DEATH(pool.allocate(-1), "count = -1");
}

}  // namespace
}  // namespace moert::attention
