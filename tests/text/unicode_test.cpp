// UTF-8 repair, byte-level alphabet, Oniguruma-compatible regex classes and Hugging Face-compatible
// Unicode normalization, checked over every code point.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/text/tokenizer_test_util.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/regex.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, RepairsMaximalSubparts) {
  // The example of Unicode 15 section 3.9 (Table 3-8): one U+FFFD per maximal subpart.
  EXPECT_EQ(to_valid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate: ED then A0 fails
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), kFffd + kFffd);                              // overlong
  EXPECT_EQ(to_valid_utf8("ok\xE2\x82"), "ok" + kFffd);                             // truncated at the end
  EXPECT_EQ(to_valid_utf8("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF0\x9F\x98"));
}

TEST(Utf8Test, RepairerStreamsLikeWholeRepair) {
  const std::string bytes = "a\xF0\x9F\x98\x80\xE4\xBD\xA0\xFF\xE4\xBD\x41\xF0\x9F";
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    Utf8Repairer repairer;
    std::string out, first, second, last;
    repairer.append(bytes.substr(0, cut), first);
    repairer.append(bytes.substr(cut), second);
    repairer.finish(last);
    EXPECT_TRUE(is_valid_utf8(first) && is_valid_utf8(second) && is_valid_utf8(last)) << cut;
    EXPECT_EQ(first + second + last, to_valid_utf8(bytes)) << cut;
  }
}

TEST(ByteLevelTest, Gpt2Alphabet) {
  EXPECT_EQ(kByteLevelAlphabet.byte_to_char[' '], U'\u0120');   // 'Ġ'
  EXPECT_EQ(kByteLevelAlphabet.byte_to_char['\n'], U'\u010A');  // 'Ċ'
  EXPECT_EQ(kByteLevelAlphabet.byte_to_char['A'], U'A');
  EXPECT_EQ(kByteLevelAlphabet.byte_to_char[0xAD], U'\u0143');
  std::set<char32_t> distinct(kByteLevelAlphabet.byte_to_char.begin(), kByteLevelAlphabet.byte_to_char.end());
  EXPECT_EQ(distinct.size(), 256u);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
  // A token with a character outside the alphabet keeps its own bytes.
  EXPECT_EQ(byte_level_to_bytes("<｜User｜>"), "<｜User｜>");
}

TEST(RegexTest, TranslatesOnigurumaSyntax) {
  EXPECT_EQ(translate_onig_pattern(R"(\u4e00)"), R"(\x{4e00})");
  EXPECT_EQ(translate_onig_pattern("a{,3}"), "a{0,3}");
  EXPECT_EQ(translate_onig_pattern("(?m:.)"), "(?s:.)");
  EXPECT_EQ(translate_onig_pattern(R"(\s)"), R"([\t\n\x0B\f\r\x{85}\p{Z}])");
  EXPECT_EQ(translate_onig_pattern(R"(\p{Lt})"), R"([\p{Lt}])");
  EXPECT_THROW(translate_onig_pattern("[a-z&&[^aeiou]]"), std::invalid_argument);
  EXPECT_THROW(Regex::from_onig("(unclosed"), std::invalid_argument);
}

TEST(RegexTest, FindAllSkipsEmptyMatchAfterMatch) {
  // Oniguruma's find_iter: "a*" on "baaac" matches "" at 0, "aaa" at 1..4, "" at 5 (not at 4).
  const auto matches = Regex::from_onig("a*").find_all("baaac");
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_EQ(matches[0].start, 0u);
  EXPECT_EQ(matches[0].end, 0u);
  EXPECT_EQ(matches[1].start, 1u);
  EXPECT_EQ(matches[1].end, 4u);
  EXPECT_EQ(matches[2].start, 5u);
  EXPECT_EQ(Regex::literal("a.b").find_all("axb a.b").size(), 1u);
}

// The translated classes hold exactly Oniguruma's code points (tests/data/tokenizers/onig_classes.json,
// dumped from the regex engine of Hugging Face `tokenizers`).
TEST(RegexTest, ClassesMatchOniguruma) {
  std::ifstream in(testing::tokenizer_data_dir() / "onig_classes.json");
  ASSERT_TRUE(in.good());
  const auto classes = nlohmann::json::parse(in);
  // Every scalar value once, in order, and where each starts.
  std::string all;
  std::vector<char32_t> codepoint_at(0);
  std::vector<size_t> offsets;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    offsets.push_back(all.size());
    codepoint_at.push_back(c);
    append_utf8(all, c);
  }
  for (const auto& [name, ranges] : classes.items()) {
    std::vector<bool> expected(0x110000, false);
    for (const auto& range : ranges) {
      for (auto c = range[0].get<uint32_t>(); c <= range[1].get<uint32_t>(); ++c) expected[c] = true;
    }
    for (const bool negated : {false, true}) {
      const std::string pattern = negated ? "[^" + name + "]" : name;
      std::vector<bool> actual(0x110000, false);
      for (const ByteSpan& m : Regex::from_onig(pattern).find_all(all)) {
        const size_t index = std::lower_bound(offsets.begin(), offsets.end(), m.start) - offsets.begin();
        ASSERT_EQ(offsets[index], m.start);
        actual[codepoint_at[index]] = true;
      }
      std::string missing, extra;
      size_t num_wrong = 0;
      for (char32_t c = 0; c <= 0x10FFFF; ++c) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        if (actual[c] == (expected[c] != negated)) continue;
        ++num_wrong;
        char buffer[16];
        std::snprintf(buffer, sizeof buffer, " %X", static_cast<unsigned>(c));
        (actual[c] ? extra : missing) += num_wrong <= 40 ? buffer : "";
      }
      // The one known difference: U+1171E is Mn in PCRE2's Unicode 14 tables and Mc in Unicode 17.
      const bool known = (name == "\\p{Mn}" || name == "\\p{Mc}") && num_wrong == 1;
      EXPECT_TRUE(num_wrong == 0 || known) << pattern << ": " << num_wrong << " code points differ; missing:"
                                           << missing << "; extra:" << extra;
    }
  }
}

// Two 32-bit FNV-1a hashes side by side, as tests/text/make_tokenizer_oracle.js computes them.
std::string fnv64(std::string_view bytes) {
  uint32_t h1 = 0x811c9dc5u, h2 = 0x2c9277b5u;
  for (const char c : bytes) {
    h1 = (h1 ^ static_cast<unsigned char>(c)) * 0x01000193u;
    h2 = (h2 ^ static_cast<unsigned char>(c)) * 0x01000193u;
  }
  char buffer[20];
  std::snprintf(buffer, sizeof buffer, "%08x%08x", h1, h2);
  return buffer;
}

// For every code point c: c, c + U+0334, U+0345 + c, each followed by U+0001.
std::string probe_block(uint32_t block, uint32_t block_size) {
  std::string s;
  for (char32_t c = block * block_size; c < (block + 1) * block_size; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    append_utf8(s, c);
    s += "\x01";
    append_utf8(s, c);
    s += "\xCC\xB4\x01\xCD\x85";
    append_utf8(s, c);
    s += "\x01";
  }
  return s;
}

// NFC/NFD/NFKC/NFKD and Lowercase agree with Hugging Face's on every code point
// (tests/data/tokenizers/hf_unicode.json: hashes per block of code points).
TEST(UnicodeTest, NormalizersMatchHuggingFace) {
  std::ifstream in(testing::tokenizer_data_dir() / "hf_unicode.json");
  ASSERT_TRUE(in.good());
  const auto data = nlohmann::json::parse(in);
  const auto block_size = data.at("block_size").get<uint32_t>();
  const std::pair<const char*, std::function<std::string(const std::string&)>> forms[] = {
      {"NFC", [](const std::string& s) { return normalize_unicode(s, NormalForm::kNfc); }},
      {"NFD", [](const std::string& s) { return normalize_unicode(s, NormalForm::kNfd); }},
      {"NFKC", [](const std::string& s) { return normalize_unicode(s, NormalForm::kNfkc); }},
      {"NFKD", [](const std::string& s) { return normalize_unicode(s, NormalForm::kNfkd); }},
      {"Lowercase", [](const std::string& s) { return to_lowercase(s); }},
  };
  for (const auto& [name, apply] : forms) {
    const auto& hashes = data.at(name);
    ASSERT_EQ(hashes.size() * block_size, 0x110000u) << name;
    for (uint32_t block = 0; block < hashes.size(); ++block) {
      EXPECT_EQ(fnv64(apply(probe_block(block, block_size))), hashes[block].get<std::string>())
          << name << " differs from Hugging Face for code points " << std::hex << block * block_size << ".."
          << (block + 1) * block_size - 1;
    }
  }
  // The library's inert table is the one recorded from `tokenizers`.
  const auto& inert = data.at("normalization_inert");
  const auto table = hf_normalization_inert();
  ASSERT_EQ(inert.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(inert[i][0].get<uint32_t>(), table[i].first);
    EXPECT_EQ(inert[i][1].get<uint32_t>(), table[i].last);
  }
  // A composition newer than those tables is not made (U+11935 U+11930 would be U+11938).
  EXPECT_EQ(normalize_unicode("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", NormalForm::kNfc),
            "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
}

}  // namespace
}  // namespace moert::text
