// What the engine needs of a tokenizer to produce text (docs/generation.md): a streaming
// decoder per sample, for the output text and stop strings, and single-token text for
// log-probabilities. The engine stays independent of text/: launch/ adapts the checkpoint's
// tokenizer to this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace moert::engine {

class TokenTextStream {
 public:
  virtual ~TokenTextStream() = default;
  // The text that became final with this id (special tokens skipped); valid UTF-8. The
  // concatenation of every push() and finish() is the decode of all ids pushed.
  virtual std::string push(int32_t id) = 0;
  // What is still held back (e.g. an incomplete character); call once, after the last push().
  virtual std::string finish() = 0;
};

class TokenText {
 public:
  virtual ~TokenText() = default;
  virtual std::unique_ptr<TokenTextStream> open_stream() const = 0;
  // The text of one token on its own, special tokens included (may be invalid UTF-8 for a
  // byte-level piece of a character: callers that print it as JSON replace such bytes).
  virtual std::string token_piece(int32_t id) const = 0;
};

}  // namespace moert::engine
