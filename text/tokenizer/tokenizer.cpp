#include "text/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/regular_file.h"
#include "text/tokenizer/tokenizer_data.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

std::string read_whole_file(const std::filesystem::path& path) {
  Result<std::string> text = read_regular_file(path.string(), kMaxTokenizerFileBytes, "a tokenizer file");
  if (!text.is_ok()) throw std::runtime_error("tokenizer: " + text.status().message());
  return std::move(text).value();
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const std::filesystem::path tokenizer_path = dir / "tokenizer.json";
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const std::string tokenizer_json = read_whole_file(tokenizer_path);
  std::string config_json;
  if (std::filesystem::exists(config_path)) config_json = read_whole_file(config_path);
  auto data = std::make_shared<TokenizerData>();
  parse_tokenizer_json(tokenizer_json, tokenizer_path.string(), config_json, config_path.string(), *data);
  return Tokenizer(std::move(data));
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               std::string_view source_name) {
  auto data = std::make_shared<TokenizerData>();
  parse_tokenizer_json(tokenizer_json, source_name, config_json, "tokenizer_config.json", *data);
  return Tokenizer(std::move(data));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerData& d = *data_;
  std::string input = is_valid_utf8(text) ? std::string(text) : to_valid_utf8(text);
  if (input.empty()) return {};

  // 1. Added tokens in the raw input; 2. normalize each stretch between them and find the
  // normalized added tokens in it; 3. pre-tokenize; 4. BPE each remaining piece.
  size_t first_char_length = 0;
  next_codepoint(input, first_char_length);
  std::vector<Piece> raw_parts;
  split_on_added_tokens(d.raw_matcher, d.raw_tokens, Piece{std::move(input), -1, first_char_length}, raw_parts);
  std::vector<Piece> pieces;
  pieces.reserve(raw_parts.size());
  for (Piece& part : raw_parts) {
    if (part.token_id >= 0) {
      pieces.push_back(std::move(part));
      continue;
    }
    if (d.has_normalizer) {
      NormalizedText normalized = normalize(d.normalizer, part.text, part.origin_bytes);
      part.text = std::move(normalized.text);
      part.origin_bytes = normalized.origin_bytes;
      if (part.text.empty()) continue;
    }
    split_on_added_tokens(d.normalized_matcher, d.normalized_tokens, part, pieces);
  }
  pre_tokenize(d.pre_tokenizer, pieces);

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + pieces.size());
  for (const Piece& piece : pieces) {
    if (piece.token_id >= 0) {
      ids.push_back(piece.token_id);
    } else {
      d.model->tokenize(piece.text, ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  IncrementalDecoder decoder(*this, skip_special_tokens);
  std::string text;
  for (const int32_t id : ids) text += decoder.push(id);
  text += decoder.finish();
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = data_->added_by_content.find(token); it != data_->added_by_content.end()) return it->second;
  return data_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = data_->token_string(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool Tokenizer::is_special(int32_t id) const {
  const std::string* token = data_->token_string(id);
  return token != nullptr && data_->special_contents.contains(*token);
}

int32_t Tokenizer::vocab_size() const { return data_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return data_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return data_->eos_id; }

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : data_(tokenizer.data_),
      skip_special_tokens_(skip_special_tokens),
      stream_(std::make_unique<DecodeStream>(data_->decoder, data_->has_decoder)) {}

IncrementalDecoder::~IncrementalDecoder() = default;
IncrementalDecoder::IncrementalDecoder(IncrementalDecoder&&) noexcept = default;
IncrementalDecoder& IncrementalDecoder::operator=(IncrementalDecoder&&) noexcept = default;

std::string IncrementalDecoder::push(int32_t id) {
  std::string text;
  const std::string* token = data_->token_string(id);
  if (token == nullptr) return text;  // ids naming no token are skipped, as Hugging Face does
  if (skip_special_tokens_ && data_->special_contents.contains(*token)) return text;
  stream_->push(*token, text);
  return text;
}

std::string IncrementalDecoder::finish() {
  std::string text;
  stream_->finish(text);
  return text;
}

}  // namespace moert::text
