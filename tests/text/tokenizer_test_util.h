// Shared by the tokenizer tests: where the committed test data lives and a per-process cache of the
// loaded tokenizers (loading gpt-oss's parses a 12 MB JSON file).
#pragma once

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "text/tokenizer/tokenizer.h"

namespace moert::text::testing {

// tests/data/tokenizers (MOERT_TOKENIZER_DATA_DIR, set by CMake).
inline std::filesystem::path tokenizer_data_dir() { return MOERT_TOKENIZER_DATA_DIR; }

// The tokenizer of tests/data/tokenizers/<name>, loaded once per test process.
inline const Tokenizer& cached_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer_data_dir() / name));
  return *slot;
}

// A string as a JSON-style literal, for failure messages.
inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02X", u);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace moert::text::testing
