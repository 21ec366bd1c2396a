// Iteration-level continuous batching (Orca / vLLM v1 style), pure logic over the KV cache
// manager: no model, no kernels. Each step:
//   1. running sequences, oldest first, get their next tokens (decode: 1; a prefill still in
//      progress: as many as the token budget allows, i.e. chunked prefill);
//   2. when the pool cannot hold a running sequence's tokens, the most recently admitted
//      running sequence is preempted by recompute (its blocks freed, its computed count
//      reset, re-queued at the FRONT of the waiting queue) until it fits;
//   3. then waiting sequences are admitted first-come first-served while the budget, the
//      sequence cap and the free blocks allow (none after a preemption in the same step).
//      A waiting sequence whose prompt shares a full block with a block that a running
//      sequence is still computing waits for it (one or a few steps), so that requests with
//      a common prefix hold one copy of it instead of each computing their own.
// Any sequence that fits the pool alone therefore completes.
// Terms: a sequence's tokens = prompt + generated so far; num_computed = tokens whose K/V
// are in the cache; a sequence is "ready to sample" when a step computes its last token.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "attention/cache/block_pool.h"
#include "attention/cache/kv_cache_manager.h"
#include "attention/cache/recurrent_state_pool.h"

namespace moert::engine {

using attention::SeqId;

struct SchedulerConfig {
  int max_batched_tokens = 2048;  // tokens computed per step over all sequences (>= 1)
  int max_seqs = 64;              // running sequences at once (>= 1)
  bool wait_for_shared_prefix = true;  // see step 3 above; meaningful with prefix caching on
};

struct SequenceState {
  SeqId id = 0;
  std::vector<int32_t> tokens;   // prompt + generated
  int64_t num_prompt_tokens = 0;
  int64_t num_computed = 0;      // K/V written for tokens[0, num_computed)
  int64_t num_cached_prompt_tokens = 0;  // served by the prefix cache at the last admission
  int num_preemptions = 0;
  // Samples this sequence will still fork into (n - 1 until its first sampling point): they
  // count toward max_seqs from admission on, so n samples never exceed the limit.
  int pending_forks = 0;
  // Draft tokens proposed after tokens.back(), awaiting verification (speculative
  // decoding). Never part of `tokens`; scheduled only together with the last token.
  std::vector<int32_t> spec_tokens;
};

struct ScheduledChunk {
  SeqId seq = 0;
  int64_t start = 0;       // first position computed this step (== num_computed before the step)
  int64_t num_tokens = 0;  // positions [start, start + num_tokens)
  bool samples = false;    // the chunk ends at the sequence's last known token: sample after it
  // Speculative chunk: the last num_spec_tokens positions hold the sequence's spec_tokens
  // (drafts) instead of known tokens; num_tokens = 1 + num_spec_tokens, samples is true and
  // the step verifies the drafts (logits of all 1 + num_spec_tokens rows).
  int64_t num_spec_tokens = 0;
  // Models with linear-attention layers, prefix caching on: the state after row `first` of
  // the chunk (a block boundary inside it) goes to snapshot slot `second` during the step.
  std::vector<std::pair<int64_t, attention::SlotId>> state_snapshots;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // in batch order
  std::vector<SeqId> preempted;        // preempted during this step
  int64_t num_tokens() const;
};

class Scheduler {
 public:
  // `states` (may be null; must outlive the scheduler): the recurrent-state slots of a model
  // with linear-attention layers, taken and released with the sequences' blocks; a prefix hit
  // is cut down to a block boundary whose state was kept (attention/cache/recurrent_state_pool.h).
  Scheduler(const SchedulerConfig& config, attention::KvCacheManager& kv,
            attention::RecurrentStatePool* states = nullptr);

  // Queues a new sequence (its tokens are the prompt) that will fork into `num_samples`
  // (n >= 1, at most max_seqs). Ids are unique.
  void add_sequence(SeqId id, std::vector<int32_t> prompt, int num_samples = 1);
  // Adds `child` as a running copy of running `parent` (n > 1 sampling): same tokens and
  // computed count, sharing the parent's blocks through the cache manager.
  void fork_sequence(SeqId parent, SeqId child);

  // Plans one step and reserves the KV slots for it. An empty plan with waiting sequences
  // means none fits even alone (reported by can_ever_fit).
  StepPlan schedule();
  // After the step's forward: every chunk's tokens are computed (K/V written) and blocks
  // that became full enter the prefix cache.
  void complete_step(const StepPlan& plan);
  // Appends a sampled token to a running sequence.
  void append_token(SeqId seq, int32_t token);

  // Speculative decoding. Sets the drafts of a running sequence that is ready to decode
  // (num_computed == tokens.size() - 1); an empty vector clears them. The next schedule()
  // gives the sequence 1 + drafts positions (fewer drafts when the token budget or the
  // pool is short; they are dropped before anyone is preempted for them).
  void set_spec_tokens(SeqId seq, std::vector<int32_t> drafts);
  // After a step whose chunk for `seq` was speculative and after the verified tokens
  // (num_accepted drafts, then the final token) were appended with append_token: the
  // K/V of the accepted drafts stays (they were computed from the very tokens now in
  // `tokens`), num_computed advances by num_accepted, blocks wholly past the known tokens
  // (holding only rejected drafts) return to the pool, and full verified blocks enter the
  // prefix cache. Blocks holding unverified drafts were never hashed.
  void accept_spec_tokens(SeqId seq, int64_t num_accepted);
  // Running sequences ready to decode (their K/V covers all but the last token), in
  // admission order: the ones a proposer may draft for.
  std::vector<SeqId> decode_ready_sequences() const;
  // Removes a finished sequence and frees its blocks.
  void finish_sequence(SeqId seq);

  // Whether a sequence of `num_tokens` tokens could be held by the whole pool alone.
  bool can_ever_fit(int64_t num_tokens) const;

  const SequenceState& sequence(SeqId seq) const;
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Allocated slots not holding a token, summed over running sequences (KV waste).
  int64_t unused_reserved_slots() const;

 private:
  void preempt(SeqId seq);
  bool admit(SeqId seq, int64_t budget, StepPlan& plan);
  // Chained hashes of the full blocks of `tokens`.
  std::vector<attention::BlockHash> full_block_hashes(std::span<const int32_t> tokens) const;
  bool waits_for_pending_prefix(const SequenceState& state) const;
  void track_pending_prefix(const SequenceState& state);
  void untrack_pending_prefix(SeqId seq);

  // Keeps the state of a sequence whose computed length just reached a block boundary.
  void store_state_snapshot(const SequenceState& state);
  // Reserves the snapshots of the block boundaries strictly inside the plan's chunks (after
  // every admission of the step, so nobody resumes from one before it is written).
  void reserve_state_snapshots(StepPlan& plan);

  SchedulerConfig config_;
  attention::KvCacheManager& kv_;
  attention::RecurrentStatePool* states_;
  std::unordered_map<SeqId, SequenceState> sequences_;
  std::deque<SeqId> waiting_;
  std::vector<SeqId> running_;  // admission order, oldest first
  int64_t num_preemptions_ = 0;
  // Prompt blocks being computed by running sequences and not yet in the prefix cache:
  // hash -> (sequence, position after the block).
  std::unordered_map<attention::BlockHash, std::pair<SeqId, int64_t>> pending_prefix_;
};

}  // namespace moert::engine
