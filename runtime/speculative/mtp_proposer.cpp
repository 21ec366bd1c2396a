#include "runtime/speculative/mtp_proposer.h"

#include <algorithm>

#include "core/check.h"
#include "runtime/speculative/rejection_sampler.h"

namespace moert::spec {

MtpProposer::MtpProposer(const TransformerForward& model, comm::Transport* lock_step)
    : model_(model), lock_step_(lock_step), empty_cache_(model.config()) {
  MOERT_CHECK(model.num_mtp_modules() >= 1, "the MTP proposer needs a model loaded with its MTP layer");
}

void MtpProposer::observe_hidden(ProposalSeqId seq, int64_t start, std::span<const int32_t> tokens,
                                 const float* hidden) {
  const int64_t dim = model_.config().hidden_size;
  SeqState& state = seqs_[seq];
  if (state.cache == nullptr) state.cache = std::make_unique<DenseKvCache>(model_.config());
  const int64_t stored_end = state.g_base + static_cast<int64_t>(state.g_tokens.size());
  if (start > stored_end || (state.g_tokens.empty() && start > state.g_base)) {
    // Positions in between were never computed here: only rows from `start` on can follow.
    state.g_base = start;
    state.g_tokens.clear();
    state.g.clear();
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t index = start + static_cast<int64_t>(i) - state.g_base;
    if (index < 0) continue;  // already consumed by the module's cache
    if (index >= static_cast<int64_t>(state.g_tokens.size())) {
      state.g_tokens.resize(static_cast<size_t>(index) + 1);
      state.g.resize(state.g_tokens.size() * static_cast<size_t>(dim));
    }
    state.g_tokens[static_cast<size_t>(index)] = tokens[i];
    std::copy_n(hidden + static_cast<int64_t>(i) * dim, dim, state.g.begin() + index * dim);
  }
}

Result<std::vector<Draft>> MtpProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<Draft> drafts(requests.size());
  std::vector<Plan> plans(requests.size());
  int64_t num_calls = 0;  // module calls this rank makes this step
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    MOERT_CHECK(!request.tokens.empty() && request.params != nullptr,
                "draft request for sequence " << request.seq << " without tokens or sampling parameters");
    const auto found = seqs_.find(request.seq);
    if (found == seqs_.end()) continue;  // no g seen for it: no drafts
    plans[i] = plan_one(request, found->second);
    num_calls += plans[i].num_draft;
  }
  // Lock step: the calls are agreed before any is made (each one exchanges rows).
  int64_t agreed_calls = num_calls;
  if (lock_step_ != nullptr) MOERT_RETURN_IF_ERROR(lock_step_->all_reduce(&agreed_calls, 1, comm::ReduceOp::kMax));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (plans[i].num_draft == 0) continue;
    MOERT_ASSIGN_OR_RETURN(drafts[i], propose_one(requests[i], seqs_.at(requests[i].seq), plans[i]));
  }
  // Padding calls: no rows, but this rank's part of every exchange of the module's MoE layer.
  for (int64_t call = num_calls; call < agreed_calls; ++call) {
    const float no_rows = 0.0f;
    MOERT_RETURN_IF_ERROR(model_.mtp_forward(0, ForwardBatch{}, host_ptr(&no_rows), empty_cache_, nullptr).status());
  }
  return drafts;
}

MtpProposer::Plan MtpProposer::plan_one(const DraftRequest& request, const SeqState& state) const {
  const ModelConfig& c = model_.config();
  const std::span<const int32_t> known = request.tokens;
  const int64_t length = static_cast<int64_t>(known.size());  // L
  // Chained rows sit at positions up to L - 3 + K.
  const int num_draft = static_cast<int>(std::min<int64_t>(request.num_draft, c.max_position_embeddings - length + 2));
  if (length < 2 || num_draft < 1) return {};
  const int64_t last = length - 2;
  // Cached rows of known tokens only, and row L - 2 computed afresh (its logits start the draft).
  int64_t rows_end = state.row_base;
  const int64_t cached_end = state.row_base + static_cast<int64_t>(state.row_tokens.size());
  while (rows_end < cached_end && rows_end + 1 < length &&
         state.row_tokens[static_cast<size_t>(rows_end - state.row_base)] == known[static_cast<size_t>(rows_end + 1)]) {
    ++rows_end;
  }
  Plan plan{std::min(rows_end, last), num_draft, false};
  // g before g_base will not come (the target computed those positions without handing g
  // over, or for other tokens): the module's rows restart at g_base, with less context.
  if (state.g_base > plan.first_row) plan = Plan{state.g_base, num_draft, true};
  // g for positions first_row .. L - 2, fed the known tokens.
  if (plan.first_row > last || state.g_base + static_cast<int64_t>(state.g_tokens.size()) <= last) return {};
  for (int64_t p = plan.first_row; p <= last; ++p) {
    if (state.g_tokens[static_cast<size_t>(p - state.g_base)] != known[static_cast<size_t>(p)]) return {};
  }
  return plan;
}

Result<Draft> MtpProposer::propose_one(const DraftRequest& request, SeqState& state, const Plan& plan) {
  const ModelConfig& c = model_.config();
  const int64_t dim = c.hidden_size, vocab = c.vocab_size;
  const std::span<const int32_t> known = request.tokens;
  const int64_t length = static_cast<int64_t>(known.size());  // L
  const int64_t rows = plan.first_row, last = length - 2;
  const int num_draft = plan.num_draft;
  Draft draft;
  if (plan.restart) {
    state.cache->truncate(0);
    state.row_tokens.clear();
    state.row_base = rows;
  }
  state.cache->truncate(rows - state.row_base);
  state.row_tokens.resize(static_cast<size_t>(rows - state.row_base));

  ForwardBatch batch;
  for (int64_t p = rows; p <= last; ++p) {
    batch.tokens.push_back(known[static_cast<size_t>(p + 1)]);
    batch.positions.push_back(p);
  }
  batch.logit_rows = {last - rows};
  std::vector<float> block_out;
  MOERT_ASSIGN_OR_RETURN(std::vector<float> logits,
                         model_.mtp_forward(0, batch, host_ptr(state.g.data() + (rows - state.g_base) * dim), *state.cache,
                                            &block_out));
  state.cache->advance(last + 1 - rows);  // cache slot i holds position row_base + i
  state.row_tokens.insert(state.row_tokens.end(), batch.tokens.begin(), batch.tokens.end());
  // g rows before L - 2 are no longer needed (row L - 2 may be recomputed next time).
  const int64_t drop = last - state.g_base;
  if (drop > 0) {
    state.g_tokens.erase(state.g_tokens.begin(), state.g_tokens.begin() + drop);
    state.g.erase(state.g.begin(), state.g.begin() + drop * dim);
    state.g_base = last;
  }
  std::vector<float> hidden(block_out.end() - dim, block_out.end());  // [1, D] y of row L - 2
  for (int j = 0;; ++j) {
    int32_t token = 0;
    if (request.params->is_greedy()) {
      token = sampling::sample_token(logits.data(), static_cast<int>(vocab), *request.params, 0.0, &scratch_);
    } else {
      sampling::sampling_distribution(logits.data(), static_cast<int>(vocab), *request.params, &scratch_);
      const double uniform = spec_uniform(request.seed, request.stream, UniformDomain::kDraft,
                                          request.first_position + static_cast<uint64_t>(j));
      token = sampling::sample_from_distribution(scratch_, uniform);
      draft.probs.insert(draft.probs.end(), scratch_.begin(), scratch_.end());
    }
    draft.tokens.push_back(token);
    if (j + 1 == num_draft) break;
    ForwardBatch chained;
    chained.tokens = {token};
    chained.positions = {last + 1 + j};
    chained.logit_rows = {0};
    MOERT_ASSIGN_OR_RETURN(logits, model_.mtp_forward(0, chained, host_ptr(hidden.data()), *state.cache, &hidden));
    state.cache->advance(1);
  }
  // The chained rows used drafts: only rows of known tokens stay.
  state.cache->truncate(last + 1 - state.row_base);
  return draft;
}

}  // namespace moert::spec
