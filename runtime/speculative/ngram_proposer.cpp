#include "runtime/speculative/ngram_proposer.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace moert::spec {

Status validate_ngram_config(const NgramProposerConfig& config) {
  if (config.min_n < 1) return invalid_argument("min_n = " + std::to_string(config.min_n) + " must be >= 1");
  if (config.max_n < config.min_n) {
    return invalid_argument("min_n = " + std::to_string(config.min_n) + " must be <= max_n = " +
                            std::to_string(config.max_n));
  }
  if (config.num_speculative_tokens < 1) {
    return invalid_argument("num_speculative_tokens = " + std::to_string(config.num_speculative_tokens) +
                            " must be >= 1");
  }
  return Status::ok();
}

NgramMatch find_ngram_match(std::span<const int32_t> history, const NgramProposerConfig& config) {
  const Status valid = validate_ngram_config(config);
  MOERT_CHECK(valid.is_ok(), "" << valid.message());
  const int64_t length = static_cast<int64_t>(history.size());  // L
  const int64_t last = length - 1;
  NgramMatch best;
  // `end` is the last index of a candidate occurrence; end <= L - 2 leaves one token after
  // it. Invariant: best holds the longest match (capped at max_n) among ends > `end`, and
  // the largest such end on ties, because only a strictly longer match replaces it.
  for (int64_t end = last - 1; end >= 0; --end) {
    int64_t n = 0;
    const auto same_at = [&](int64_t back) {
      return history[static_cast<size_t>(end - back)] == history[static_cast<size_t>(last - back)];
    };
    while (n < config.max_n && n <= end && same_at(n)) ++n;
    if (n > best.ngram_len) {
      best.ngram_len = static_cast<int>(n);
      best.match_start = end - n + 1;
      if (n == config.max_n) break;  // nothing older can be longer
    }
  }
  if (best.ngram_len < config.min_n) return {};
  return best;
}

std::vector<int32_t> propose_ngram(std::span<const int32_t> history, const NgramProposerConfig& config) {
  const NgramMatch match = find_ngram_match(history, config);
  if (match.ngram_len == 0) return {};
  const size_t begin = static_cast<size_t>(match.match_start + match.ngram_len);
  const size_t end = std::min(history.size(), begin + static_cast<size_t>(config.num_speculative_tokens));
  return {history.begin() + static_cast<std::ptrdiff_t>(begin), history.begin() + static_cast<std::ptrdiff_t>(end)};
}

}  // namespace moert::spec
