// KvCacheManager with several cache groups on one pool (docs/kv-cache.md): a full group and
// a sliding-window group, as gpt-oss has. All-or-nothing reservation across groups, blocks
// behind the window freed (the sliding table stays bounded while the full one grows),
// copy-on-write per group, prefix hits that need the window's blocks, groups never sharing
// a cached block, truncation limits.
#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <numeric>
#include <vector>

#include "attention/cache/kv_cache_manager.h"

namespace moert::attention {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

int live_blocks(const std::vector<BlockId>& table) {
  int live = 0;
  for (BlockId b : table) live += b != kNullBlock ? 1 : 0;
  return live;
}

constexpr int kBlock = 4;
constexpr int kWindow = 6;  // a query sees itself and the 5 positions before it
const std::vector<KvGroupLayout> kFullAndSliding = {{0}, {kWindow}};

// Decoding far past the window: the sliding group's live blocks stay within the window
// (ceil((W - 1) / B) + 1 blocks plus the one being written), the full group holds them all,
// and the pool gets the freed blocks back.
TEST(KvCacheGroups, SlidingGroupStaysBoundedWhileTheFullGroupGrows) {
  KvCacheManager m(64, kBlock, true, kFullAndSliding);
  ASSERT_EQ(m.num_groups(), 2);
  const std::vector<int32_t> tokens = iota_tokens(100);
  EXPECT_EQ(m.add_sequence(1, {tokens.begin(), tokens.begin() + 5}), 0);
  int max_sliding = 0;
  for (int64_t len = 1; len <= 100; ++len) {  // one token per step, as decode does
    ASSERT_TRUE(m.reserve(1, len - 1, len)) << len;
    m.commit_computed(1, tokens, len);
    const int sliding = live_blocks(m.block_table(1, 1));
    max_sliding = std::max(max_sliding, sliding);
    ASSERT_LE(sliding, (kWindow - 1 + kBlock - 1) / kBlock + 1) << len;
    ASSERT_EQ(live_blocks(m.block_table(1, 0)), (len + kBlock - 1) / kBlock) << len;
    ASSERT_EQ(m.block_table(1, 1).size(), m.block_table(1, 0).size());
    // What the next query (position len) sees is still there.
    for (int64_t p = std::max<int64_t>(0, len - kWindow + 1); p < len; ++p) {
      ASSERT_NE(m.block_table(1, 1)[static_cast<size_t>(p / kBlock)], kNullBlock) << p;
    }
  }
  EXPECT_GE(max_sliding, 2);
  EXPECT_EQ(m.num_used_blocks(), 25 + live_blocks(m.block_table(1, 1)));
  m.free_sequence(1);
  EXPECT_EQ(m.num_used_blocks(), 0);
}

// reserve needs blocks in every group at once; short of that it changes nothing.
TEST(KvCacheGroups, ReserveIsAllOrNothingAcrossGroups) {
  KvCacheManager m(6, kBlock, false, kFullAndSliding);  // 5 usable blocks
  m.add_sequence(1, iota_tokens(12));
  EXPECT_FALSE(m.reserve(1, 0, 12));  // 3 blocks x 2 groups = 6 > 5
  EXPECT_TRUE(m.block_table(1, 0).empty());
  EXPECT_TRUE(m.block_table(1, 1).empty());
  EXPECT_EQ(m.num_free_blocks(), 5);
  EXPECT_TRUE(m.reserve(1, 0, 8));
  EXPECT_EQ(m.num_free_blocks(), 1);
  EXPECT_EQ(m.max_blocks_held(12), 6);
}

// A fork shares both groups' blocks; the child's write copies the shared block in each
// group, and each copy names its group.
TEST(KvCacheGroups, CopyOnWriteRecordsTheGroup) {
  KvCacheManager m(32, kBlock, false, kFullAndSliding);
  const std::vector<int32_t> tokens = iota_tokens(6);
  m.add_sequence(1, tokens);
  ASSERT_TRUE(m.reserve(1, 0, 6));
  m.commit_computed(1, tokens, 6);
  m.take_pending_copies();
  m.fork(1, 2);
  ASSERT_TRUE(m.reserve(2, 6, 7));
  const std::vector<BlockCopy> copies = m.take_pending_copies();
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].group, 0);
  EXPECT_EQ(copies[1].group, 1);
  EXPECT_EQ(copies[0].src, m.block_table(1, 0)[1]);
  EXPECT_EQ(copies[1].src, m.block_table(1, 1)[1]);
  EXPECT_EQ(copies[1].dst, m.block_table(2, 1)[1]);
}

// Prefix hits with a window: a second request with the same prompt reuses the full group's
// blocks and the sliding group's blocks its first query can see (earlier ones enter as
// null); once those window blocks are evicted the hit shrinks to what is still there.
TEST(KvCacheGroups, PrefixHitsNeedTheWindowBlocks) {
  KvCacheManager m(40, kBlock, true, kFullAndSliding);
  const std::vector<int32_t> prompt = iota_tokens(21, 100);  // 5 full blocks + 1 token
  m.add_sequence(1, prompt);
  ASSERT_TRUE(m.reserve(1, 0, 21));
  m.commit_computed(1, prompt, 21);
  // Positions < 21 - 6 + 1 = 16 are dead for sequence 1: blocks 0..3 freed (still cached).
  EXPECT_EQ(live_blocks(m.block_table(1, 1)), 2);
  EXPECT_EQ(m.add_sequence(2, prompt), 20);
  const std::vector<BlockId>& sliding = m.block_table(2, 1);
  ASSERT_EQ(sliding.size(), 5u);
  // The next query is at 20: it sees 15..19, blocks 3 and 4; blocks 0..2 are null.
  EXPECT_EQ(sliding[0], kNullBlock);
  EXPECT_EQ(sliding[2], kNullBlock);
  EXPECT_NE(sliding[3], kNullBlock);
  EXPECT_EQ(m.block_table(2, 0), (std::vector<BlockId>(m.block_table(1, 0).begin(), m.block_table(1, 0).begin() + 5)));
  // Groups never share a block.
  for (BlockId b : m.block_table(2, 0)) {
    for (BlockId s : sliding) EXPECT_NE(b, s);
  }
  m.free_sequence(2);
  m.free_sequence(1);
  // Evict everything free: a sequence that fills the pool takes every free block.
  const int free_now = m.num_free_blocks();
  m.add_sequence(3, iota_tokens(4, 5000));
  ASSERT_TRUE(m.reserve(3, 0, free_now / 2 * kBlock));
  m.free_sequence(3);
  EXPECT_EQ(m.add_sequence(4, prompt), 0);  // nothing of the prompt survived eviction
}

// A window block once freed cannot be brought back by truncating below the length that
// freed it; truncating within the live part works and keeps null entries null.
TEST(KvCacheGroups, TruncationRespectsFreedWindows) {
  KvCacheManager m(64, kBlock, false, kFullAndSliding);
  const std::vector<int32_t> tokens = iota_tokens(30);
  m.add_sequence(1, tokens);
  ASSERT_TRUE(m.reserve(1, 0, 20));
  m.commit_computed(1, tokens, 20);
  ASSERT_TRUE(m.reserve(1, 20, 24));  // speculative room
  m.truncate(1, 21);
  EXPECT_EQ(m.block_table(1, 1).size(), 6u);
  EXPECT_EQ(m.block_table(1, 1)[0], kNullBlock);
  MOERT_EXPECT_DEATH(m.truncate(1, 12), "window blocks are already freed");
  m.free_sequence(1);
  EXPECT_EQ(m.num_used_blocks(), 0);
}

}  // namespace
}  // namespace moert::attention
