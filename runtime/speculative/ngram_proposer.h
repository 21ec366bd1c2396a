// Prompt-lookup (n-gram) proposer: drafts tokens by finding the history's latest tokens
// earlier in the same history and copying what followed them. Needs no model and gives
// no probabilities: its drafts are verified with a one-hot q (rejection_sampler.h).
//
// Shape legend: L history length (prompt + generated tokens, no draft tokens), n length of
// the matched suffix, K number of draft tokens asked for.
//
// Terms: the *suffix* of length n is history[L-n, L); an *occurrence* of it is a start s
// with s + n <= L - 1 and history[s, s+n) == history[L-n, L) (it may overlap the suffix,
// but at least one token follows it); the *continuation* is history[s+n, min(s+n+K, L)).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace moert::spec {

// Options of the n-gram proposer. Validate once with validate_ngram_config().
// (vLLM names: prompt_lookup_min, prompt_lookup_max, num_speculative_tokens.)
struct NgramProposerConfig {
  // Shortest suffix that may match. Default 2 (a 1-token match is mostly noise).
  int min_n = 2;
  // Longest suffix tried; also bounds the cost, O(L * max_n). Default 4.
  int max_n = 4;
  // K: most draft tokens proposed per pass. Default 4. The caller caps it further by the
  // room left (max_model_len - L, max_tokens - generated).
  int num_speculative_tokens = 4;
};

// Checks 1 <= min_n <= max_n and num_speculative_tokens >= 1; the error names the value,
// e.g. "min_n = 3 must be <= max_n = 2".
Status validate_ngram_config(const NgramProposerConfig& config);

// The chosen occurrence: ngram_len == 0 (and match_start == -1) when there is none.
struct NgramMatch {
  int ngram_len = 0;          // n in [min_n, max_n], or 0
  int64_t match_start = -1;   // s, the occurrence's first index in the history
};

// The longest n in [min_n, max_n] whose suffix has an occurrence; among the occurrences of
// that longest suffix, the most recent one (largest s).
//
// Why the most recent: it carries the latest local context (the last time this text was
// written, e.g. the newest version of an edited line or the latest loop iteration), and
// the scan from the end can stop at the first occurrence of length max_n. vLLM picks the
// earliest occurrence instead, which favours a continuation not cut short by the end of
// the history; for a suffix that does not overlap its occurrence both continuations exist.
//
// Cost: one backwards scan over the end positions of candidate occurrences, comparing at
// most max_n tokens at each: O(L * max_n) time worst case, O(1) extra memory; it stops at
// the most recent occurrence of length max_n. For L of a few thousand and max_n <= 8 that
// is at most tens of thousands of comparisons.
// Precondition: config valid (MOERT_CHECK).
NgramMatch find_ngram_match(std::span<const int32_t> history, const NgramProposerConfig& config);

// The continuation of find_ngram_match()'s occurrence: 1..K tokens, or empty when no
// suffix in [min_n, max_n] has an occurrence (including L <= min_n).
std::vector<int32_t> propose_ngram(std::span<const int32_t> history, const NgramProposerConfig& config);

}  // namespace moert::spec
