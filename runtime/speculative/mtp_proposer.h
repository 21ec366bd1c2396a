// The DeepSeek multi-token prediction proposer (docs/mtp.md): the target's own MTP module
// drafts from the target's final hidden states g, so no second model is loaded. It runs on
// each rank for that rank's sequences. When the module's routed experts are sliced across
// ranks (the model's RoutedExperts exchange rows, every rank must run every MoE layer call),
// the proposer is given the job's control transport and drafts in lock step: every rank
// calls propose() every engine step (proposes_every_step()), the ranks agree on the number
// of module calls of the step (the most any rank needs: one per drafted position) and a rank
// with fewer pads with empty calls.
//
// Per sequence with known tokens t_0..t_{L-1}, MTP row i = (g_i, t_{i+1}) at position i
// predicts t_{i+2}. The engine hands over g after every target step (observe_hidden, with the
// tokens the step fed: g_p is valid exactly when the token fed at p is the known one, as the
// tokens before p were then known too). propose() appends the rows up to L - 2 to the module's
// cache, drafts x_0 from row L - 2, then x_j (j > 0) from a chained row at position L - 2 + j
// fed x_{j-1} and, as its hidden state, the previous row's block output (vLLM's choice), and
// finally drops the chained rows again: the cache holds only rows of known tokens.
//
// Invariants: the module's cache holds rows row_base .. row_base + n - 1 in slots 0 .. n - 1
// (RoPE at the rows' positions). A sequence whose first g rows never come (the target skipped
// them: a prefix-cache hit, a forked sample that did not compute its prompt, a recompute after
// preemption served from the prefix cache) starts its rows at the first position with g: its
// drafts see less context (lower acceptance), its tokens are the target's either way. A g row
// fed another token than the known one (a rejected draft) is replaced by the next step's. Greedy requests draft the argmax; sampled ones draw from q = the request's
// processed distribution of the MTP logits with the kDraft uniform of the output position and
// return q, as the draft-model proposer does.
#pragma once

#include <memory>
#include <unordered_map>

#include "runtime/comm/transport.h"
#include "runtime/model/reference_forward.h"
#include "runtime/speculative/proposer.h"

namespace moert::spec {

class MtpProposer : public Proposer {
 public:
  // `model` computes the MTP module (TransformerForward::num_mtp_modules() >= 1). `lock_step`:
  // null when the module's routed experts are all local (no exchange); else the control
  // transport of the ranks that exchange the module's rows. Both must outlive this object.
  explicit MtpProposer(const TransformerForward& model, comm::Transport* lock_step = nullptr);

  Result<std::vector<Draft>> propose(std::span<const DraftRequest> requests) override;
  void release(ProposalSeqId seq) override { seqs_.erase(seq); }
  const char* name() const override { return "mtp"; }
  bool wants_hidden_states() const override { return true; }
  bool proposes_every_step() const override { return lock_step_ != nullptr; }
  void observe_hidden(ProposalSeqId seq, int64_t start, std::span<const int32_t> tokens, const float* hidden) override;

 private:
  struct SeqState {
    std::unique_ptr<DenseKvCache> cache;  // the module's K/V: rows row_base .. row_base + row_tokens.size() - 1
    int64_t row_base = 0;                 // position of the first cached row
    std::vector<int32_t> row_tokens;      // t_{i+1} of each cached row i (from row_base)
    int64_t g_base = 0;                   // position of the first stored g row
    std::vector<int32_t> g_tokens;        // the token the target was fed at each stored position
    std::vector<float> g;                 // [g_tokens.size(), D]
  };
  // What drafting one sequence takes: the first row to compute, the drafts (one module call
  // each), and whether the cached rows are dropped first (restart at first_row). num_draft
  // == 0: no drafts (too short, or g missing); nothing was changed.
  struct Plan {
    int64_t first_row = 0;
    int num_draft = 0;
    bool restart = false;
  };
  Plan plan_one(const DraftRequest& request, const SeqState& state) const;
  // Appends the rows first_row .. L - 2 of `request` (recomputing row L - 2 if cached) and
  // drafts plan.num_draft tokens in plan.num_draft module calls (precondition: num_draft > 0).
  Result<Draft> propose_one(const DraftRequest& request, SeqState& state, const Plan& plan);

  const TransformerForward& model_;
  comm::Transport* lock_step_;
  DenseKvCache empty_cache_;  // the attention context of padding calls (never written)
  std::unordered_map<ProposalSeqId, SeqState> seqs_;
  std::vector<double> scratch_;
};

}  // namespace moert::spec
