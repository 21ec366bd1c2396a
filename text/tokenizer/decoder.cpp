#include "text/tokenizer/decoder.h"

#include <functional>

#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {

// A stage sees a stream of tokens cut into chunks: a token is the concatenation of the chunks from
// one with starts_token to one with ends_token (the same chunk may do both). Upstream stages that
// fuse their output (ByteLevel, Fuse) produce one token whose end comes only with finish().
struct Chunk {
  std::string_view text;
  bool starts_token = true;
  bool ends_token = true;
};
using Emit = std::function<void(const Chunk&)>;

class DecodeStage {
 public:
  virtual ~DecodeStage() = default;
  virtual void push(const Chunk& chunk, const Emit& emit) = 0;
  // The stream ended: an open token ends here.
  virtual void finish(const Emit& emit) = 0;
};

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Collects chunks into whole tokens for stages whose result depends on the whole token.
class TokenAssembler {
 public:
  template <typename OnToken>
  void push(const Chunk& chunk, OnToken&& on_token) {
    if (chunk.starts_token && chunk.ends_token && !open_) {
      on_token(chunk.text);
      return;
    }
    if (chunk.starts_token && open_) flush(on_token);
    buffer_.append(chunk.text);
    open_ = true;
    if (chunk.ends_token) flush(on_token);
  }
  template <typename OnToken>
  void finish(OnToken&& on_token) {
    if (open_) flush(on_token);
  }

 private:
  template <typename OnToken>
  void flush(OnToken&& on_token) {
    const std::string token = std::move(buffer_);
    buffer_.clear();
    open_ = false;
    on_token(std::string_view(token));
  }
  std::string buffer_;
  bool open_ = false;
};

// All tokens' bytes (byte-level alphabet mapped back) as one token of repaired UTF-8.
class ByteLevelStage final : public DecodeStage {
 public:
  void push(const Chunk& chunk, const Emit& emit) override {
    assembler_.push(chunk, [&](std::string_view token) {
      std::string text;
      repairer_.append(byte_level_to_bytes(token), text);
      if (!text.empty()) {
        emit({text, !started_, false});
        started_ = true;
      }
    });
  }
  void finish(const Emit& emit) override {
    assembler_.finish([&](std::string_view token) {
      std::string text;
      repairer_.append(byte_level_to_bytes(token), text);
      if (!text.empty()) {
        emit({text, !started_, false});
        started_ = true;
      }
    });
    std::string rest;
    repairer_.finish(rest);
    emit({rest, !started_, true});  // even with no input the output is one (empty) token
  }

 private:
  TokenAssembler assembler_;
  Utf8Repairer repairer_;
  bool started_ = false;
};

// All tokens joined into one.
class FuseStage final : public DecodeStage {
 public:
  void push(const Chunk& chunk, const Emit& emit) override {
    emit({chunk.text, !started_, false});
    started_ = true;
  }
  void finish(const Emit& emit) override { emit({"", !started_, true}); }

 private:
  bool started_ = false;
};

// Runs of "<0xNN>" tokens become the text of their bytes if that is valid UTF-8, else one U+FFFD
// per byte; the run is decided when a non-byte token follows or the stream ends.
class ByteFallbackStage final : public DecodeStage {
 public:
  void push(const Chunk& chunk, const Emit& emit) override {
    assembler_.push(chunk, [&](std::string_view token) { on_token(token, emit); });
  }
  void finish(const Emit& emit) override {
    assembler_.finish([&](std::string_view token) { on_token(token, emit); });
    flush(emit);
  }

 private:
  // Hugging Face's test: 6 bytes, "<0x" ... ">", the middle two parsed as a base-16 u8 (which
  // accepts a leading '+').
  static std::optional<unsigned char> byte_of(std::string_view token) {
    if (token.size() != 6 || token.substr(0, 3) != "<0x" || token.back() != '>') return std::nullopt;
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const char hi = token[3], lo = token[4];
    if (hi == '+')
      return digit(lo) >= 0 ? std::optional<unsigned char>(static_cast<unsigned char>(digit(lo))) : std::nullopt;
    if (digit(hi) < 0 || digit(lo) < 0) return std::nullopt;
    return static_cast<unsigned char>(digit(hi) * 16 + digit(lo));
  }
  void on_token(std::string_view token, const Emit& emit) {
    if (const auto byte = byte_of(token)) {
      pending_.push_back(static_cast<char>(*byte));
      return;
    }
    flush(emit);
    emit({token, true, true});
  }
  void flush(const Emit& emit) {
    if (pending_.empty()) return;
    if (is_valid_utf8(pending_)) {
      emit({pending_, true, true});
    } else {
      for (size_t i = 0; i < pending_.size(); ++i) emit({kReplacementChar, true, true});
    }
    pending_.clear();
  }
  TokenAssembler assembler_;
  std::string pending_;
};

// The replacement character becomes a space; in the first token it is dropped (unless the
// prepend scheme is "never").
class MetaspaceStage final : public DecodeStage {
 public:
  explicit MetaspaceStage(const DecoderStep& step) : step_(step) {}
  void push(const Chunk& chunk, const Emit& emit) override {
    if (chunk.starts_token) ++num_tokens_;
    const bool drop = num_tokens_ == 1 && step_.prepend_scheme != PrependScheme::kNever;
    std::string text;
    text.reserve(chunk.text.size());
    for (size_t pos = 0; pos < chunk.text.size();) {
      const size_t start = pos;
      if (next_codepoint(chunk.text, pos) == step_.replacement) {
        if (!drop) text.push_back(' ');
      } else {
        text.append(chunk.text.substr(start, pos - start));
      }
    }
    emit({text, chunk.starts_token, chunk.ends_token});
  }
  void finish(const Emit&) override {}

 private:
  const DecoderStep& step_;
  size_t num_tokens_ = 0;
};

// Per token: up to strip_start leading and strip_stop trailing strip_content characters removed.
// Streamed, the trailing candidates are held back until a different character follows.
class StripStage final : public DecodeStage {
 public:
  explicit StripStage(const DecoderStep& step) : step_(step) {}
  void push(const Chunk& chunk, const Emit& emit) override {
    if (chunk.starts_token) {
      leading_left_ = step_.strip_start;
      held_.clear();
      held_count_ = 0;
      open_ = true;
    }
    std::string text;
    for (size_t pos = 0; pos < chunk.text.size();) {
      const size_t start = pos;
      const char32_t c = next_codepoint(chunk.text, pos);
      const std::string_view bytes = chunk.text.substr(start, pos - start);
      if (leading_left_ > 0 && c == step_.strip_content) {
        --leading_left_;
        continue;
      }
      leading_left_ = 0;
      if (step_.strip_stop > 0 && c == step_.strip_content) {
        held_.append(bytes);
        if (++held_count_ > step_.strip_stop) {
          // The oldest held character can no longer be among the last strip_stop.
          size_t first = 0;
          next_codepoint(held_, first);
          text.append(held_, 0, first);
          held_.erase(0, first);
          --held_count_;
        }
        continue;
      }
      text += held_;
      held_.clear();
      held_count_ = 0;
      text.append(bytes);
    }
    if (chunk.ends_token) end_token();
    emit({text, chunk.starts_token, chunk.ends_token});
  }
  void finish(const Emit& emit) override {
    if (!open_) return;
    end_token();
    emit({"", false, true});
  }

 private:
  void end_token() {
    held_.clear();  // the trailing strip_content characters are removed
    held_count_ = 0;
    open_ = false;
  }
  const DecoderStep& step_;
  size_t leading_left_ = 0;
  std::string held_;
  size_t held_count_ = 0;
  bool open_ = false;
};

// Per token: every match of the pattern replaced by the content.
class ReplaceStage final : public DecodeStage {
 public:
  explicit ReplaceStage(const DecoderStep& step) : step_(step) {}
  void push(const Chunk& chunk, const Emit& emit) override {
    assembler_.push(chunk, [&](std::string_view token) { on_token(token, emit); });
  }
  void finish(const Emit& emit) override {
    assembler_.finish([&](std::string_view token) { on_token(token, emit); });
  }

 private:
  void on_token(std::string_view token, const Emit& emit) {
    std::string text;
    for (const SplitMatch& m : find_split_matches(*step_.pattern, token)) {
      if (m.is_match) {
        text += step_.content;
      } else {
        text.append(token.substr(m.start, m.end - m.start));
      }
    }
    emit({text, true, true});
  }
  const DecoderStep& step_;
  TokenAssembler assembler_;
};

// No decoder: tokens joined with single spaces.
class JoinWithSpacesStage final : public DecodeStage {
 public:
  void push(const Chunk& chunk, const Emit& emit) override {
    if (chunk.starts_token && seen_token_) emit({" ", false, false});
    if (chunk.starts_token) seen_token_ = true;
    emit(chunk);
  }
  void finish(const Emit&) override {}

 private:
  bool seen_token_ = false;
};

}  // namespace

DecodeStream::DecodeStream(const std::vector<DecoderStep>& steps, bool has_decoder) {
  if (!has_decoder) {
    stages_.push_back(std::make_unique<JoinWithSpacesStage>());
    return;
  }
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: stages_.push_back(std::make_unique<ByteLevelStage>()); break;
      case DecoderStep::Kind::kMetaspace: stages_.push_back(std::make_unique<MetaspaceStage>(step)); break;
      case DecoderStep::Kind::kByteFallback: stages_.push_back(std::make_unique<ByteFallbackStage>()); break;
      case DecoderStep::Kind::kFuse: stages_.push_back(std::make_unique<FuseStage>()); break;
      case DecoderStep::Kind::kStrip: stages_.push_back(std::make_unique<StripStage>(step)); break;
      case DecoderStep::Kind::kReplace: stages_.push_back(std::make_unique<ReplaceStage>(step)); break;
    }
  }
}

DecodeStream::~DecodeStream() = default;
DecodeStream::DecodeStream(DecodeStream&&) noexcept = default;
DecodeStream& DecodeStream::operator=(DecodeStream&&) noexcept = default;

namespace {
// The emitter feeding stage `index` (or `out` past the last stage).
Emit emitter_for(std::vector<std::unique_ptr<DecodeStage>>& stages, size_t index, std::string& out) {
  if (index == stages.size()) {
    return [&out](const Chunk& chunk) { out.append(chunk.text); };
  }
  return
      [&stages, index, &out](const Chunk& chunk) { stages[index]->push(chunk, emitter_for(stages, index + 1, out)); };
}
}  // namespace

void DecodeStream::push(std::string_view token, std::string& out) {
  if (stages_.empty()) {
    out.append(token);  // an empty Sequence decoder: tokens concatenated
    return;
  }
  emitter_for(stages_, 0, out)(Chunk{token, true, true});
}

void DecodeStream::finish(std::string& out) {
  for (size_t i = 0; i < stages_.size(); ++i) stages_[i]->finish(emitter_for(stages_, i + 1, out));
}

}  // namespace moert::text
