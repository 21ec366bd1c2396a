// The scheduler's plans, exactly: chunked prefill under the token budget, the sequence
// cap, FCFS admission limited by free blocks, and preemption by recompute.
#include "runtime/engine/scheduler.h"

#include <gtest/gtest.h>

#include <tuple>

namespace moert::engine {
namespace {

std::vector<int32_t> tokens(int count, int first = 1) {
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

// (seq, start, num_tokens, samples) per chunk.
using ChunkTuple = std::tuple<SeqId, int64_t, int64_t, bool>;
std::vector<ChunkTuple> chunks_of(const StepPlan& plan) {
  std::vector<ChunkTuple> out;
  for (const ScheduledChunk& c : plan.chunks) out.emplace_back(c.seq, c.start, c.num_tokens, c.samples);
  return out;
}

// Runs the plan as the engine would: compute, then append a token to sampling sequences.
void complete(Scheduler& scheduler, const StepPlan& plan, int32_t token = 99) {
  scheduler.complete_step(plan);
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.samples) scheduler.append_token(c.seq, token);
  }
}

TEST(Scheduler, ChunkedPrefillUnderTheTokenBudget) {
  attention::KvCacheManager kv(64, 4, false);
  Scheduler scheduler({/*max_batched_tokens=*/8, /*max_seqs=*/4}, kv);
  scheduler.add_sequence(1, tokens(10));
  scheduler.add_sequence(2, tokens(3, 50));
  StepPlan step1 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step1), (std::vector<ChunkTuple>{{1, 0, 8, false}}));
  complete(scheduler, step1);
  StepPlan step2 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step2), (std::vector<ChunkTuple>{{1, 8, 2, true}, {2, 0, 3, true}}));
  complete(scheduler, step2);
  StepPlan step3 = scheduler.schedule();  // both decode
  EXPECT_EQ(chunks_of(step3), (std::vector<ChunkTuple>{{1, 10, 1, true}, {2, 3, 1, true}}));
  EXPECT_EQ(scheduler.sequence(1).tokens.size(), 11u);
}

TEST(Scheduler, SequenceCapAndFcfsAdmission) {
  attention::KvCacheManager kv(64, 4, false);
  Scheduler scheduler({100, /*max_seqs=*/2}, kv);
  for (SeqId id = 1; id <= 3; ++id) scheduler.add_sequence(id, tokens(2, static_cast<int>(id * 10)));
  StepPlan step = scheduler.schedule();
  EXPECT_EQ(chunks_of(step), (std::vector<ChunkTuple>{{1, 0, 2, true}, {2, 0, 2, true}}));
  EXPECT_EQ(scheduler.num_waiting(), 1u);
  complete(scheduler, step);
  scheduler.finish_sequence(1);
  StepPlan next = scheduler.schedule();
  EXPECT_EQ(chunks_of(next), (std::vector<ChunkTuple>{{2, 2, 1, true}, {3, 0, 2, true}}));
}

TEST(Scheduler, PreemptsTheNewestByRecomputeAndRequeuesItFirst) {
  // 4 usable blocks of 4 tokens = 16 slots.
  attention::KvCacheManager kv(5, 4, false);
  Scheduler scheduler({100, 8}, kv);
  scheduler.add_sequence(1, tokens(8));
  scheduler.add_sequence(2, tokens(8, 40));
  StepPlan step1 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step1), (std::vector<ChunkTuple>{{1, 0, 8, true}, {2, 0, 8, true}}));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  complete(scheduler, step1);
  // Sequence 1 needs a fifth block for position 8: the newest (2) is preempted.
  StepPlan step2 = scheduler.schedule();
  EXPECT_EQ(step2.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(chunks_of(step2), (std::vector<ChunkTuple>{{1, 8, 1, true}}));
  EXPECT_EQ(scheduler.sequence(2).num_computed, 0);
  EXPECT_EQ(scheduler.sequence(2).tokens.size(), 9u);  // its generated token is kept and recomputed
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  complete(scheduler, step2);
  scheduler.finish_sequence(1);
  // Sequence 2 comes back first and recomputes prompt + generated token.
  StepPlan step3 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step3), (std::vector<ChunkTuple>{{2, 0, 9, true}}));
}

TEST(Scheduler, WaitsForASharedPrefixBeingComputed) {
  attention::KvCacheManager kv(64, 4, true);
  Scheduler scheduler({100, 8}, kv);
  scheduler.add_sequence(1, tokens(9));
  scheduler.add_sequence(2, tokens(10));  // shares the first 2 full blocks with sequence 1
  StepPlan step1 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step1), (std::vector<ChunkTuple>{{1, 0, 9, true}}));
  complete(scheduler, step1);
  StepPlan step2 = scheduler.schedule();
  EXPECT_EQ(chunks_of(step2), (std::vector<ChunkTuple>{{1, 9, 1, true}, {2, 8, 2, true}}));
  EXPECT_EQ(scheduler.sequence(2).num_cached_prompt_tokens, 8);
}

TEST(Scheduler, FitsAloneRule) {
  attention::KvCacheManager kv(5, 4, false);
  Scheduler scheduler({100, 8}, kv);
  EXPECT_TRUE(scheduler.can_ever_fit(16));
  EXPECT_FALSE(scheduler.can_ever_fit(17));
}

}  // namespace
}  // namespace moert::engine

// Speculative chunks: drafts ride with the last token, are trimmed by the budget, never
// hashed; accept_spec_tokens keeps the accepted drafts' K/V and returns blocks that hold
// only rejected drafts.
namespace moert::engine {
namespace {

TEST(SchedulerSpec, DraftsRideWithTheLastTokenAndAreRolledBack) {
  attention::KvCacheManager kv(16, 4, /*enable_prefix_caching=*/true);
  Scheduler scheduler({/*max_batched_tokens=*/16, /*max_seqs=*/4}, kv);
  scheduler.add_sequence(1, tokens(6));  // 6 prompt tokens: blocks [0..3], [4..5]
  complete(scheduler, scheduler.schedule(), 7);  // prefill, then token 7 at position 6
  ASSERT_EQ(scheduler.decode_ready_sequences(), std::vector<SeqId>{1});
  scheduler.set_spec_tokens(1, {8, 9, 10, 11, 12});  // positions 7..11: needs a third block
  StepPlan step = scheduler.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(chunks_of(step), (std::vector<ChunkTuple>{{1, 6, 6, true}}));
  EXPECT_EQ(step.chunks[0].num_spec_tokens, 5);
  EXPECT_EQ(kv.block_table(1).size(), 3u);  // 12 positions
  scheduler.complete_step(step);
  // Only the known token counts as computed; block 1 ([4..7]) holds draft 8, not hashed.
  EXPECT_EQ(scheduler.sequence(1).num_computed, 7);
  EXPECT_EQ(kv.num_hashed_blocks(1), 1);
  // The target accepted 8 and 9 (positions 7, 8) and emitted 40 at position 9.
  for (int32_t token : {8, 9, 40}) scheduler.append_token(1, token);
  scheduler.accept_spec_tokens(1, 2);
  EXPECT_EQ(scheduler.sequence(1).num_computed, 9);
  EXPECT_TRUE(scheduler.sequence(1).spec_tokens.empty());
  EXPECT_EQ(kv.block_table(1).size(), 3u);  // 10 known tokens still need 3 blocks
  EXPECT_EQ(kv.num_hashed_blocks(1), 2);    // [4..7] = 5, 6, 7, 8 is verified now
  // Next pass: everything rejected at position 10; the tail block shrinks away below.
  scheduler.set_spec_tokens(1, {1, 2, 3, 4, 5, 6});  // positions 10..15: 4 blocks
  step = scheduler.schedule();
  EXPECT_EQ(chunks_of(step), (std::vector<ChunkTuple>{{1, 9, 7, true}}));
  EXPECT_EQ(kv.block_table(1).size(), 4u);
  const int free_before = kv.num_free_blocks();
  scheduler.complete_step(step);
  scheduler.append_token(1, 41);
  scheduler.accept_spec_tokens(1, 0);
  EXPECT_EQ(scheduler.sequence(1).num_computed, 10);
  EXPECT_EQ(kv.block_table(1).size(), 3u);  // 11 known tokens
  EXPECT_EQ(kv.num_free_blocks(), free_before + 1);
}

TEST(SchedulerSpec, BudgetTrimsDraftsAndPrefillsStillRun) {
  attention::KvCacheManager kv(64, 4, false);
  Scheduler scheduler({/*max_batched_tokens=*/5, /*max_seqs=*/4}, kv);
  scheduler.add_sequence(1, tokens(3));
  complete(scheduler, scheduler.schedule(), 50);
  scheduler.add_sequence(2, tokens(8, 20));
  scheduler.set_spec_tokens(1, {1, 2, 3, 4, 5, 6, 7});
  const StepPlan step = scheduler.schedule();
  // 1 + 4 drafts fill the budget of 5; the new prompt waits.
  EXPECT_EQ(chunks_of(step), (std::vector<ChunkTuple>{{1, 3, 5, true}}));
  EXPECT_EQ(step.chunks[0].num_spec_tokens, 4);
  EXPECT_EQ(scheduler.sequence(1).spec_tokens, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(SchedulerSpec, DraftsAreDroppedBeforeAnyoneIsPreempted) {
  attention::KvCacheManager kv(4, 4, false);  // 3 usable blocks
  Scheduler scheduler({100, 4}, kv);
  scheduler.add_sequence(1, tokens(4));
  scheduler.add_sequence(2, tokens(4, 30));
  complete(scheduler, scheduler.schedule(), 60);  // each holds 1 block + needs a 2nd for its token
  scheduler.set_spec_tokens(1, {1, 2, 3, 4, 5});  // positions 5..9 would need 2 more blocks
  const StepPlan step = scheduler.schedule();
  EXPECT_EQ(chunks_of(step), (std::vector<ChunkTuple>{{1, 4, 1, true}}));
  EXPECT_EQ(step.chunks[0].num_spec_tokens, 0);
  EXPECT_TRUE(step.preempted.empty() || step.preempted == std::vector<SeqId>{2});
  EXPECT_TRUE(scheduler.sequence(1).spec_tokens.empty());
}

}  // namespace
}  // namespace moert::engine
