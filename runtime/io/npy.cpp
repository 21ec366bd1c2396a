#include "runtime/io/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <tuple>

#include "core/regular_file.h"
#include "runtime/io/safetensors.h"

namespace moert::io {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr size_t kDataAlignment = 64;

// The subset of Python literals that .npy headers use.
struct PyValue {
  enum class Kind { kString, kBool, kNone, kInt, kTuple } kind = Kind::kNone;
  std::string text;
  bool flag = false;
  int64_t number = 0;
  std::vector<PyValue> items;
};

// Recursive-descent parser over the header text. Every method returns false on a syntax
// error and leaves `error` describing it.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  bool parse_dict(std::map<std::string, PyValue>* out) {
    skip_space();
    if (!consume('{')) return fail("expected '{'");
    while (true) {
      skip_space();
      if (consume('}')) break;
      PyValue key;
      if (!parse_value(&key)) return false;
      if (key.kind != PyValue::Kind::kString) return fail("dictionary key is not a string");
      skip_space();
      if (!consume(':')) return fail("expected ':' after key '" + key.text + "'");
      PyValue value;
      if (!parse_value(&value)) return false;
      if (!out->emplace(key.text, std::move(value)).second) return fail("duplicate key '" + key.text + "'");
      skip_space();
      if (consume(',')) continue;
      skip_space();
      if (consume('}')) break;
      return fail("expected ',' or '}'");
    }
    skip_space();
    if (pos_ != text_.size()) return fail("text after the dictionary");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool parse_value(PyValue* out) {
    skip_space();
    if (pos_ >= text_.size()) return fail("unexpected end of header");
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      ++pos_;
      out->kind = PyValue::Kind::kString;
      while (pos_ < text_.size() && text_[pos_] != c) {
        if (text_[pos_] == '\\') return fail("escape sequences in strings are not supported");
        out->text += text_[pos_++];
      }
      if (!consume(c)) return fail("unterminated string");
      return true;
    }
    if (c == '(') {
      ++pos_;
      out->kind = PyValue::Kind::kTuple;
      while (true) {
        skip_space();
        if (consume(')')) return true;
        PyValue item;
        if (!parse_value(&item)) return false;
        out->items.push_back(std::move(item));
        skip_space();
        if (consume(',')) continue;
        skip_space();
        if (consume(')')) return true;
        return fail("expected ',' or ')' in tuple");
      }
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') {
      const size_t start = pos_;
      if (c == '-') ++pos_;
      int64_t value = 0;
      bool any_digit = false;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        const int digit = text_[pos_++] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) return fail("integer too large");
        value = value * 10 + digit;
        any_digit = true;
      }
      if (!any_digit) return fail("bad integer at offset " + std::to_string(start));
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long
      out->kind = PyValue::Kind::kInt;
      out->number = c == '-' ? -value : value;
      return true;
    }
    for (const auto& [word, kind, flag] :
         {std::tuple{"True", PyValue::Kind::kBool, true}, std::tuple{"False", PyValue::Kind::kBool, false},
          std::tuple{"None", PyValue::Kind::kNone, false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        out->kind = kind;
        out->flag = flag;
        return true;
      }
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool fail(const std::string& message) {
    if (error_.empty()) error_ = message + " at offset " + std::to_string(pos_);
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

std::string shape_tuple(const Shape& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

}  // namespace

Status write_npy_f32(const std::string& path, const Shape& shape, const float* data) {
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("writing " + path + ": negative dim in shape " + shape_to_string(shape));
  }
  const uint64_t numel = static_cast<uint64_t>(shape_numel(shape));
  if (numel > 0 && data == nullptr) return invalid_argument("writing " + path + ": no data");

  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  // Magic (6) + version (2) + length (2) + dict + padding + '\n' is a multiple of 64.
  const size_t unpadded = kMagicBytes + 2 + 2 + dict.size() + 1;
  dict.append((kDataAlignment - unpadded % kDataAlignment) % kDataAlignment, ' ');
  dict += '\n';
  if (dict.size() > std::numeric_limits<uint16_t>::max()) {
    return invalid_argument("writing " + path + ": shape " + shape_to_string(shape) + " makes the header too long");
  }
  std::string prefix(kMagic, kMagicBytes);
  prefix += '\x01';
  prefix += '\x00';
  prefix += static_cast<char>(dict.size() & 0xff);
  prefix += static_cast<char>((dict.size() >> 8) & 0xff);
  const std::string_view payload(reinterpret_cast<const char*>(data), numel * sizeof(float));
  return write_file_atomically(path, {prefix, dict, payload});
}

Result<NpyArray> read_npy(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("npy file " + path + " does not exist");
  // A reference array of a test: its regular file's size is the bound.
  MOERT_ASSIGN_OR_RETURN(const RegularFile opened, RegularFile::open(path));
  MOERT_ASSIGN_OR_RETURN(const std::string file, opened.read_all(opened.size(), "a .npy file"));

  if (file.size() < kMagicBytes + 2 || file.compare(0, kMagicBytes, kMagic, kMagicBytes) != 0) {
    return corrupt(path + ": not a .npy file (bad magic)");
  }
  const auto major = static_cast<uint8_t>(file[6]);
  const auto minor = static_cast<uint8_t>(file[7]);
  size_t length_bytes = 0;
  if (major == 1 && minor == 0) {
    length_bytes = 2;
  } else if (major == 2 && minor == 0) {
    length_bytes = 4;
  } else {
    return unsupported(path + ": .npy version " + std::to_string(major) + "." + std::to_string(minor) +
                       " (only 1.0 and 2.0 are read)");
  }
  const size_t prefix_bytes = kMagicBytes + 2 + length_bytes;
  if (file.size() < prefix_bytes) return corrupt(path + ": file ends inside the header length");
  uint64_t header_bytes = 0;
  for (size_t i = length_bytes; i-- > 0;) {
    header_bytes = (header_bytes << 8) | static_cast<uint8_t>(file[kMagicBytes + 2 + i]);
  }
  if (prefix_bytes + header_bytes > file.size()) {
    return corrupt(path + ": header length " + std::to_string(header_bytes) + " runs past the end of the " +
                   std::to_string(file.size()) + "-byte file");
  }
  const std::string_view header(file.data() + prefix_bytes, header_bytes);

  std::map<std::string, PyValue> dict;
  HeaderParser parser(header);
  if (!parser.parse_dict(&dict)) return corrupt(path + ": bad header (" + parser.error() + ")");

  const auto descr = dict.find("descr");
  if (descr == dict.end() || descr->second.kind != PyValue::Kind::kString) {
    return corrupt(path + ": header has no string 'descr'");
  }
  size_t item_bytes = 0;
  if (descr->second.text == "<f4") {
    item_bytes = 4;
  } else if (descr->second.text == "<f8") {
    item_bytes = 8;
  } else {
    return unsupported(path + ": dtype '" + descr->second.text + "' (only '<f4' and '<f8' are read)");
  }
  const auto fortran = dict.find("fortran_order");
  if (fortran == dict.end() || fortran->second.kind != PyValue::Kind::kBool) {
    return corrupt(path + ": header has no boolean 'fortran_order'");
  }
  if (fortran->second.flag) return unsupported(path + ": fortran_order True (only C order is read)");
  const auto shape_it = dict.find("shape");
  if (shape_it == dict.end() || shape_it->second.kind != PyValue::Kind::kTuple) {
    return corrupt(path + ": header has no tuple 'shape'");
  }

  NpyArray array;
  uint64_t numel = 1;
  for (const PyValue& dim : shape_it->second.items) {
    if (dim.kind != PyValue::Kind::kInt || dim.number < 0) {
      return corrupt(path + ": shape entry is not a non-negative integer");
    }
    array.shape.push_back(dim.number);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim.number), &numel)) {
      return corrupt(path + ": element count of shape " + shape_to_string(array.shape) + " overflows");
    }
  }
  uint64_t data_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(item_bytes), &data_bytes)) {
    return corrupt(path + ": byte size of shape " + shape_to_string(array.shape) + " overflows");
  }
  const uint64_t available = file.size() - prefix_bytes - header_bytes;
  if (available != data_bytes) {
    return corrupt(path + ": shape " + shape_to_string(array.shape) + " of '" + descr->second.text + "' needs " +
                   std::to_string(data_bytes) + " data bytes but the file has " + std::to_string(available));
  }

  const char* data = file.data() + prefix_bytes + header_bytes;
  array.values.resize(numel);
  for (uint64_t i = 0; i < numel; ++i) {
    if (item_bytes == 4) {
      float v;
      std::memcpy(&v, data + i * 4, 4);
      array.values[i] = v;
    } else {
      double v;
      std::memcpy(&v, data + i * 8, 8);
      array.values[i] = v;
    }
  }
  return array;
}

}  // namespace moert::io
