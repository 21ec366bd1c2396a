#include "runtime/speculative/proposer.h"

#include <algorithm>

namespace moert::spec {

Result<std::vector<Draft>> NgramProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<Draft> drafts(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    NgramProposerConfig config = config_;
    config.num_speculative_tokens = std::min(config_.num_speculative_tokens, requests[i].num_draft);
    if (config.num_speculative_tokens < 1) continue;
    drafts[i].tokens = propose_ngram(requests[i].tokens, config);
  }
  return drafts;
}

}  // namespace moert::spec
