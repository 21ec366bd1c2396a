#include "runtime/engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace moert::engine {

int64_t StepPlan::num_tokens() const {
  int64_t total = 0;
  for (const ScheduledChunk& chunk : chunks) total += chunk.num_tokens;
  return total;
}

Scheduler::Scheduler(const SchedulerConfig& config, attention::KvCacheManager& kv,
                     attention::RecurrentStatePool* states)
    : config_(config), kv_(kv), states_(states) {
  MOERT_CHECK(config.max_batched_tokens >= 1 && config.max_seqs >= 1, "scheduler limits must be >= 1");
}

void Scheduler::add_sequence(SeqId id, std::vector<int32_t> prompt, int num_samples) {
  MOERT_CHECK(num_samples >= 1 && num_samples <= config_.max_seqs,
              "sequence " << id << " with " << num_samples << " samples exceeds max_seqs = " << config_.max_seqs);
  MOERT_CHECK(!prompt.empty(), "sequence " << id << " has an empty prompt");
  MOERT_CHECK(sequences_.count(id) == 0, "sequence id " << id << " is already in use");
  SequenceState state;
  state.id = id;
  state.num_prompt_tokens = static_cast<int64_t>(prompt.size());
  state.tokens = std::move(prompt);
  state.pending_forks = num_samples - 1;
  sequences_.emplace(id, std::move(state));
  waiting_.push_back(id);
}

void Scheduler::fork_sequence(SeqId parent, SeqId child) {
  MOERT_CHECK(std::find(running_.begin(), running_.end(), parent) != running_.end(),
              "fork of sequence " << parent << " that is not running");
  MOERT_CHECK(sequences_.count(child) == 0, "sequence id " << child << " is already in use");
  SequenceState& parent_state = sequences_.at(parent);
  MOERT_CHECK(parent_state.pending_forks > 0, "sequence " << parent << " has no sample left to fork");
  --parent_state.pending_forks;
  SequenceState state = parent_state;
  state.id = child;
  state.pending_forks = 0;
  sequences_.emplace(child, std::move(state));
  kv_.fork(parent, child);
  // Admission kept a slot for every sample (admit).
  if (states_ != nullptr) MOERT_CHECK(states_->fork(parent, child), "no recurrent-state slot for sample " << child);
  running_.push_back(child);
}

bool Scheduler::can_ever_fit(int64_t num_tokens) const {
  return kv_.max_blocks_held(num_tokens) <= kv_.num_blocks() - 1;  // block 0 is the reserved null block
}

std::vector<attention::BlockHash> Scheduler::full_block_hashes(std::span<const int32_t> tokens) const {
  std::vector<attention::BlockHash> hashes;
  attention::BlockHash parent = attention::kRootBlockHash;
  const int block_size = kv_.block_size();
  for (size_t end = static_cast<size_t>(block_size); end <= tokens.size(); end += static_cast<size_t>(block_size)) {
    parent = attention::hash_block_tokens(parent, tokens.data() + end - block_size, block_size);
    hashes.push_back(parent);
  }
  return hashes;
}

bool Scheduler::waits_for_pending_prefix(const SequenceState& state) const {
  if (pending_prefix_.empty()) return false;
  for (attention::BlockHash hash : full_block_hashes(state.tokens)) {
    if (pending_prefix_.count(hash)) return true;
  }
  return false;
}

void Scheduler::track_pending_prefix(const SequenceState& state) {
  const std::vector<attention::BlockHash> hashes = full_block_hashes(state.tokens);
  for (size_t i = 0; i < hashes.size(); ++i) {
    const int64_t block_end = static_cast<int64_t>(i + 1) * kv_.block_size();
    if (block_end > state.num_computed) pending_prefix_.emplace(hashes[i], std::pair{state.id, block_end});
  }
}

void Scheduler::untrack_pending_prefix(SeqId seq) {
  for (auto it = pending_prefix_.begin(); it != pending_prefix_.end();) {
    it = it->second.first == seq ? pending_prefix_.erase(it) : std::next(it);
  }
}

void Scheduler::preempt(SeqId seq) {
  SequenceState& state = sequences_.at(seq);
  untrack_pending_prefix(seq);
  kv_.free_sequence(seq);
  if (states_ != nullptr) states_->free_sequence(seq);  // recomputed from a fresh state
  state.num_computed = 0;
  state.spec_tokens.clear();
  ++state.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
}

// Admits the head of the waiting queue if its first chunk fits; all-or-nothing.
bool Scheduler::admit(SeqId seq, int64_t budget, StepPlan& plan) {
  SequenceState& state = sequences_.at(seq);
  // A slot for the sequence and each sample it will fork into.
  if (states_ != nullptr && states_->num_free_slots() < 1 + state.pending_forks) return false;
  state.num_cached_prompt_tokens = kv_.add_sequence(seq, state.tokens);
  if (states_ != nullptr) {
    // The hit is cut down to the longest boundary whose state was kept (never a state of
    // another length).
    const int64_t hit_blocks = state.num_cached_prompt_tokens / kv_.block_size();
    const int64_t kept = states_->add_sequence(seq, full_block_hashes(state.tokens), hit_blocks);
    MOERT_CHECK(kept >= 0, "no recurrent-state slot for sequence " << seq << " though one was free");
    if (kept < hit_blocks) {
      state.num_cached_prompt_tokens = kept * kv_.block_size();
      kv_.truncate(seq, state.num_cached_prompt_tokens);
    }
  }
  state.num_computed = state.num_cached_prompt_tokens;
  const int64_t remaining = static_cast<int64_t>(state.tokens.size()) - state.num_computed;
  const int64_t num_new = std::min(remaining, budget);
  if (!kv_.reserve(seq, state.num_computed, state.num_computed + num_new)) {
    kv_.free_sequence(seq);
    if (states_ != nullptr) states_->free_sequence(seq);
    state.num_computed = 0;
    return false;
  }
  running_.push_back(seq);
  if (config_.wait_for_shared_prefix) track_pending_prefix(state);
  plan.chunks.push_back({seq, state.num_computed, num_new, num_new == remaining});
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.max_batched_tokens;
  // 1. Running sequences, oldest first. Preemption victims come from the back.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const SeqId seq = running_[i];
    SequenceState& state = sequences_.at(seq);
    const int64_t remaining = static_cast<int64_t>(state.tokens.size()) - state.num_computed;
    const int64_t num_new = std::min(remaining, budget);
    if (num_new == 0) {
      ++i;
      continue;
    }
    // Drafts ride along with the last token when the budget and the free blocks allow.
    int64_t num_spec = remaining == 1 ? std::min<int64_t>(static_cast<int64_t>(state.spec_tokens.size()), budget - 1) : 0;
    if (num_spec > 0 && !kv_.reserve(seq, state.num_computed, state.num_computed + 1 + num_spec)) num_spec = 0;
    state.spec_tokens.resize(static_cast<size_t>(num_spec));
    if (num_spec > 0) {
      plan.chunks.push_back({seq, state.num_computed, 1 + num_spec, true, num_spec});
      budget -= 1 + num_spec;
      ++i;
      continue;
    }
    bool scheduled = false;
    while (true) {
      if (kv_.reserve(seq, state.num_computed, state.num_computed + num_new)) {
        scheduled = true;
        break;
      }
      const SeqId victim = running_.back();
      // Never preempt a sequence already scheduled in this step (its slots are reserved).
      bool victim_scheduled = false;
      for (const ScheduledChunk& chunk : plan.chunks) victim_scheduled = victim_scheduled || chunk.seq == victim;
      if (victim_scheduled) break;
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == seq) break;
    }
    if (!scheduled) {
      if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;  // preempted itself
      break;  // cannot free more without undoing this step's work; try again next step
    }
    plan.chunks.push_back({seq, state.num_computed, num_new, num_new == remaining});
    budget -= num_new;
    ++i;
  }
  // 2. Waiting sequences, first come first served, unless this step had to preempt.
  if (plan.preempted.empty()) {
    int reserved = 0;  // running sequences plus the samples they will still fork into
    for (const SeqId seq : running_) reserved += 1 + sequences_.at(seq).pending_forks;
    while (!waiting_.empty() && budget > 0) {
      const SeqId seq = waiting_.front();
      const int wanted = 1 + sequences_.at(seq).pending_forks;
      if (reserved + wanted > config_.max_seqs) break;
      if (!running_.empty() && waits_for_pending_prefix(sequences_.at(seq))) break;
      if (!admit(seq, budget, plan)) break;
      waiting_.pop_front();
      reserved += wanted;
      budget -= plan.chunks.back().num_tokens;
    }
  }
  if (states_ != nullptr) reserve_state_snapshots(plan);
  return plan;
}

void Scheduler::complete_step(const StepPlan& plan) {
  for (const ScheduledChunk& chunk : plan.chunks) {
    SequenceState& state = sequences_.at(chunk.seq);
    MOERT_CHECK(state.num_computed == chunk.start, "sequence " << chunk.seq << " computed " << state.num_computed
                                                                << " tokens, the chunk starts at " << chunk.start);
    // Drafts are not known tokens: their K/V counts only once accept_spec_tokens says so.
    state.num_computed += chunk.num_tokens - chunk.num_spec_tokens;
    kv_.commit_computed(chunk.seq, state.tokens, state.num_computed);
    // A verify's slot holds the state after its drafts until the rollback: no snapshot.
    if (chunk.num_spec_tokens == 0) store_state_snapshot(state);
  }
  for (auto it = pending_prefix_.begin(); it != pending_prefix_.end();) {
    const bool computed = sequences_.at(it->second.first).num_computed >= it->second.second;
    it = computed ? pending_prefix_.erase(it) : std::next(it);
  }
}

void Scheduler::reserve_state_snapshots(StepPlan& plan) {
  const int64_t block = kv_.block_size();
  for (ScheduledChunk& chunk : plan.chunks) {
    const int64_t end = chunk.start + chunk.num_tokens;
    if (chunk.num_spec_tokens > 0 || (end - 1) / block <= chunk.start / block) continue;  // no boundary inside
    const std::vector<int32_t>& tokens = sequences_.at(chunk.seq).tokens;
    const std::vector<attention::BlockHash> hashes = full_block_hashes(std::span(tokens).first(static_cast<size_t>(end)));
    for (int64_t boundary = (chunk.start / block + 1) * block; boundary < end; boundary += block) {
      const attention::SlotId slot = states_->reserve_snapshot(hashes[static_cast<size_t>(boundary / block - 1)]);
      if (slot != attention::kNoSlot) chunk.state_snapshots.emplace_back(boundary - chunk.start - 1, slot);
    }
  }
}

void Scheduler::store_state_snapshot(const SequenceState& state) {
  const int64_t block = kv_.block_size();
  if (states_ == nullptr || state.num_computed == 0 || state.num_computed % block != 0) return;
  const auto computed = std::span(state.tokens).first(static_cast<size_t>(state.num_computed));
  states_->store_snapshot(state.id, full_block_hashes(computed).back());
}

void Scheduler::append_token(SeqId seq, int32_t token) { sequences_.at(seq).tokens.push_back(token); }

void Scheduler::set_spec_tokens(SeqId seq, std::vector<int32_t> drafts) {
  SequenceState& state = sequences_.at(seq);
  MOERT_CHECK(drafts.empty() || state.num_computed + 1 == static_cast<int64_t>(state.tokens.size()),
              "drafts for sequence " << seq << " that is not ready to decode (" << state.num_computed << " of "
                                     << state.tokens.size() << " tokens computed)");
  state.spec_tokens = std::move(drafts);
}

void Scheduler::accept_spec_tokens(SeqId seq, int64_t num_accepted) {
  SequenceState& state = sequences_.at(seq);
  const int64_t num_tokens = static_cast<int64_t>(state.tokens.size());
  MOERT_CHECK(num_accepted >= 0 && num_accepted <= static_cast<int64_t>(state.spec_tokens.size()) &&
                  state.num_computed + num_accepted < num_tokens,
              "sequence " << seq << ": " << num_accepted << " accepted of " << state.spec_tokens.size()
                          << " drafts with " << state.num_computed << " of " << num_tokens << " tokens computed");
  state.spec_tokens.clear();
  state.num_computed += num_accepted;
  kv_.truncate(seq, num_tokens);
  kv_.commit_computed(seq, state.tokens, state.num_computed);
}

std::vector<SeqId> Scheduler::decode_ready_sequences() const {
  std::vector<SeqId> ready;
  for (SeqId seq : running_) {
    const SequenceState& state = sequences_.at(seq);
    if (state.num_computed + 1 == static_cast<int64_t>(state.tokens.size())) ready.push_back(seq);
  }
  return ready;
}

void Scheduler::finish_sequence(SeqId seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  MOERT_CHECK(it != running_.end(), "finish of sequence " << seq << " that is not running");
  running_.erase(it);
  untrack_pending_prefix(seq);
  kv_.free_sequence(seq);
  if (states_ != nullptr) states_->free_sequence(seq);
  sequences_.erase(seq);
}

const SequenceState& Scheduler::sequence(SeqId seq) const { return sequences_.at(seq); }

int64_t Scheduler::unused_reserved_slots() const {
  int64_t unused = 0;
  for (SeqId seq : running_) {
    const int64_t capacity = static_cast<int64_t>(kv_.block_table(seq).size()) * kv_.block_size();
    unused += capacity - sequences_.at(seq).num_computed;
  }
  return unused;
}

}  // namespace moert::engine
