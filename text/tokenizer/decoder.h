// Decoders of tokenizer.json (docs/tokenizer.md, "Decoding"), run as a stream: token strings go in
// one at a time and text comes out as soon as it is final. Tokenizer::decode runs the same stream
// over all tokens at once, so streamed and whole decoding agree by construction.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/pre_tokenizer.h"
#include "text/tokenizer/regex.h"

namespace moert::text {

struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  char32_t replacement = U'\u2581';                       // kMetaspace
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace: kNever keeps a leading one
  char32_t strip_content = U' ';                          // kStrip
  size_t strip_start = 0;                                 // kStrip: at most this many in front
  size_t strip_stop = 0;                                  // kStrip: at most this many at the end
  std::optional<Regex> pattern;                           // kReplace (a literal is an escaped Regex)
  std::string content;                                    // kReplace
};

class DecodeStage;

// One decoding in progress. `steps` are the decoder chain (a Sequence flattened) and must outlive
// the stream; without a decoder (has_decoder false) tokens are joined with single spaces, as
// Hugging Face does.
// Invariant: everything appended to `out` by push() and finish() is valid UTF-8 and their
// concatenation is the whole decode; text that may still change (an incomplete UTF-8 character,
// a run of byte-fallback tokens, trailing characters a Strip may remove) is held back.
class DecodeStream {
 public:
  DecodeStream(const std::vector<DecoderStep>& steps, bool has_decoder);
  ~DecodeStream();
  DecodeStream(DecodeStream&&) noexcept;
  DecodeStream& operator=(DecodeStream&&) noexcept;

  // Precondition: token is valid UTF-8.
  void push(std::string_view token, std::string& out);
  // Ends the stream; push() must not be called afterwards.
  void finish(std::string& out);

 private:
  std::vector<std::unique_ptr<DecodeStage>> stages_;
};

}  // namespace moert::text
