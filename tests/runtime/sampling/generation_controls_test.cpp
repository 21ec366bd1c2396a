// The generation controls around the sampler (docs/generation.md): EOS and min_tokens in the
// stop rule, penalties and min_tokens masking (logit_adjustments.h), log-probabilities against
// a float64 log-softmax, stop strings across piece boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/sampling/logit_adjustments.h"
#include "runtime/sampling/logprobs.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/stop_strings.h"

namespace moert::sampling {
namespace {

TEST(FinishReason, EosIgnoreEosAndMinTokens) {
  SamplingParams p;
  p.max_tokens = 10;
  p.eos_token_ids = {2, 5};
  p.stop_token_ids = {7};
  EXPECT_EQ(finish_reason(p, 5, 1), "stop");
  EXPECT_EQ(finish_reason(p, 2, 3), "stop");
  p.ignore_eos = true;
  EXPECT_EQ(finish_reason(p, 5, 1), std::nullopt);
  EXPECT_EQ(finish_reason(p, 7, 1), "stop");  // stop ids still stop
  p.ignore_eos = false;
  p.min_tokens = 3;
  EXPECT_EQ(finish_reason(p, 5, 2), std::nullopt);
  EXPECT_EQ(finish_reason(p, 7, 2), std::nullopt);
  EXPECT_EQ(finish_reason(p, 5, 3), "stop");
  EXPECT_EQ(finish_reason(p, 1, 10), "length");
  EXPECT_TRUE(is_stop_token(p, 7));
  EXPECT_FALSE(is_stop_token(p, 1));
}

TEST(ValidateSamplingParams, NewFieldsNameTheValue) {
  const auto message = [](auto edit) {
    SamplingParams p;
    edit(p);
    return validate_sampling_params(p).message();
  };
  EXPECT_NE(message([](SamplingParams& p) { p.min_tokens = 17; }).find("min_tokens = 17"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.presence_penalty = 2.5f; }).find("presence_penalty = 2.5"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.frequency_penalty = -3; }).find("frequency_penalty"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.repetition_penalty = 0; }).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.logprobs = 21; }).find("logprobs = 21"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.stop = {"a", ""}; }).find("'stop' string is empty"), std::string::npos);
  EXPECT_TRUE(message([](SamplingParams& p) { p.logprobs = 20; p.min_tokens = 16; }).empty());
}

TEST(AdjustLogits, PenaltiesAsVllmAndHuggingFaceApplyThem) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1, 99};  // 99 is outside the vocabulary: ignored
  const std::vector<int32_t> generated = {3, 3, 4};
  std::vector<float> out;
  adjust_logits(logits.data(), 6, p, prompt, generated, &out);
  // Repetition over prompt and output: 0 (2 -> 1), 1 (-1 -> -2), 3 (3 -> 1.5), 4 (-2 -> -4).
  // Then frequency/presence over the output only: 3 seen twice (-1.25), 4 once (-0.75).
  const std::vector<float> expected = {1.0f, -2.0f, 0.5f, 1.5f - 1.25f, -4.0f - 0.75f, 1.0f};
  ASSERT_EQ(out.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(out[i], expected[i]) << i;
}

TEST(AdjustLogits, MinTokensMasksStopAndEosIds) {
  const std::vector<float> logits = {0.0f, 1.0f, 5.0f, 2.0f};
  SamplingParams p;
  p.min_tokens = 2;
  p.eos_token_ids = {2};
  p.stop_token_ids = {3};
  std::vector<float> out;
  const std::vector<int32_t> one = {1};
  adjust_logits(logits.data(), 4, p, {}, one, &out);
  EXPECT_EQ(out[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(sample_token(out.data(), 4, p, 0.5, nullptr), 1);  // greedy after the mask
  p.ignore_eos = true;  // EOS is no stop then, so it is not masked
  adjust_logits(logits.data(), 4, p, {}, one, &out);
  EXPECT_EQ(out[2], 5.0f);
  const std::vector<int32_t> two = {1, 1};
  adjust_logits(logits.data(), 4, p, {}, two, &out);  // min_tokens reached: nothing masked
  EXPECT_EQ(out, logits);
  // A vocabulary of stop tokens only keeps them (no row without a finite logit).
  p.ignore_eos = false;
  p.stop_token_ids = {0, 1, 3};
  adjust_logits(logits.data(), 4, p, {}, one, &out);
  EXPECT_EQ(out, logits);
}

TEST(TokenLogprob, MatchesAFloat64LogSoftmax) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 4.0);
  logits[7] = -std::numeric_limits<float>::infinity();
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  const TokenLogprob result = token_logprob(logits.data(), 50, 11, 5);
  EXPECT_EQ(result.token, 11);
  EXPECT_NEAR(result.logprob, static_cast<double>(logits[11]) - std::log(sum), 1e-12);
  ASSERT_EQ(result.top.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    const int32_t id = result.top[k].first;
    EXPECT_NEAR(result.top[k].second, static_cast<double>(logits[static_cast<size_t>(id)]) - std::log(sum), 1e-12);
    if (k > 0) {
      EXPECT_GE(result.top[k - 1].second, result.top[k].second);
    }
  }
  EXPECT_EQ(token_logprob(logits.data(), 50, 7, 0).logprob, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(token_logprob(logits.data(), 50, 7, 0).top.empty());
}

TEST(StopStrings, AcrossPiecesFirstToEndWins) {
  const std::vector<std::string> stops = {"END", "\n\n", "cd"};
  std::string text;
  size_t searched = 0;
  std::optional<StopMatch> match;
  for (const char* piece : {"ab", "c", "E", "N", "D", "x"}) {
    text += piece;
    match = find_stop_string(text, searched, stops);
    searched = text.size();
    if (match) break;
  }
  // "END" spans three pieces; it is found when its D arrives.
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(text, "abcEND");
  EXPECT_EQ(match->position, 3u);
  EXPECT_EQ(match->stop_index, 0u);
  // Two stops complete in the same piece: the one that ends first wins.
  match = find_stop_string("xxcd\n\nEND", 2, stops);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->stop_index, 2u);
  EXPECT_EQ(match->position, 2u);
  // Occurrences ending at or before old_size were seen before and are not reported again.
  EXPECT_FALSE(find_stop_string("cdxx", 2, stops).has_value());
  EXPECT_TRUE(find_stop_string("cdxx", 1, stops).has_value());
  EXPECT_FALSE(find_stop_string("abc", 0, {""}).has_value());
}

}  // namespace
}  // namespace moert::sampling
