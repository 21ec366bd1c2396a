// KvCacheManager: block tables, prefix hits, copy-on-write, all-or-nothing reservation,
// speculative-token safety, truncation and slot mapping, with exact ids and queue order.
#include "attention/cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <vector>

namespace moert::attention {
namespace {

using Ids = std::vector<BlockId>;

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Runs a whole prefill: add, reserve the uncovered part, commit everything.
int64_t prefill(KvCacheManager& m, SeqId seq, const std::vector<int32_t>& tokens) {
  const int64_t hit = m.add_sequence(seq, tokens);
  const int64_t len = static_cast<int64_t>(tokens.size());
  EXPECT_TRUE(m.reserve(seq, hit, len));
  m.commit_computed(seq, tokens, len);
  return hit;
}

TEST(KvCacheManager, MissThenHitAndReverseFreeOrder) {
  KvCacheManager m(11, /*block_size=*/4, /*enable_prefix_caching=*/true);
  EXPECT_EQ(m.block_size(), 4);
  EXPECT_EQ(m.num_blocks(), 11);
  const std::vector<int32_t> t = iota_tokens(10);  // 2 full blocks + 2 tokens

  EXPECT_EQ(m.add_sequence(1, t), 0);
  EXPECT_TRUE(m.block_table(1).empty());
  EXPECT_TRUE(m.reserve(1, 0, 10));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2, 3}));
  m.commit_computed(1, t, 10);
  EXPECT_EQ(m.num_hashed_blocks(1), 2);
  EXPECT_TRUE(m.pool().is_cached(1));
  EXPECT_TRUE(m.pool().is_cached(2));
  EXPECT_FALSE(m.pool().is_cached(3));  // partial: only full blocks carry a hash
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);

  m.free_sequence(1);
  EXPECT_FALSE(m.has_sequence(1));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10, 3, 2, 1}));

  // Same prompt again: both full blocks hit and leave the queue; the tail is new.
  EXPECT_EQ(m.add_sequence(2, t), 8);
  EXPECT_EQ(m.block_table(2), (Ids{1, 2}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10, 3}));
  EXPECT_EQ(m.pool().ref_count(1), 1);
  EXPECT_TRUE(m.reserve(2, 8, 10));
  EXPECT_EQ(m.block_table(2), (Ids{1, 2, 4}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{5, 6, 7, 8, 9, 10, 3}));
  EXPECT_TRUE(m.take_pending_copies().empty());

  EXPECT_EQ(m.stats().prefix_queries, 20);
  EXPECT_EQ(m.stats().prefix_hits, 8);
  EXPECT_EQ(m.stats().peak_used_blocks, 3);
  EXPECT_EQ(m.stats().cow_copies, 0);
}

TEST(KvCacheManager, FullHitIsCappedToLeaveOneTokenToCompute) {
  KvCacheManager m(11, 4, true);
  const std::vector<int32_t> t = iota_tokens(8);  // exactly 2 blocks
  prefill(m, 1, t);
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);

  // (8 - 1) / 4 = 1 block may be taken: the last token is recomputed in a new block.
  EXPECT_EQ(m.add_sequence(2, t), 4);
  EXPECT_EQ(m.block_table(2), Ids{1});
  EXPECT_TRUE(m.reserve(2, 4, 8));
  EXPECT_EQ(m.block_table(2), (Ids{1, 3}));
  EXPECT_EQ(m.pool().ref_count(1), 2);
  EXPECT_EQ(m.pool().ref_count(2), 1);

  // One more token: (9 - 1) / 4 = 2 blocks, a full hit of both.
  std::vector<int32_t> t9 = t;
  t9.push_back(100);
  EXPECT_EQ(m.add_sequence(3, t9), 8);
  EXPECT_EQ(m.block_table(3), (Ids{1, 2}));

  // Fewer than B tokens: nothing to look up in blocks.
  EXPECT_EQ(m.add_sequence(4, iota_tokens(4)), 0);
  EXPECT_EQ(m.add_sequence(5, {}), 0);
  EXPECT_EQ(m.stats().prefix_queries, 8 + 8 + 9 + 4 + 0);
  EXPECT_EQ(m.stats().prefix_hits, 0 + 4 + 8);
}

TEST(KvCacheManager, SixteenSequencesShareOneCopyOfA64TokenPrefix) {
  constexpr int kB = 16;
  KvCacheManager m(64, kB, true);
  const std::vector<int32_t> prefix = iota_tokens(64, 1000);
  auto prompt = [&](int seq) {
    std::vector<int32_t> t = prefix;
    for (int i = 0; i < 8; ++i) t.push_back(seq * 100 + i);  // 8 unique tokens
    return t;
  };
  EXPECT_EQ(prefill(m, 0, prompt(0)), 0);
  EXPECT_EQ(m.block_table(0), (Ids{1, 2, 3, 4, 5}));
  for (int seq = 1; seq < 16; ++seq) {
    EXPECT_EQ(prefill(m, seq, prompt(seq)), 64) << "seq " << seq;
    EXPECT_EQ(m.block_table(seq), (Ids{1, 2, 3, 4, static_cast<BlockId>(5 + seq)})) << "seq " << seq;
  }
  EXPECT_EQ(m.num_used_blocks(), 4 + 16);  // one copy of the prefix + one tail block each
  for (BlockId b : {1, 2, 3, 4}) EXPECT_EQ(m.pool().ref_count(b), 16);
  EXPECT_EQ(m.stats().prefix_queries, 16 * 72);
  EXPECT_EQ(m.stats().prefix_hits, 15 * 64);
  EXPECT_EQ(m.stats().peak_used_blocks, 20);

  for (int seq = 0; seq < 16; ++seq) m.free_sequence(seq);
  EXPECT_EQ(m.num_used_blocks(), 0);
  EXPECT_EQ(m.stats().peak_used_blocks, 20);
  // Tails freed per sequence; the shared prefix reaches 0 only with the last sequence,
  // which frees it tail first.
  const Ids order = m.pool().free_queue_order();
  const Ids last_five(order.end() - 5, order.end());
  EXPECT_EQ(last_five, (Ids{20, 4, 3, 2, 1}));
}

TEST(KvCacheManager, ForkThenCopyOnWriteOfSharedPartialLastBlock) {
  KvCacheManager m(11, 4, true);
  const std::vector<int32_t> t = iota_tokens(6);  // block 1 full, block 2 holds 2 tokens
  prefill(m, 1, t);
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));

  m.fork(1, 2);
  EXPECT_EQ(m.block_table(2), (Ids{1, 2}));
  EXPECT_EQ(m.pool().ref_count(1), 2);
  EXPECT_EQ(m.pool().ref_count(2), 2);
  EXPECT_EQ(m.num_used_blocks(), 2);

  // The child samples token 6 into the shared partial block: copy it first.
  EXPECT_TRUE(m.reserve(2, 6, 7));
  EXPECT_EQ(m.block_table(2), (Ids{1, 3}));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  EXPECT_EQ(m.pool().ref_count(1), 2);  // the full prefix block stays shared
  EXPECT_EQ(m.pool().ref_count(2), 1);
  EXPECT_EQ(m.pool().ref_count(3), 1);
  const std::vector<BlockCopy> copies = m.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 2);
  EXPECT_EQ(copies[0].dst, 3);
  EXPECT_TRUE(m.take_pending_copies().empty());
  EXPECT_EQ(m.stats().cow_copies, 1);

  // The parent now owns block 2 alone and writes in place; growth appends.
  EXPECT_TRUE(m.reserve(1, 6, 7));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  EXPECT_TRUE(m.reserve(1, 7, 9));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2, 4}));
  EXPECT_TRUE(m.take_pending_copies().empty());

  // Writing only into fresh blocks of a forked table copies nothing.
  m.fork(1, 3);
  EXPECT_TRUE(m.reserve(3, 12, 13));
  EXPECT_EQ(m.block_table(3), (Ids{1, 2, 4, 5}));
  EXPECT_TRUE(m.take_pending_copies().empty());
  EXPECT_EQ(m.pool().ref_count(4), 2);

  m.free_sequence(2);
  EXPECT_EQ(m.pool().ref_count(1), 2);
  EXPECT_EQ(m.pool().ref_count(3), 0);
}

TEST(KvCacheManager, ReserveIsAllOrNothingCountingCopyOnWriteBlocks) {
  KvCacheManager m(5, 4, true);  // usable 1..4
  const std::vector<int32_t> t = iota_tokens(6);
  prefill(m, 1, t);
  m.fork(1, 2);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4}));

  // 1 copy + ceil(13/4) - 2 = 2 appended = 3 blocks > 2 free: refused, nothing changed.
  EXPECT_FALSE(m.reserve(2, 6, 13));
  EXPECT_EQ(m.block_table(2), (Ids{1, 2}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4}));
  EXPECT_EQ(m.pool().ref_count(2), 2);
  EXPECT_TRUE(m.take_pending_copies().empty());
  EXPECT_EQ(m.stats().cow_copies, 0);
  EXPECT_EQ(m.num_hashed_blocks(2), 1);

  // 1 copy + 1 appended = 2: fits exactly. Copies are allocated first.
  EXPECT_TRUE(m.reserve(2, 6, 12));
  EXPECT_EQ(m.block_table(2), (Ids{1, 3, 4}));
  EXPECT_EQ(m.pool().free_queue_order(), Ids{});
  const std::vector<BlockCopy> copies = m.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 2);
  EXPECT_EQ(copies[0].dst, 3);

  // A new sequence with nothing free: refused, still registered with an empty table.
  EXPECT_EQ(m.add_sequence(3, iota_tokens(3, 50)), 0);
  EXPECT_FALSE(m.reserve(3, 0, 3));
  EXPECT_TRUE(m.block_table(3).empty());
  EXPECT_EQ(m.num_free_blocks(), 0);
  // Growing within existing capacity needs nothing.
  EXPECT_TRUE(m.reserve(2, 11, 12));
  EXPECT_EQ(m.block_table(2), (Ids{1, 3, 4}));
}

TEST(KvCacheManager, CommitNeverHashesBlocksPastNumComputed) {
  KvCacheManager m(11, 4, true);
  const std::vector<int32_t> t = iota_tokens(12);  // 7 verified + 5 speculative tokens
  EXPECT_EQ(m.add_sequence(1, t), 0);
  EXPECT_TRUE(m.reserve(1, 0, 12));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2, 3}));

  m.commit_computed(1, t, 7);
  EXPECT_EQ(m.num_hashed_blocks(1), 1);
  EXPECT_TRUE(m.pool().is_cached(1));
  EXPECT_FALSE(m.pool().is_cached(2));  // holds positions 4..7; 7 is unverified
  EXPECT_FALSE(m.pool().is_cached(3));
  m.commit_computed(1, t, 11);
  EXPECT_EQ(m.num_hashed_blocks(1), 2);
  EXPECT_TRUE(m.pool().is_cached(2));
  EXPECT_FALSE(m.pool().is_cached(3));  // position 11 is still unverified
  m.commit_computed(1, t, 11);          // idempotent
  EXPECT_EQ(m.pool().num_cached_blocks(), 2);

  // Another sequence with the same prompt hits exactly the two committed blocks.
  EXPECT_EQ(m.add_sequence(2, t), 8);
  EXPECT_EQ(m.block_table(2), (Ids{1, 2}));

  // A different continuation of the verified prefix hits only the verified blocks.
  std::vector<int32_t> other = iota_tokens(7);
  for (int i = 0; i < 6; ++i) other.push_back(500 + i);
  EXPECT_EQ(m.add_sequence(3, other), 4);
  EXPECT_EQ(m.block_table(3), Ids{1});
}

TEST(KvCacheManager, TruncateFreesBlocksWhollyPastTheNewLength) {
  KvCacheManager m(11, 4, true);
  const std::vector<int32_t> t = iota_tokens(12);
  EXPECT_EQ(m.add_sequence(1, t), 0);
  EXPECT_TRUE(m.reserve(1, 0, 12));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2, 3}));

  m.truncate(1, 5);  // positions 0..4: keeps 2 blocks
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10, 3}));
  m.truncate(1, 8);  // longer than needed: no-op
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  m.truncate(1, 4);
  EXPECT_EQ(m.block_table(1), Ids{1});
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10, 3, 2}));
  m.truncate(1, 0);
  EXPECT_TRUE(m.block_table(1).empty());
  EXPECT_EQ(m.num_used_blocks(), 0);

  // A shared block is only dereferenced by the truncating table.
  KvCacheManager s(11, 4, true);
  EXPECT_EQ(s.add_sequence(1, t), 0);
  EXPECT_TRUE(s.reserve(1, 0, 12));
  s.fork(1, 2);
  s.truncate(2, 4);
  EXPECT_EQ(s.block_table(2), Ids{1});
  EXPECT_EQ(s.pool().ref_count(3), 1);
  EXPECT_EQ(s.pool().ref_count(1), 2);
  EXPECT_EQ(s.num_free_blocks(), 7);
}

TEST(KvCacheManager, RewritingATruncatedCachedBlockCopiesIt) {
  KvCacheManager m(11, 4, true);
  const std::vector<int32_t> t = iota_tokens(8);
  prefill(m, 1, t);
  EXPECT_EQ(m.num_hashed_blocks(1), 2);
  m.truncate(1, 6);  // block 2 now holds positions 4..5 only; its cached contents must stay
  EXPECT_EQ(m.block_table(1), (Ids{1, 2}));
  EXPECT_EQ(m.num_hashed_blocks(1), 1);

  EXPECT_TRUE(m.reserve(1, 6, 8));  // rewrite positions 6..7
  EXPECT_EQ(m.block_table(1), (Ids{1, 3}));
  const std::vector<BlockCopy> copies = m.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, 2);
  EXPECT_EQ(copies[0].dst, 3);
  // The original went back to the queue and is still a hit for the old contents.
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 10, 2}));
  EXPECT_TRUE(m.pool().is_cached(2));
  std::vector<int32_t> t9 = t;
  t9.push_back(9);
  EXPECT_EQ(m.add_sequence(2, t9), 8);
  EXPECT_EQ(m.block_table(2), (Ids{1, 2}));

  // New contents of seq 1 are hashed into block 3 on commit.
  std::vector<int32_t> rewritten = t;
  rewritten[6] = 60;
  rewritten[7] = 70;
  m.commit_computed(1, rewritten, 8);
  EXPECT_EQ(m.num_hashed_blocks(1), 2);
  EXPECT_TRUE(m.pool().is_cached(3));
}

TEST(KvCacheManager, LruEvictionBreaksThePrefixChainAtTheEvictedBlock) {
  KvCacheManager m(5, 4, true);  // usable 1..4
  const std::vector<int32_t> t = iota_tokens(8);
  prefill(m, 1, t);
  m.free_sequence(1);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4, 2, 1}));

  // Another prompt needs 3 blocks: pops 3, 4 and the chain tail 2 (evicting its hash).
  EXPECT_EQ(m.add_sequence(2, iota_tokens(12, 100)), 0);
  EXPECT_TRUE(m.reserve(2, 0, 12));
  EXPECT_EQ(m.block_table(2), (Ids{3, 4, 2}));
  EXPECT_FALSE(m.pool().is_cached(2));
  EXPECT_TRUE(m.pool().is_cached(1));
  m.free_sequence(2);

  std::vector<int32_t> t9 = t;
  t9.push_back(9);
  EXPECT_EQ(m.add_sequence(3, t9), 4);  // only the chain head survived
  EXPECT_EQ(m.block_table(3), Ids{1});
}

TEST(KvCacheManager, SlotMapping) {
  KvCacheManager m(11, 4, true);
  EXPECT_EQ(m.add_sequence(1, iota_tokens(8)), 0);
  EXPECT_TRUE(m.reserve(1, 0, 8));
  EXPECT_EQ(m.add_sequence(2, iota_tokens(3, 50)), 0);
  EXPECT_TRUE(m.reserve(2, 0, 3));
  EXPECT_TRUE(m.reserve(1, 8, 10));
  EXPECT_EQ(m.block_table(1), (Ids{1, 2, 4}));
  EXPECT_EQ(m.block_table(2), Ids{3});
  EXPECT_EQ(m.slot(1, 0), 4);
  EXPECT_EQ(m.slot(1, 3), 7);
  EXPECT_EQ(m.slot(1, 4), 8);
  EXPECT_EQ(m.slot(1, 8), 16);
  EXPECT_EQ(m.slot(1, 9), 17);
  EXPECT_EQ(m.slot(1, 11), 19);  // reserved capacity, not yet written
  EXPECT_EQ(m.slot(2, 0), 12);
  EXPECT_EQ(m.slot(2, 2), 14);
}

TEST(KvCacheManager, DisabledPrefixCaching) {
  KvCacheManager m(11, 4, /*enable_prefix_caching=*/false);
  const std::vector<int32_t> t = iota_tokens(10);
  EXPECT_EQ(prefill(m, 1, t), 0);
  EXPECT_EQ(m.pool().num_cached_blocks(), 0);
  m.free_sequence(1);
  EXPECT_EQ(prefill(m, 2, t), 0);
  EXPECT_EQ(m.block_table(2), (Ids{4, 5, 6}));  // queue was 4..10, 3, 2, 1
  EXPECT_EQ(m.stats().prefix_queries, 0);
  EXPECT_EQ(m.stats().prefix_hits, 0);
}

// Random operations; after each one the reference counts must equal the number of table
// entries naming each block, and the free queue must hold exactly the unreferenced blocks.
TEST(KvCacheManager, RandomOperationsKeepRefCountsAndFreeQueueConsistent) {
  KvCacheManager m(24, 4, true);
  std::mt19937 rng(7);
  std::map<SeqId, std::vector<int32_t>> tokens;  // all tokens of each live sequence
  SeqId next_seq = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 6);
    if (op == 0 || tokens.empty()) {  // new sequence from a few shared prompt shapes
      std::vector<int32_t> t = iota_tokens(static_cast<int>(rng() % 14), static_cast<int32_t>(rng() % 2) * 100);
      const SeqId seq = next_seq++;
      const int64_t hit = m.add_sequence(seq, t);
      ASSERT_EQ(hit % 4, 0);
      ASSERT_LE(hit, t.empty() ? 0 : static_cast<int64_t>(t.size() - 1));
      if (m.reserve(seq, hit, static_cast<int64_t>(t.size()))) {
        m.commit_computed(seq, t, static_cast<int64_t>(t.size()));
        tokens[seq] = t;
      } else {
        m.free_sequence(seq);
      }
    } else {
      auto it = tokens.begin();
      std::advance(it, rng() % tokens.size());
      const SeqId seq = it->first;
      std::vector<int32_t>& t = it->second;
      const int64_t len = static_cast<int64_t>(t.size());
      if (op == 1) {  // decode one token
        if (m.reserve(seq, len, len + 1)) {
          t.push_back(static_cast<int32_t>(rng() % 3));
          m.commit_computed(seq, t, len + 1);
        }
      } else if (op == 2) {
        m.fork(seq, next_seq);
        tokens[next_seq++] = t;
      } else if (op == 3) {  // spec rollback
        const int64_t new_len = len - static_cast<int64_t>(rng() % 3);
        if (new_len >= 0) {
          m.truncate(seq, new_len);
          t.resize(static_cast<size_t>(new_len));
        }
      } else {
        m.free_sequence(seq);
        tokens.erase(it);
      }
    }
    (void)m.take_pending_copies();
    std::vector<int> refs(static_cast<size_t>(m.num_blocks()), 0);
    for (const auto& [seq, t] : tokens) {
      const auto& table = m.block_table(seq);
      ASSERT_EQ(static_cast<int64_t>(table.size()), (static_cast<int64_t>(t.size()) + 3) / 4);
      for (BlockId b : table) {
        ASSERT_NE(b, kNullBlock);
        ++refs[static_cast<size_t>(b)];
      }
    }
    std::vector<BlockId> expect_free;
    for (BlockId b = 1; b < m.num_blocks(); ++b) {
      ASSERT_EQ(m.pool().ref_count(b), refs[static_cast<size_t>(b)]) << "block " << b << " step " << step;
      if (refs[static_cast<size_t>(b)] == 0) expect_free.push_back(b);
    }
    std::vector<BlockId> queue = m.pool().free_queue_order();
    std::sort(queue.begin(), queue.end());
    ASSERT_EQ(queue, expect_free) << "step " << step;
    ASSERT_EQ(m.num_free_blocks() + m.num_used_blocks(), m.num_blocks() - 1);
  }
}

TEST(KvCacheManagerDeathTest, BrokenPreconditionsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KvCacheManager m(11, 4, true);
  EXPECT_EQ(m.add_sequence(1, iota_tokens(4)), 0);
  EXPECT_TRUE(m.reserve(1, 0, 4));
  MOERT_EXPECT_DEATH(m.slot(1, 4), "outside capacity 4");
  MOERT_EXPECT_DEATH(m.slot(1, -1), "outside capacity");
  MOERT_EXPECT_DEATH(m.add_sequence(1, {}), "already exists");
  MOERT_EXPECT_DEATH(m.block_table(7), "unknown sequence 7");
  MOERT_EXPECT_DEATH(m.fork(1, 1), "already exists");
  MOERT_EXPECT_DEATH((void)m.reserve(1, 5, 4), "write_from = 5");
  MOERT_EXPECT_DEATH(m.commit_computed(1, iota_tokens(8), 8), "num_computed = 8");
}

}  // namespace
}  // namespace moert::attention
