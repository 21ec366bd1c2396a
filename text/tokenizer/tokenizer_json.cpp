// Reading tokenizer.json (docs/tokenizer.md, "tokenizer.json"): every component is checked here,
// once, and anything unsupported is reported with its place in the file.
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "core/strict_json.h"
#include "text/tokenizer/tokenizer_data.h"
#include "text/tokenizer/unicode.h"

namespace moert::text {
namespace {

using Json = nlohmann::json;

// An error at `where` (a JSON path such as "pre_tokenizer.pretokenizers[1]"); the caller adds the
// file name.
struct LoadError : std::runtime_error {
  LoadError(const std::string& where, const std::string& what) : std::runtime_error(where + ": " + what) {}
};

std::string at(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}
std::string at(const std::string& where, size_t index) { return where + "[" + std::to_string(index) + "]"; }

// A member that may be absent or null.
const Json* find_member(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

const Json& require_member(const Json& object, std::string_view key, const std::string& where) {
  const Json* value = find_member(object, key);
  if (value == nullptr) throw LoadError(at(where, key), "missing");
  return *value;
}

std::string as_string(const Json& value, const std::string& where) {
  if (!value.is_string()) throw LoadError(where, "expected a string, found " + value.dump());
  return value.get<std::string>();
}

bool bool_or(const Json& object, std::string_view key, bool fallback, const std::string& where) {
  const Json* value = find_member(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) throw LoadError(at(where, key), "expected true or false, found " + value->dump());
  return value->get<bool>();
}

size_t size_or(const Json& object, std::string_view key, size_t fallback, const std::string& where) {
  const Json* value = find_member(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_number_unsigned()) throw LoadError(at(where, key), "expected a count, found " + value->dump());
  return value->get<size_t>();
}

std::optional<std::string> string_or_null(const Json& object, std::string_view key, const std::string& where) {
  const Json* value = find_member(object, key);
  if (value == nullptr) return std::nullopt;
  return as_string(*value, at(where, key));
}

// A string of exactly one character (Metaspace replacement, Strip content).
char32_t single_char(const Json& object, std::string_view key, const std::string& where) {
  const std::string s = as_string(require_member(object, key, where), at(where, key));
  if (s.empty() || !is_valid_utf8(s)) throw LoadError(at(where, key), "expected one character, found \"" + s + "\"");
  size_t pos = 0;
  const char32_t c = next_codepoint(s, pos);
  if (pos != s.size()) throw LoadError(at(where, key), "expected one character, found \"" + s + "\"");
  return c;
}

std::string type_of(const Json& component, const std::string& where) {
  if (!component.is_object()) throw LoadError(where, "expected an object, found " + component.dump());
  return as_string(require_member(component, "type", where), at(where, "type"));
}

[[noreturn]] void unsupported(const std::string& where, std::string_view kind, const std::string& type,
                              std::string_view supported) {
  throw LoadError(where, "unsupported " + std::string(kind) + " type \"" + type + "\" (supported: " +
                             std::string(supported) + ")");
}

// {"String": "..."} (a literal) or {"Regex": "..."} (Oniguruma syntax).
Regex parse_pattern(const Json& object, const std::string& where) {
  const std::string pattern_where = at(where, "pattern");
  const Json& pattern = require_member(object, "pattern", where);
  try {
    if (pattern.is_object() && pattern.size() == 1) {
      if (const Json* s = find_member(pattern, "String"))
        return Regex::literal(as_string(*s, at(pattern_where, "String")));
      if (const Json* r = find_member(pattern, "Regex"))
        return Regex::from_onig(as_string(*r, at(pattern_where, "Regex")));
    }
  } catch (const std::invalid_argument& e) {
    throw LoadError(pattern_where, e.what());
  }
  throw LoadError(pattern_where, "expected {\"String\": ...} or {\"Regex\": ...}, found " + pattern.dump());
}

PrependScheme parse_prepend_scheme(const Json& object, const std::string& where) {
  // Older files carry add_prefix_space instead; false means "never".
  const Json* scheme = find_member(object, "prepend_scheme");
  const Json* legacy = find_member(object, "add_prefix_space");
  PrependScheme result = PrependScheme::kAlways;
  if (scheme != nullptr) {
    const std::string name = as_string(*scheme, at(where, "prepend_scheme"));
    if (name == "always") {
      result = PrependScheme::kAlways;
    } else if (name == "first") {
      result = PrependScheme::kFirst;
    } else if (name == "never") {
      result = PrependScheme::kNever;
    } else {
      throw LoadError(at(where, "prepend_scheme"), "unknown value \"" + name + "\" (always, first or never)");
    }
  }
  if (legacy != nullptr && legacy->is_boolean() && !legacy->get<bool>()) {
    if (scheme != nullptr && result != PrependScheme::kNever) {
      throw LoadError(where, "add_prefix_space false contradicts prepend_scheme");
    }
    result = PrependScheme::kNever;
  }
  return result;
}

void parse_normalizer(const Json& json, const std::string& where, std::vector<NormalizerStep>& steps) {
  const std::string type = type_of(json, where);
  NormalizerStep step;
  if (type == "Sequence") {
    const Json& list = require_member(json, "normalizers", where);
    if (!list.is_array()) throw LoadError(at(where, "normalizers"), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) parse_normalizer(list[i], at(at(where, "normalizers"), i), steps);
    return;
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = NormalizerStep::Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = NormalizerStep::Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = NormalizerStep::Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = NormalizerStep::Kind::kLowercase;
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    step.pattern = parse_pattern(json, where);
    step.content = as_string(require_member(json, "content", where), at(where, "content"));
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    step.content = as_string(require_member(json, "prepend", where), at(where, "prepend"));
  } else if (type == "Strip") {
    step.kind = NormalizerStep::Kind::kStrip;
    step.strip_left = bool_or(json, "strip_left", false, where);
    step.strip_right = bool_or(json, "strip_right", false, where);
  } else {
    unsupported(where, "normalizer", type, "NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, Sequence");
  }
  steps.push_back(std::move(step));
}

void parse_pre_tokenizer(const Json& json, const std::string& where, std::vector<PreTokenizerStep>& steps) {
  const std::string type = type_of(json, where);
  PreTokenizerStep step;
  if (type == "Sequence") {
    const Json& list = require_member(json, "pretokenizers", where);
    if (!list.is_array()) throw LoadError(at(where, "pretokenizers"), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) parse_pre_tokenizer(list[i], at(at(where, "pretokenizers"), i), steps);
    return;
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    step.pattern = parse_pattern(json, where);
    const std::string behavior = as_string(require_member(json, "behavior", where), at(where, "behavior"));
    if (behavior == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = SplitBehavior::kContiguous;
    } else {
      throw LoadError(at(where, "behavior"), "unknown split behavior \"" + behavior + "\"");
    }
    step.invert = bool_or(json, "invert", false, where);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = bool_or(json, "add_prefix_space", true, where);
    if (bool_or(json, "use_regex", true, where)) step.pattern = Regex::from_onig(kGpt2Pattern);
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    step.replacement = single_char(json, "replacement", where);
    step.prepend_scheme = parse_prepend_scheme(json, where);
    step.split = bool_or(json, "split", true, where);
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::Kind::kDigits;
    step.individual_digits = bool_or(json, "individual_digits", false, where);
  } else {
    unsupported(where, "pre_tokenizer", type, "Split, ByteLevel, Metaspace, Digits, Sequence");
  }
  steps.push_back(std::move(step));
}

void parse_decoder(const Json& json, const std::string& where, std::vector<DecoderStep>& steps) {
  const std::string type = type_of(json, where);
  DecoderStep step;
  if (type == "Sequence") {
    const Json& list = require_member(json, "decoders", where);
    if (!list.is_array()) throw LoadError(at(where, "decoders"), "expected an array");
    for (size_t i = 0; i < list.size(); ++i) parse_decoder(list[i], at(at(where, "decoders"), i), steps);
    return;
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    step.replacement = single_char(json, "replacement", where);
    step.prepend_scheme = parse_prepend_scheme(json, where);
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    step.strip_content = single_char(json, "content", where);
    step.strip_start = size_or(json, "start", 0, where);
    step.strip_stop = size_or(json, "stop", 0, where);
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    step.pattern = parse_pattern(json, where);
    step.content = as_string(require_member(json, "content", where), at(where, "content"));
  } else {
    unsupported(where, "decoder", type, "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence");
  }
  steps.push_back(std::move(step));
}

BpeModel parse_model(const Json& json, const std::string& where) {
  if (!json.is_object()) throw LoadError(where, "expected an object");
  if (const Json* type = find_member(json, "type")) {
    const std::string name = as_string(*type, at(where, "type"));
    if (name != "BPE") unsupported(where, "model", name, "BPE");
  } else if (find_member(json, "merges") == nullptr) {
    throw LoadError(where, "model without \"type\" or \"merges\": only BPE is supported");
  }
  if (const Json* dropout = find_member(json, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      throw LoadError(at(where, "dropout"), "BPE dropout " + dropout->dump() + " is not supported (only null or 0)");
    }
  }
  BpeOptions options;
  options.unk_token = string_or_null(json, "unk_token", where);
  options.continuing_subword_prefix = string_or_null(json, "continuing_subword_prefix", where);
  options.end_of_word_suffix = string_or_null(json, "end_of_word_suffix", where);
  options.fuse_unk = bool_or(json, "fuse_unk", false, where);
  options.byte_fallback = bool_or(json, "byte_fallback", false, where);
  options.ignore_merges = bool_or(json, "ignore_merges", false, where);

  const std::string vocab_where = at(where, "vocab");
  const Json& vocab_json = require_member(json, "vocab", where);
  if (!vocab_json.is_object()) throw LoadError(vocab_where, "expected an object of token: id");
  Vocabulary vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      throw LoadError(vocab_where, "token \"" + token + "\" has id " + id.dump() + ", expected 0..2^31-1");
    }
    vocab[token] = static_cast<int32_t>(id.get<int64_t>());
  }

  const std::string merges_where = at(where, "merges");
  const Json& merges_json = require_member(json, "merges", where);
  if (!merges_json.is_array()) throw LoadError(merges_where, "expected an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const Json& merge = merges_json[i];
    if (merge.is_string()) {
      // "left right" (merges.txt style); "#version" lines are comments.
      const std::string line = merge.get<std::string>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        throw LoadError(at(merges_where, i), "expected \"left right\", found \"" + line + "\"");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      throw LoadError(at(merges_where, i), "expected \"left right\" or [left, right], found " + merge.dump());
    }
  }
  try {
    return BpeModel(std::move(vocab), merges, std::move(options));
  } catch (const std::invalid_argument& e) {
    throw LoadError(where, e.what());
  }
}

std::vector<AddedToken> parse_added_tokens(const Json& list, const std::string& where) {
  if (!list.is_array()) throw LoadError(where, "expected an array");
  std::vector<AddedToken> tokens;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item_where = at(where, i);
    const Json& item = list[i];
    if (!item.is_object()) throw LoadError(item_where, "expected an object");
    AddedToken token;
    token.content = as_string(require_member(item, "content", item_where), at(item_where, "content"));
    if (!is_valid_utf8(token.content)) throw LoadError(at(item_where, "content"), "not valid UTF-8");
    token.special = bool_or(item, "special", false, item_where);
    token.single_word = bool_or(item, "single_word", false, item_where);
    token.lstrip = bool_or(item, "lstrip", false, item_where);
    token.rstrip = bool_or(item, "rstrip", false, item_where);
    token.normalized = bool_or(item, "normalized", !token.special, item_where);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

bool same_flags(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip && a.rstrip == b.rstrip &&
         a.normalized == b.normalized && a.special == b.special;
}

// Hugging Face's AddedVocabulary::add_tokens over the file's list, in order: the "id" written in the
// file is not used; a token keeps the id its content already has (added before, or in the model's
// vocabulary), else gets the next id from the model's vocabulary size on.
void add_tokens(const std::vector<AddedToken>& tokens, TokenizerData& data) {
  int32_t next_id = static_cast<int32_t>(data.model->num_entries());
  for (AddedToken token : tokens) {
    if (token.content.empty()) continue;
    if (const auto it = data.added_by_content.find(token.content); it != data.added_by_content.end()) {
      if (const auto same = data.added_by_id.find(it->second);
          same != data.added_by_id.end() && same_flags(same->second, token)) {
        continue;
      }
    }
    std::optional<int32_t> id;
    if (const auto it = data.added_by_content.find(token.content); it != data.added_by_content.end()) id = it->second;
    if (!id) id = data.model->token_to_id(token.content);
    if (!id) id = next_id++;
    token.id = *id;
    std::string decode_text = token.content;
    if (token.normalized && data.has_normalizer) {
      std::string normalized = normalize(data.normalizer, token.content, 0).text;
      if (normalized != token.content) decode_text = std::move(normalized);
    }
    data.added_by_content[token.content] = token.id;
    if (token.special) data.special_contents.insert(token.content);
    data.added_decode_text[token.id] = std::move(decode_text);
    data.added_by_id[token.id] = std::move(token);
  }

  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const auto& [id, token] : data.added_by_id) {
    if (token.normalized) {
      normalized_patterns.push_back(data.added_decode_text.at(id));
      data.normalized_tokens.push_back(&token);
    } else {
      raw_patterns.push_back(token.content);
      data.raw_tokens.push_back(&token);
    }
  }
  data.raw_matcher = LeftmostLongestMatcher(raw_patterns);
  data.normalized_matcher = LeftmostLongestMatcher(normalized_patterns);
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::optional<int32_t> config_token_id(const Json& config, std::string_view key, const TokenizerData& data) {
  const Json* value = find_member(config, key);
  if (value == nullptr) return std::nullopt;
  const Json* content = value->is_object() ? find_member(*value, "content") : value;
  if (content == nullptr || !content->is_string()) return std::nullopt;
  const std::string token = content->get<std::string>();
  if (const auto it = data.added_by_content.find(token); it != data.added_by_content.end()) return it->second;
  return data.model->token_to_id(token);
}

// moert's strict JSON rules (core/strict_json.h): bounded nesting, no duplicate keys.
Json parse_json_text(std::string_view text, std::string_view name) {
  Result<Json> parsed = parse_strict_json(text, std::string(name));
  if (!parsed.is_ok()) throw std::runtime_error("tokenizer: " + parsed.status().message());
  return std::move(parsed).value();
}

}  // namespace

const std::string* TokenizerData::token_string(int32_t id) const {
  if (const auto it = added_decode_text.find(id); it != added_decode_text.end()) return &it->second;
  return model->id_to_token(id);
}

void parse_tokenizer_json(std::string_view tokenizer_json, std::string_view tokenizer_name,
                          std::string_view config_json, std::string_view config_name, TokenizerData& data) {
  const Json root = parse_json_text(tokenizer_json, tokenizer_name);
  try {
    if (!root.is_object()) throw LoadError("(top level)", "expected an object");
    if (const Json* version = find_member(root, "version")) {
      if (as_string(*version, "version") != "1.0") throw LoadError("version", "unknown version " + version->dump());
    }
    if (const Json* normalizer = find_member(root, "normalizer")) {
      parse_normalizer(*normalizer, "normalizer", data.normalizer);
      data.has_normalizer = true;
    }
    if (const Json* pre_tokenizer = find_member(root, "pre_tokenizer")) {
      parse_pre_tokenizer(*pre_tokenizer, "pre_tokenizer", data.pre_tokenizer);
    }
    if (const Json* decoder = find_member(root, "decoder")) {
      parse_decoder(*decoder, "decoder", data.decoder);
      data.has_decoder = true;
    }
    data.model = parse_model(require_member(root, "model", ""), "model");
    if (const Json* added = find_member(root, "added_tokens")) {
      add_tokens(parse_added_tokens(*added, "added_tokens"), data);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("tokenizer: " + std::string(tokenizer_name) + ": " + e.what());
  }
  data.vocab_size = data.model->max_id() + 1;
  if (!data.added_by_id.empty()) data.vocab_size = std::max(data.vocab_size, data.added_by_id.rbegin()->first + 1);

  if (!config_json.empty()) {
    const Json config = parse_json_text(config_json, config_name);
    if (!config.is_object())
      throw std::runtime_error("tokenizer: " + std::string(config_name) + ": expected an object");
    data.bos_id = config_token_id(config, "bos_token", data);
    data.eos_id = config_token_id(config, "eos_token", data);
  }
}

}  // namespace moert::text
