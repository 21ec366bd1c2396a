// A Hugging Face `tokenizers`-compatible tokenizer (docs/tokenizer.md): loads a checkpoint's
// tokenizer.json and gives the same ids and text as the Rust library for the components the
// Qwen3, DeepSeek-V3 and gpt-oss tokenizers use (and the usual Llama-style ones):
//   normalizers    NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence
//   pre-tokenizers Split, ByteLevel, Metaspace, Digits, Sequence
//   model          BPE (merges as "a b" strings or [a, b] pairs; byte_fallback, unk, fuse_unk,
//                  ignore_merges, continuing_subword_prefix, end_of_word_suffix)
//   decoders       ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence
//   added tokens   matched before everything else, with lstrip/rstrip/single_word/normalized/special
// post_processor, truncation and padding are ignored: encode() is encode(text, add_special_tokens =
// false) with no length limit.
//
// Usage:
//   const Tokenizer tokenizer = Tokenizer::load(checkpoint_dir);
//   std::vector<int32_t> ids = tokenizer.encode("Hello");
//   std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/false);
//   IncrementalDecoder stream(tokenizer, /*skip_special_tokens=*/true);
//   for (int32_t id : generated) std::cout << stream.push(id);
//   std::cout << stream.finish();
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moert::text {

struct TokenizerData;  // the loaded pipeline (tokenizer.cpp)
class DecodeStream;

// Immutable once loaded; copies share the loaded data, and every method may be called from
// several threads at once.
class Tokenizer {
 public:
  // Reads dir/tokenizer.json, and dir/tokenizer_config.json if present (only for bos_id/eos_id).
  // Throws std::runtime_error with one message naming the file and the offending component for a
  // missing, malformed or unsupported file.
  static Tokenizer load(const std::filesystem::path& dir);
  // The same from the text of a tokenizer.json (and optionally of a tokenizer_config.json);
  // `source_name` names the origin in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             std::string_view source_name = "tokenizer.json");

  // Ids of `text` without special tokens around it (add_special_tokens = false). Added tokens
  // written in the text (e.g. "<|im_start|>") are recognised. Bytes that are not valid UTF-8 are
  // first replaced by U+FFFD (one per maximal ill-formed subpart), as the Rust library sees its
  // input only as valid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;

  // Text of `ids`. Ids that name no token are skipped; with skip_special_tokens, so are the
  // special added tokens. Invalid UTF-8 produced by byte-level tokens becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The id of a token string (added tokens first, then the model's vocabulary).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of an id (as decode sees it, before decoders), or nullopt.
  std::optional<std::string> id_to_token(int32_t id) const;
  // True for ids of added tokens marked "special" (the ones skip_special_tokens drops).
  bool is_special(int32_t id) const;
  // 1 + the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;
  // bos_token / eos_token of tokenizer_config.json, when present and known to the vocabulary.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  friend class IncrementalDecoder;
  explicit Tokenizer(std::shared_ptr<const TokenizerData> data);
  std::shared_ptr<const TokenizerData> data_;
};

// Streaming decode of generated ids. push() returns the text that became final with this id (often
// empty, e.g. while a multi-byte character is incomplete); finish() returns what is still held.
// Invariant: every returned string is valid UTF-8, and the concatenation of all push() results and
// finish() equals tokenizer.decode(all ids pushed, skip_special_tokens).
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);
  ~IncrementalDecoder();
  IncrementalDecoder(IncrementalDecoder&&) noexcept;
  IncrementalDecoder& operator=(IncrementalDecoder&&) noexcept;

  std::string push(int32_t id);
  // Ends the stream; call once, after the last push().
  std::string finish();

 private:
  std::shared_ptr<const TokenizerData> data_;  // keeps the decoder steps alive for stream_
  bool skip_special_tokens_;
  std::unique_ptr<DecodeStream> stream_;
};

}  // namespace moert::text
