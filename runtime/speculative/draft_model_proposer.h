// Draft-model proposer: a smaller model (any checkpoint moert loads, dense or MoE, with the
// target's vocabulary) drafts K tokens per sequence autoregressively over its own paged KV
// cache. It runs on each rank for that rank's sequences, all its experts local: drafting
// needs no communication.
//
// Per propose() call, for each sequence: roll the draft cache back to the longest common
// prefix of what it computed and the sequence's known tokens (rejected drafts drop out
// here), then K batched draft forwards: the first computes the tokens the draft has not
// seen yet (the whole prompt the first time, else the 1-2 tokens the target emitted) and
// samples x_0 from its last row; forward i > 0 computes x_{i-1} and samples x_i. Greedy
// requests draft the argmax; sampled ones draw x_i from q_i = the request's processed
// distribution of the draft logits, with the kDraft uniform of its output position, and
// return q so the verifier can accept with min(1, p/q).
//
// Invariants: the draft cache never hashes a block holding a draft token (only known
// tokens are committed); a sequence whose blocks do not fit the draft pool gets no draft
// this time (the target decodes it normally) and loses its draft cache.
#pragma once

#include <memory>
#include <unordered_map>

#include "attention/cache/kv_cache_manager.h"
#include "runtime/runner/model_runner.h"
#include "runtime/speculative/proposer.h"

namespace moert::spec {

struct DraftModelConfig {
  int num_kv_blocks = 1024;      // blocks of the draft's own pool, including the null block
  int block_size = 16;
  bool enable_prefix_caching = true;
  DType kv_cache_dtype = DType::kF32;
  // The draft's decode rounds as step graphs (runner::PagedModelRunner::enable_step_graphs).
  int step_graph_max_batch = 0;
};

class DraftModelProposer : public Proposer {
 public:
  // `draft` (its config, weights and pool) must outlive this object. Its vocabulary must be
  // the target's (checked by the caller, which can name both checkpoints). Precondition:
  // runner::PagedModelRunner::create accepts the draft and the cache config (checked).
  DraftModelProposer(const TransformerForward& draft, const DraftModelConfig& config);

  Result<std::vector<Draft>> propose(std::span<const DraftRequest> requests) override;
  // How the draft's decode rounds used step graphs.
  runner::StepGraphStats step_graph_stats() const { return runner_->step_graph_stats(); }
  void release(ProposalSeqId seq) override;
  const char* name() const override { return "draft"; }

  const attention::KvCacheManager& kv() const { return kv_; }

 private:
  struct SeqState {
    std::vector<int32_t> tokens;  // what the draft cache was fed: known tokens, then drafts
    int64_t num_computed = 0;     // K/V written for tokens[0, num_computed)
  };
  // Brings `seq` into the draft cache with K/V valid for a prefix of `known` (at most
  // known.size() - 1 tokens) and reserves room for `known` plus num_draft - 1 drafts.
  // False when the pool cannot hold it (the sequence is then dropped).
  bool prepare(ProposalSeqId seq, std::span<const int32_t> known, int num_draft);

  const TransformerForward& draft_;
  DraftModelConfig config_;
  attention::KvCacheManager kv_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::unordered_map<ProposalSeqId, SeqState> seqs_;
  std::vector<double> scratch_;
};

}  // namespace moert::spec
