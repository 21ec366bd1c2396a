// Exact proposals of the prompt-lookup proposer, and agreement with a brute-force
// reference (longest n first, then the most recent occurrence) on random histories.
#include "runtime/speculative/ngram_proposer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace moert::spec {
namespace {

using Tokens = std::vector<int32_t>;

NgramProposerConfig config(int min_n, int max_n, int k) {
  return {.min_n = min_n, .max_n = max_n, .num_speculative_tokens = k};
}

TEST(NgramProposer, VllmDocstringExample) {
  const Tokens history = {1, 2, 3, 4, 2, 3};
  const NgramMatch match = find_ngram_match(history, config(2, 3, 4));
  EXPECT_EQ(match.ngram_len, 2);
  EXPECT_EQ(match.match_start, 1);
  EXPECT_EQ(propose_ngram(history, config(2, 3, 4)), (Tokens{4, 2, 3}));  // cut by the history's end
}

TEST(NgramProposer, MostRecentOccurrenceAmongEqualLengths) {
  // [1, 2] occurs at 0 and 3; the most recent (3) is followed by 8.
  const Tokens history = {1, 2, 7, 1, 2, 8, 1, 2};
  EXPECT_EQ(find_ngram_match(history, config(2, 3, 3)).match_start, 3);
  EXPECT_EQ(propose_ngram(history, config(2, 3, 3)), (Tokens{8, 1, 2}));
}

TEST(NgramProposer, LongestMatchBeatsMoreRecentShorterOne) {
  // [4, 1, 2] at 0 (followed by 9, 7, 1, 2) wins over the more recent [1, 2] at 5.
  const Tokens history = {4, 1, 2, 9, 7, 1, 2, 8, 4, 1, 2};
  const NgramMatch match = find_ngram_match(history, config(2, 3, 4));
  EXPECT_EQ(match.ngram_len, 3);
  EXPECT_EQ(match.match_start, 0);
  EXPECT_EQ(propose_ngram(history, config(2, 3, 4)), (Tokens{9, 7, 1, 2}));
}

TEST(NgramProposer, MaxNCapsTheMatchLength) {
  const Tokens history = {5, 6, 7, 8, 0, 1, 7, 8, 3, 5, 6, 7, 8};
  // max_n 2: [7, 8] at 2 and 6, most recent 6 -> 3, 5.
  EXPECT_EQ(propose_ngram(history, config(1, 2, 2)), (Tokens{3, 5}));
  // max_n 4: [5, 6, 7, 8] at 0 -> 0, 1.
  EXPECT_EQ(propose_ngram(history, config(1, 4, 2)), (Tokens{0, 1}));
}

TEST(NgramProposer, MinNRejectsShortMatches) {
  const Tokens history = {1, 2, 3, 9, 3};
  EXPECT_TRUE(propose_ngram(history, config(2, 4, 4)).empty());
  EXPECT_EQ(find_ngram_match(history, config(2, 4, 4)).ngram_len, 0);
  EXPECT_EQ(find_ngram_match(history, config(2, 4, 4)).match_start, -1);
  EXPECT_EQ(propose_ngram(history, config(1, 4, 4)), (Tokens{9, 3}));  // [3] at 2
}

TEST(NgramProposer, OccurrenceMayOverlapTheSuffix) {
  // [1, 1, 1] at 0 overlaps the suffix at 1; only one token follows it.
  EXPECT_EQ(propose_ngram(Tokens{1, 1, 1, 1}, config(1, 3, 4)), (Tokens{1}));
  EXPECT_EQ(find_ngram_match(Tokens{1, 1, 1, 1}, config(1, 3, 4)).match_start, 0);
}

TEST(NgramProposer, KCapsTheProposal) {
  EXPECT_EQ(propose_ngram(Tokens{1, 2, 3, 4, 5, 6, 1, 2}, config(2, 2, 3)), (Tokens{3, 4, 5}));
  EXPECT_EQ(propose_ngram(Tokens{1, 2, 3, 4, 5, 6, 1, 2}, config(2, 2, 1)), (Tokens{3}));
}

TEST(NgramProposer, ShortHistories) {
  EXPECT_TRUE(propose_ngram(Tokens{}, config(1, 3, 4)).empty());
  EXPECT_TRUE(propose_ngram(Tokens{7}, config(1, 3, 4)).empty());
  EXPECT_EQ(propose_ngram(Tokens{7, 7}, config(1, 3, 4)), (Tokens{7}));
  EXPECT_TRUE(propose_ngram(Tokens{7, 8}, config(1, 3, 4)).empty());
  EXPECT_TRUE(propose_ngram(Tokens{7, 7}, config(2, 3, 4)).empty());  // L <= min_n
}

// Brute force: for n from max_n down to min_n, the largest start s with s + n <= L - 1.
Tokens reference_proposal(const Tokens& h, const NgramProposerConfig& c) {
  const int64_t length = static_cast<int64_t>(h.size());
  for (int64_t n = c.max_n; n >= c.min_n; --n) {
    for (int64_t s = length - n - 1; s >= 0; --s) {
      bool same = true;
      for (int64_t j = 0; j < n && same; ++j) same = h[static_cast<size_t>(s + j)] == h[static_cast<size_t>(length - n + j)];
      if (same) {
        const int64_t begin = s + n;
        const int64_t end = std::min(length, begin + c.num_speculative_tokens);
        return {h.begin() + begin, h.begin() + end};
      }
    }
  }
  return {};
}

TEST(NgramProposer, AgreesWithBruteForceOnRandomHistories) {
  std::mt19937_64 rng(2024);
  int num_proposals = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    const size_t length = rng() % 40;
    Tokens history(length);
    for (int32_t& t : history) t = static_cast<int32_t>(rng() % alphabet);
    const int min_n = 1 + static_cast<int>(rng() % 3);
    const int max_n = min_n + static_cast<int>(rng() % 4);
    const NgramProposerConfig c = config(min_n, max_n, 1 + static_cast<int>(rng() % 5));
    const Tokens proposal = propose_ngram(history, c);
    ASSERT_EQ(proposal, reference_proposal(history, c)) << "trial " << trial;
    num_proposals += proposal.empty() ? 0 : 1;
  }
  EXPECT_GT(num_proposals, 1000);  // both outcomes exercised
  EXPECT_LT(num_proposals, 3000);
}

TEST(NgramProposer, LongHistoryAgreesWithBruteForce) {
  std::mt19937_64 rng(9);
  Tokens history(4096);
  for (int32_t& t : history) t = static_cast<int32_t>(rng() % 64);
  // A repeated phrase: the suffix [10, 20, 30, 40, 50] also appears at 1000.
  const Tokens phrase = {10, 20, 30, 40, 50};
  std::copy(phrase.begin(), phrase.end(), history.begin() + 1000);
  std::copy(phrase.begin(), phrase.end(), history.end() - 5);
  const NgramProposerConfig c = config(2, 5, 4);
  const Tokens proposal = propose_ngram(history, c);
  EXPECT_EQ(proposal, reference_proposal(history, c));
  EXPECT_EQ(proposal, (Tokens{history.begin() + 1005, history.begin() + 1009}));
}

TEST(NgramProposerConfig, ValidationNamesTheValue) {
  EXPECT_TRUE(validate_ngram_config({}).is_ok());
  EXPECT_EQ(validate_ngram_config(config(0, 2, 4)).message(), "min_n = 0 must be >= 1");
  EXPECT_EQ(validate_ngram_config(config(3, 2, 4)).message(), "min_n = 3 must be <= max_n = 2");
  EXPECT_EQ(validate_ngram_config(config(1, 2, 0)).message(), "num_speculative_tokens = 0 must be >= 1");
}

}  // namespace
}  // namespace moert::spec
