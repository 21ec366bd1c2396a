// The proposer side of speculative decoding: what the engine asks a proposer for and what
// it gets back. Implementations: the n-gram (prompt-lookup) proposer below, the draft
// model (draft_model_proposer.h), and test doubles.
//
// Shape legend: L known tokens of a sequence (prompt + generated, no drafts), K drafts
// asked for, V vocabulary size.
//
// Protocol, per engine step, before scheduling: propose() for the sequences that are
// ready to decode; the engine verifies the drafts in the step's forward; tokens the target
// rejected are simply absent from the next call's `tokens` (a proposer that keeps state,
// e.g. a draft KV cache, rolls back to the longest common prefix itself). release() is
// called when a sequence finishes or is preempted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "runtime/sampling/sampler.h"
#include "runtime/speculative/ngram_proposer.h"

namespace moert::spec {

using ProposalSeqId = int64_t;

struct DraftRequest {
  ProposalSeqId seq = 0;
  std::span<const int32_t> tokens;         // [L], L >= 1
  int num_draft = 0;                       // K >= 1: most drafts wanted
  const sampling::SamplingParams* params = nullptr;  // the request's sampling (q is processed like p)
  uint64_t seed = 0;                       // the request's seed, for drafts drawn from q
  uint64_t stream = 0;                     // sample index within the request
  uint64_t first_position = 0;             // output position of the first draft
};

// Invariant: tokens.size() <= K; probs is empty (no probabilities: one-hot q) or
// [tokens.size(), V] with probs row i the distribution tokens[i] was drawn from.
struct Draft {
  std::vector<int32_t> tokens;
  std::vector<double> probs;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // One Draft per request, in order (possibly empty: nothing to propose).
  virtual Result<std::vector<Draft>> propose(std::span<const DraftRequest> requests) = 0;
  // The sequence finished or was preempted: drop its state.
  virtual void release(ProposalSeqId seq) = 0;
  // For the summary: "ngram", "draft", ...
  virtual const char* name() const = 0;
  // Proposers that read the target's final hidden states (the DeepSeek MTP module,
  // docs/mtp.md): after every target step the engine calls observe_hidden() for each sequence
  // of the step with the tokens fed at positions [start, start + n) and their g rows
  // (hidden: [n, D] host, the last layer's output normalised by the final norm).
  virtual bool wants_hidden_states() const { return false; }
  // Proposers whose drafting exchanges rows across ranks (a model whose routed experts are
  // sliced): the engine calls propose() at the start of every step, with no requests too,
  // so that every rank makes the same calls in the same order.
  virtual bool proposes_every_step() const { return false; }
  virtual void observe_hidden(ProposalSeqId /*seq*/, int64_t /*start*/, std::span<const int32_t> /*tokens*/,
                              const float* /*hidden*/) {}
};

// Prompt lookup over each sequence's own history; stateless, no probabilities.
class NgramProposer : public Proposer {
 public:
  // Precondition: validate_ngram_config(config) is ok.
  explicit NgramProposer(const NgramProposerConfig& config) : config_(config) {}
  Result<std::vector<Draft>> propose(std::span<const DraftRequest> requests) override;
  void release(ProposalSeqId) override {}
  const char* name() const override { return "ngram"; }

 private:
  NgramProposerConfig config_;
};

}  // namespace moert::spec
