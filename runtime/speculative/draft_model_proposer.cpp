#include "runtime/speculative/draft_model_proposer.h"

#include <algorithm>

#include "core/check.h"
#include "runtime/speculative/rejection_sampler.h"

namespace moert::spec {

DraftModelProposer::DraftModelProposer(const TransformerForward& draft, const DraftModelConfig& config)
    : draft_(draft),
      config_(config),
      kv_(config.num_kv_blocks, config.block_size, config.enable_prefix_caching, runner::kv_group_layouts(draft.config())) {
  Result<std::unique_ptr<runner::PagedModelRunner>> runner =
      runner::PagedModelRunner::create(draft, {config.num_kv_blocks, config.block_size, config.kv_cache_dtype});
  MOERT_CHECK(runner.is_ok(), "draft model: " << runner.status().to_string());
  (*runner)->enable_step_graphs(config.step_graph_max_batch);
  runner_ = std::move(runner).value();
}

void DraftModelProposer::release(ProposalSeqId seq) {
  if (seqs_.erase(seq) > 0) kv_.free_sequence(seq);
}

bool DraftModelProposer::prepare(ProposalSeqId seq, std::span<const int32_t> known, int num_draft) {
  const int64_t length = static_cast<int64_t>(known.size());  // L
  auto found = seqs_.find(seq);
  if (found == seqs_.end()) {
    SeqState state;
    state.tokens.assign(known.begin(), known.end());
    state.num_computed = kv_.add_sequence(seq, state.tokens);  // prefix-cache hits, < L
    found = seqs_.emplace(seq, std::move(state)).first;
  } else {
    SeqState& state = found->second;
    const auto mismatch = std::mismatch(state.tokens.begin(), state.tokens.end(), known.begin(), known.end());
    const int64_t common = mismatch.first - state.tokens.begin();
    state.num_computed = std::min({state.num_computed, common, length - 1});
    kv_.truncate(seq, state.num_computed);
    state.tokens.assign(known.begin(), known.end());
  }
  // Drafts x_0..x_{K-2} are computed here; x_{K-1} only sampled.
  if (!kv_.reserve(seq, found->second.num_computed, length + num_draft - 1)) {
    release(seq);
    return false;
  }
  return true;
}

Result<std::vector<Draft>> DraftModelProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<Draft> drafts(requests.size());
  std::vector<size_t> active;  // indices into requests
  std::vector<int> draft_lengths(requests.size(), 0);  // K per request, after the draft's own limits
  int max_draft = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    MOERT_CHECK(!request.tokens.empty() && request.params != nullptr,
                "draft request for sequence " << request.seq << " without tokens or sampling parameters");
    // The draft computes positions up to L + K - 2: a draft with a shorter context than the
    // target drafts less, or nothing, near its end.
    const int64_t room = draft_.config().max_position_embeddings - static_cast<int64_t>(request.tokens.size()) + 1;
    const int num_draft = static_cast<int>(std::min<int64_t>(request.num_draft, room));
    if (num_draft < 1) {
      release(request.seq);
      continue;
    }
    if (!prepare(request.seq, request.tokens, num_draft)) continue;
    active.push_back(i);
    draft_lengths[i] = num_draft;
    max_draft = std::max(max_draft, num_draft);
  }
  std::vector<attention::BlockCopy> copies = kv_.take_pending_copies();
  const int vocab = draft_.config().vocab_size;
  for (int round = 0; round < max_draft; ++round) {
    runner::RunnerBatch batch;
    batch.block_copies = std::move(copies);
    copies.clear();
    std::vector<runner::SequenceChunk>& chunks = batch.chunks;
    std::vector<size_t> members;
    for (size_t i : active) {
      const DraftRequest& request = requests[i];
      if (round >= draft_lengths[i]) continue;
      SeqState& state = seqs_.at(request.seq);
      const int64_t length = static_cast<int64_t>(request.tokens.size());
      runner::SequenceChunk chunk;
      chunk.num_logit_rows = 1;
      if (round == 0) {
        chunk.start = state.num_computed;
        chunk.tokens.assign(request.tokens.begin() + state.num_computed, request.tokens.end());
      } else {
        chunk.start = length + round - 1;
        chunk.tokens.push_back(drafts[i].tokens.back());
      }
      chunk.block_tables =
          runner::chunk_block_tables(kv_, request.seq, chunk.start + static_cast<int64_t>(chunk.tokens.size()));
      chunks.push_back(std::move(chunk));
      members.push_back(i);
    }
    MOERT_ASSIGN_OR_RETURN(std::vector<float> logits, runner_->run(batch));
    for (size_t m = 0; m < members.size(); ++m) {
      const DraftRequest& request = requests[members[m]];
      Draft& draft = drafts[members[m]];
      SeqState& state = seqs_.at(request.seq);
      const float* row = logits.data() + m * static_cast<size_t>(vocab);
      int32_t token = 0;
      if (request.params->is_greedy()) {
        token = sampling::sample_token(row, vocab, *request.params, 0.0, &scratch_);
      } else {
        sampling::sampling_distribution(row, vocab, *request.params, &scratch_);
        const double uniform = spec_uniform(request.seed, request.stream, UniformDomain::kDraft,
                                            request.first_position + static_cast<uint64_t>(round));
        token = sampling::sample_from_distribution(scratch_, uniform);
        draft.probs.insert(draft.probs.end(), scratch_.begin(), scratch_.end());
      }
      draft.tokens.push_back(token);
      state.num_computed = chunks[m].start + static_cast<int64_t>(chunks[m].tokens.size());
      state.tokens.push_back(token);
    }
  }
  // Copies of a call that drafted nothing still land (a later pass reads those blocks).
  if (!copies.empty()) {
    runner::RunnerBatch batch;
    batch.block_copies = std::move(copies);
    MOERT_RETURN_IF_ERROR(runner_->run(batch).status());
  }
  // Only known tokens enter the draft's prefix cache.
  for (size_t i : active) {
    const DraftRequest& request = requests[i];
    kv_.commit_computed(request.seq, seqs_.at(request.seq).tokens, static_cast<int64_t>(request.tokens.size()));
  }
  return drafts;
}

}  // namespace moert::spec
