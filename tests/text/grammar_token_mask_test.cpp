// Token masks (text/grammar/token_mask.h): the trie walk equals a brute-force check of every id,
// on a hand-made vocabulary and on the real Qwen3 vocabulary (151,669 ids); the cache returns the
// same mask for a state seen before.
#include <algorithm>
#include <chrono>
#include <limits>

#include <gtest/gtest.h>

#include "text/grammar/constraint.h"
#include "text/grammar/token_mask.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/tokenizer.h"

namespace moert::grammar {
namespace {

// The mask by advancing every id's bytes on its own.
TokenBitmask brute_force(GrammarMasks& masks, int32_t state) {
  TokenBitmask mask((static_cast<size_t>(masks.trie().vocab_size()) + 63) / 64, 0);
  for (int32_t id = 0; id < masks.trie().vocab_size(); ++id) {
    if (masks.advance_token(state, id) != Automaton::kDead) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  return mask;
}

std::vector<int32_t> allowed_ids(const TokenBitmask& mask, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if (mask_allows(mask, id)) ids.push_back(id);
  }
  return ids;
}

TEST(GrammarTokenMask, SmallVocabularyExactly) {
  const std::vector<std::string> vocab = {"{", "}", "{\"", "a", "\"", " ", "", "\"a\":", "1", "12", "{}", "x"};
  auto trie = std::make_shared<const TokenTrie>(vocab);
  GrammarMasks masks(compile_constraint("json_schema", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})").value(), trie);
  const int32_t s0 = masks.automaton().initial();
  EXPECT_EQ(allowed_ids(masks.mask(s0), 12), (std::vector<int32_t>{0, 2}));  // "{" and "{\"", not "{}"
  const int32_t s1 = masks.advance_token(s0, 0);
  EXPECT_EQ(allowed_ids(masks.mask(s1), 12), (std::vector<int32_t>{4, 5, 7}));  // '"', ' ', '"a":'
  const int32_t s2 = masks.advance_token(s1, 7);
  EXPECT_EQ(allowed_ids(masks.mask(s2), 12), (std::vector<int32_t>{5, 8, 9}));
  const int32_t s3 = masks.advance_token(s2, 9);
  EXPECT_EQ(allowed_ids(masks.mask(s3), 12), (std::vector<int32_t>{1, 5, 8, 9}));
  EXPECT_FALSE(masks.automaton().accepting(s3));
  const int32_t s4 = masks.advance_token(s3, 1);
  EXPECT_TRUE(masks.automaton().accepting(s4));
  EXPECT_FALSE(masks.automaton().can_continue(s4));
  EXPECT_TRUE(allowed_ids(masks.mask(s4), 12).empty());
}

// A grammar with no string at all (an empty class) has a valid initial state that allows nothing
// (the fuzzer's crash: advance on a missing state 0).
TEST(GrammarTokenMask, EmptyLanguageAllowsNothing) {
  auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"a", "[", "]"});
  GrammarMasks masks(compile_constraint("regex", "^[]{1,3}$").value(), trie);
  const int32_t s0 = masks.automaton().initial();
  EXPECT_FALSE(masks.automaton().accepting(s0));
  EXPECT_FALSE(masks.automaton().can_continue(s0));
  EXPECT_EQ(masks.automaton().advance(s0, 'a'), Automaton::kDead);
  EXPECT_TRUE(allowed_ids(masks.mask(s0), 3).empty());
}

// apply_token_mask: every id the mask lacks becomes -inf, the others keep their value; ids past
// the mask's vocabulary are never allowed. Rows of 200 ids cross whole, empty and partial words.
TEST(GrammarTokenMask, ApplyMaskSetsExactlyTheDisallowedIdsToMinusInfinity) {
  const int32_t mask_vocab = 190, vocab = 200;
  TokenBitmask mask(3, 0);
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < 64; ++id) allowed.push_back(id);   // word 0 full
  for (int32_t id : {129, 130, 191}) allowed.push_back(id);     // word 1 empty, word 2 partial; 191 >= mask_vocab
  for (int32_t id : allowed) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab; ++id) row[static_cast<size_t>(id)] = 0.25f * static_cast<float>(id);
  apply_token_mask(mask, mask_vocab, row.data(), vocab);
  for (int32_t id = 0; id < vocab; ++id) {
    const bool keep = id < mask_vocab && std::find(allowed.begin(), allowed.end(), id) != allowed.end();
    if (keep) {
      EXPECT_EQ(row[static_cast<size_t>(id)], 0.25f * static_cast<float>(id)) << id;
    } else {
      EXPECT_EQ(row[static_cast<size_t>(id)], -std::numeric_limits<float>::infinity()) << id;
    }
  }
}

// A full cache is emptied before the next walk: masks stay exact, the cache stays bounded, and
// a state walked again after the clear costs a walk again.
TEST(GrammarTokenMask, BoundedCacheStaysExact) {
  const std::vector<std::string> vocab = {"a", "b", "ab", "ba", "aa", "bb", "abc", "c"};
  auto trie = std::make_shared<const TokenTrie>(vocab);
  GrammarMasks bounded(compile_constraint("regex", "(ab|c)*a{0,3}").value(), trie, /*max_cached_masks=*/2);
  GrammarMasks unbounded(compile_constraint("regex", "(ab|c)*a{0,3}").value(), trie);
  std::vector<int32_t> states{bounded.automaton().initial()}, reference_states{unbounded.automaton().initial()};
  for (char c : std::string("abcabaa")) {
    states.push_back(bounded.automaton().advance(states.back(), static_cast<uint8_t>(c)));
    reference_states.push_back(unbounded.automaton().advance(reference_states.back(), static_cast<uint8_t>(c)));
  }
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < states.size(); ++i) {
      ASSERT_NE(states[i], Automaton::kDead);
      EXPECT_EQ(bounded.mask(states[i]), brute_force(unbounded, reference_states[i])) << i;
      EXPECT_LE(bounded.num_cached_masks(), 2u);
    }
  }
  EXPECT_GT(bounded.num_mask_walks(), 4u);
}

// The states of a counted repetition share masks while the bound is more than the longest
// token's bytes away (horizon classes, docs/structured-output.md §Token masks), and every mask
// still equals the brute-force one, the states near the bound included.
TEST(GrammarTokenMask, CountedRepetitionSharesMasksExactly) {
  const std::vector<std::string> vocab = {"a", "b", "ab", "ba", "aab", "c", "bc", "abc", "", "cc"};
  auto trie = std::make_shared<const TokenTrie>(vocab);
  GrammarMasks masks(compile_constraint("regex", "[ab]{40}c").value(), trie);
  std::vector<int32_t> states{masks.automaton().initial()};
  for (int i = 0; i < 40; ++i) states.push_back(masks.automaton().advance(states.back(), i % 3 ? 'a' : 'b'));
  states.push_back(masks.automaton().advance(states.back(), 'c'));
  for (size_t i = 0; i < states.size(); ++i) {
    ASSERT_NE(states[i], Automaton::kDead);
    EXPECT_EQ(masks.mask(states[i]), brute_force(masks, states[i])) << i;
  }
  // 42 distinct states; the first 37 counts (more than 3 bytes, the longest token, from the 'c')
  // are one class, so one walk serves them.
  EXPECT_LE(masks.num_mask_walks(), 6u);

  // Below an upper bound (nested optional rules, one per remaining count) likewise.
  GrammarMasks upper(compile_constraint("regex", "[ab]{0,40}c").value(), trie);
  std::vector<int32_t> upper_states{upper.automaton().initial()};
  for (int i = 0; i < 40; ++i) upper_states.push_back(upper.automaton().advance(upper_states.back(), i % 3 ? 'a' : 'b'));
  for (size_t i = 0; i < upper_states.size(); ++i) {
    ASSERT_NE(upper_states[i], Automaton::kDead);
    EXPECT_EQ(upper.mask(upper_states[i]), brute_force(upper, upper_states[i])) << i;
  }
  EXPECT_LE(upper.num_mask_walks(), 6u);
}

std::vector<std::string> qwen3_token_bytes(const text::Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) continue;
    if (auto token = tokenizer.id_to_token(id)) bytes[static_cast<size_t>(id)] = text::byte_level_to_bytes(*token);
  }
  return bytes;
}

TEST(GrammarTokenMask, Qwen3VocabularyMatchesBruteForce) {
  const text::Tokenizer tokenizer = text::Tokenizer::load(std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3");
  ASSERT_EQ(tokenizer.vocab_size(), 151669);
  auto trie = std::make_shared<const TokenTrie>(qwen3_token_bytes(tokenizer));
  GrammarMasks masks(compile_constraint("json_schema", R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},
      "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"enum":["a","bc"]},"maxItems":3}},
      "required":["name","age"],"additionalProperties":false})").value(), trie);
  // States along a valid instance, one byte at a time.
  const std::string instance = R"({"name": "Zoë \"Z\"", "age": 42, "email": "z.o@x-y.org", "tags": ["bc", "a"]})";
  int32_t state = masks.automaton().initial();
  std::vector<int32_t> states{state};
  for (char c : instance) {
    state = masks.automaton().advance(state, static_cast<uint8_t>(c));
    ASSERT_NE(state, Automaton::kDead) << c;
    states.push_back(state);
  }
  EXPECT_TRUE(masks.automaton().accepting(state));
  double walk_s = 0.0, cached_s = 0.0;
  int checked = 0;
  for (size_t i = 0; i < states.size(); i += 5) {
    const auto t0 = std::chrono::steady_clock::now();
    const TokenBitmask& mask = masks.mask(states[i]);
    const auto t1 = std::chrono::steady_clock::now();
    const TokenBitmask& again = masks.mask(states[i]);
    const auto t2 = std::chrono::steady_clock::now();
    walk_s += std::chrono::duration<double>(t1 - t0).count();
    cached_s += std::chrono::duration<double>(t2 - t1).count();
    EXPECT_EQ(&mask, &again);
    ASSERT_EQ(mask, brute_force(masks, states[i])) << "state after " << instance.substr(0, i);
    ++checked;
  }
  // Special tokens never pass a grammar, whatever their text.
  const int32_t im_end = *tokenizer.token_to_id("<|im_end|>");
  for (int32_t s : states) EXPECT_FALSE(mask_allows(masks.mask(s), im_end));
  std::printf("mask over 151669 ids: %.3f ms per first walk, %.4f ms cached (%d states)\n", 1e3 * walk_s / checked,
              1e3 * cached_s / checked, checked);
}

// A long free string over the real vocabulary (bench/structured.sh's stress case, shorter), with
// a lower and with an upper length bound: the masks along an instance equal the brute-force
// ones, and the counts far from the bound share their walks.
TEST(GrammarTokenMask, Qwen3LongStringSharesMasksExactly) {
  const text::Tokenizer tokenizer = text::Tokenizer::load(std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3");
  auto trie = std::make_shared<const TokenTrie>(qwen3_token_bytes(tokenizer));
  std::string text;
  while (text.size() < 360) text += R"(Zoë said \"hi\" 中文 \u00e9 )";  // 228 characters
  const std::string instance = "{\"t\": \"" + text + "\"}";
  for (const char* length : {R"("minLength":200)", R"("maxLength":240)"}) {
    SCOPED_TRACE(length);
    GrammarMasks masks(compile_constraint("json_schema", std::string(R"({"type":"object","required":["t"],)") +
                                                             R"("additionalProperties":false,"properties":{"t":{"type":"string",)" +
                                                             length + "}}}")
                           .value(),
                       trie);
    std::vector<int32_t> states{masks.automaton().initial()};
    for (char c : instance) {
      states.push_back(masks.automaton().advance(states.back(), static_cast<uint8_t>(c)));
      ASSERT_NE(states.back(), Automaton::kDead) << states.size();
    }
    for (size_t i = 0; i < states.size(); i += 7) {
      ASSERT_EQ(masks.mask(states[i]), brute_force(masks, states[i])) << "state after " << instance.substr(0, i);
    }
    for (int32_t s : states) (void)masks.mask(s);
    // Only the counts within 16 bytes of the bound (and the structure around the string) need
    // their own walk of the short tokens.
    EXPECT_LT(masks.num_mask_walks(), states.size() / 4);
    std::printf("long string (%s): %zu states, %zu walks of the short tokens, %zu masks cached\n", length, states.size(),
                masks.num_mask_walks(), masks.num_cached_masks());
  }
}

}  // namespace
}  // namespace moert::grammar
