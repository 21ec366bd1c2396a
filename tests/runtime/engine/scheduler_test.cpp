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
