#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"

namespace moert::io {
namespace {

using nlohmann::json;

// The reference reader's limit on the header size (safetensors/src/tensor.rs MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

Status corrupt_at(const std::string& path, const std::string& problem) {
  return corrupt(path + ": " + problem);
}

std::string errno_text() { return std::strerror(errno); }

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

std::string u64_le_bytes(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

// The header: strict JSON (core/strict_json.h: no duplicate keys, bounded nesting).
Result<json> parse_json_rejecting_duplicates(std::string_view text, const std::string& path,
                                             const std::string& what) {
  Result<json> parsed = parse_strict_json(text, what);
  if (!parsed.is_ok()) return corrupt_at(path, parsed.status().message());
  return parsed;
}

// Parses one header entry `name: {...}`. Does not check its offsets against other entries.
Result<TensorInfo> parse_entry(const std::string& name, const json& entry, const std::string& path) {
  const std::string who = "tensor '" + name + "'";
  if (!entry.is_object()) return corrupt_at(path, who + " entry is not an object: " + entry.dump());

  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return corrupt_at(path, who + " has no \"dtype\"");
  if (!dtype_it->is_string()) return corrupt_at(path, who + " \"dtype\" is not a string: " + dtype_it->dump());
  const std::string dtype_text = dtype_it->get<std::string>();
  const std::optional<DType> dtype = dtype_from_name(dtype_text);
  if (!dtype) return corrupt_at(path, who + " has unknown dtype '" + dtype_text + "'");
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return corrupt_at(path, who + " has no \"shape\"");
  if (!shape_it->is_array()) return corrupt_at(path, who + " \"shape\" is not an array: " + shape_it->dump());
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const json& dim = (*shape_it)[i];
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return corrupt_at(path, who + " shape[" + std::to_string(i) + "] = " + dim.dump() + " is negative");
    }
    if (!dim.is_number_unsigned()) {
      return corrupt_at(path, who + " shape[" + std::to_string(i) + "] = " + dim.dump() +
                                  " is not a non-negative integer");
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return corrupt_at(path, who + " shape[" + std::to_string(i) + "] = " + dim.dump() + " is too large");
    }
    info.shape.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(numel, d, &numel)) numel_overflow = true;
  }
  // A zero dim makes the product 0 whatever overflowed before it.
  const bool has_zero_dim = std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end();
  if (has_zero_dim) numel = 0;
  if ((numel_overflow && !has_zero_dim) || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return corrupt_at(path, who + " element count of shape " + shape_to_string(info.shape) + " overflows");
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return corrupt_at(path, who + " has no \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !(*offsets_it)[0].is_number_unsigned() ||
      !(*offsets_it)[1].is_number_unsigned()) {
    return corrupt_at(path, who + " \"data_offsets\" is not [BEGIN, END] of non-negative integers: " +
                                offsets_it->dump());
  }
  info.begin = (*offsets_it)[0].get<uint64_t>();
  info.end = (*offsets_it)[1].get<uint64_t>();
  if (info.begin > info.end) {
    return corrupt_at(path, who + " data_offsets [" + std::to_string(info.begin) + ", " +
                                std::to_string(info.end) + "] have begin > end");
  }

  const uint64_t bits = static_cast<uint64_t>(dtype_bits(info.dtype));
  uint64_t total_bits = 0;
  if (__builtin_mul_overflow(numel, bits, &total_bits)) {
    return corrupt_at(path, who + " bit size of shape " + shape_to_string(info.shape) + " overflows");
  }
  if (total_bits % 8 != 0) {
    return corrupt_at(path, who + " of dtype " + dtype_text + " and shape " + shape_to_string(info.shape) +
                                " is " + std::to_string(total_bits) + " bits, not a whole number of bytes");
  }
  if (info.end - info.begin != total_bits / 8) {
    return corrupt_at(path, who + " data_offsets [" + std::to_string(info.begin) + ", " +
                                std::to_string(info.end) + "] span " + std::to_string(info.end - info.begin) +
                                " bytes but " + dtype_text + " " + shape_to_string(info.shape) + " needs " +
                                std::to_string(total_bits / 8));
  }
  return info;
}

Status parse_metadata(const json& value, std::map<std::string, std::string>* metadata, const std::string& path) {
  // serde reads a null "__metadata__" as absent; do the same.
  if (value.is_null()) return Status::ok();
  if (!value.is_object()) return corrupt_at(path, "\"__metadata__\" is not an object: " + value.dump());
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return corrupt_at(path, "\"__metadata__\" value of '" + key + "' is not a string: " + item.dump());
    }
    if (metadata != nullptr) (*metadata)[key] = item.get<std::string>();
  }
  return Status::ok();
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t code = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      code = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      code = c & 0x07;
    } else {
      return false;  // continuation byte, overlong 2-byte lead (C0/C1) or > F4
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(bytes[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    if ((len == 3 && code < 0x800) || (len == 4 && code < 0x10000)) return false;  // overlong
    if (code >= 0xD800 && code <= 0xDFFF) return false;                             // surrogate
    if (code > 0x10FFFF) return false;
    i += len;
  }
  return true;
}

Result<std::vector<TensorInfo>> parse_safetensors_header(const uint8_t* data, uint64_t size,
                                                         std::map<std::string, std::string>* metadata,
                                                         const std::string& path_for_errors) {
  const std::string& path = path_for_errors;
  if (metadata != nullptr) metadata->clear();
  if (size < 8) return corrupt_at(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header size");
  const uint64_t header_bytes = read_u64_le(data);
  if (header_bytes > kMaxHeaderBytes) {
    return corrupt_at(path, "header size " + std::to_string(header_bytes) + " exceeds the limit of " +
                                std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (8 + header_bytes > size) {
    return corrupt_at(path, "header size " + std::to_string(header_bytes) + " runs past the end of the " +
                                std::to_string(size) + "-byte file");
  }
  const std::string_view header_text(reinterpret_cast<const char*>(data + 8), header_bytes);
  if (!is_valid_utf8(header_text)) return corrupt_at(path, "header is not valid UTF-8");

  MOERT_ASSIGN_OR_RETURN(json header, parse_json_rejecting_duplicates(header_text, path, "header"));
  if (!header.is_object()) return corrupt_at(path, "header is not a JSON object");

  std::vector<TensorInfo> tensors;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      MOERT_RETURN_IF_ERROR(parse_metadata(entry, metadata, path));
      continue;
    }
    MOERT_ASSIGN_OR_RETURN(TensorInfo info, parse_entry(name, entry, path));
    tensors.push_back(std::move(info));
  }

  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // Invariant after this loop: tensors[0 .. i) tile [0, expected_begin) with no gaps or overlaps.
  uint64_t expected_begin = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    if (t.begin == expected_begin) {
      expected_begin = t.end;
      continue;
    }
    const std::string range = " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
    if (i == 0) return corrupt_at(path, "first tensor '" + t.name + "'" + range + " does not start at offset 0");
    const TensorInfo& prev = tensors[i - 1];
    const std::string prev_range = " [" + std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ")";
    const char* problem = t.begin > expected_begin ? " leave a gap" : " overlap";
    return corrupt_at(path, "tensors '" + prev.name + "'" + prev_range + " and '" + t.name + "'" + range + problem);
  }
  const uint64_t buffer_bytes = size - 8 - header_bytes;
  if (expected_begin != buffer_bytes) {
    const char* problem = expected_begin < buffer_bytes ? "trailing bytes" : "missing bytes";
    return corrupt_at(path, "tensors end at offset " + std::to_string(expected_begin) + " but the data buffer has " +
                                std::to_string(buffer_bytes) + " bytes (" + problem + ")");
  }
  return tensors;
}

// ---- SafetensorsFile ---------------------------------------------------------------------

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  // Links followed, FIFOs and devices refused without blocking (docs/files.md); the mapping
  // covers the size the file had when opened and outlives the descriptor.
  Result<RegularFile> opened = RegularFile::open(path);
  if (!opened.is_ok()) {
    if (opened.status().code() == StatusCode::kNotFound) return not_found("safetensors file " + path + " does not exist");
    return opened.status();
  }
  const int fd = opened->fd();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_size_ = static_cast<uint64_t>(opened->size());
  if (file->map_size_ > 0) {
    void* base = ::mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      const std::string err = errno_text();
      return io_error("cannot mmap " + path + " (" + std::to_string(file->map_size_) + " bytes): " + err);
    }
    file->map_base_ = base;
  }

  const auto* bytes = static_cast<const uint8_t*>(file->map_base_);
  MOERT_ASSIGN_OR_RETURN(file->tensors_, parse_safetensors_header(bytes, file->map_size_, &file->metadata_, path));
  file->data_buffer_ = bytes + 8 + read_u64_le(bytes);
  file->index_.reserve(file->tensors_.size());
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_.emplace(file->tensors_[i].name, i);
  return file;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (map_base_ != nullptr) ::munmap(map_base_, map_size_);
  map_base_ = nullptr;
  map_size_ = 0;
  data_buffer_ = nullptr;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_base_(std::exchange(other.map_base_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_buffer_(std::exchange(other.data_buffer_, nullptr)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_base_ = std::exchange(other.map_base_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_buffer_ = std::exchange(other.data_buffer_, nullptr);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
  // The mapping is read-only; TensorView carries a mutable pointer by design.
  return TensorView::contiguous(info.dtype, info.shape, const_cast<uint8_t*>(data_buffer_ + info.begin));
}

// ---- Writing -----------------------------------------------------------------------------

Status write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp_path = path + ".tmp";
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create " + tmp_path + ": " + errno_text());
  auto fail = [&](const std::string& what) {
    const std::string err = errno_text();
    ::close(fd);
    ::unlink(tmp_path.c_str());
    return io_error(what + " " + tmp_path + ": " + err);
  };
  for (std::string_view piece : pieces) {
    const char* p = piece.data();
    size_t left = piece.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail("cannot write");
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp_path.c_str());
    return io_error("cannot close " + tmp_path + ": " + err);
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp_path.c_str());
    return io_error("cannot rename " + tmp_path + " to " + path + ": " + err);
  }
  // Best effort: make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
  return Status::ok();
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  struct Planned {
    const NamedTensor* tensor;
    uint64_t bytes;
  };
  std::vector<Planned> planned;
  planned.reserve(tensors.size());
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors) {
    const std::string who = "writing " + path + ": tensor '" + t.name + "'";
    if (t.name == kMetadataKey) return invalid_argument(who + " uses the reserved name");
    if (!is_valid_utf8(t.name)) return invalid_argument(who + " name is not valid UTF-8");
    if (!names.insert(t.name).second) return invalid_argument(who + " appears twice");
    for (int64_t d : t.view.shape) {
      if (d < 0) return invalid_argument(who + " has negative dim in shape " + shape_to_string(t.view.shape));
    }
    if (!t.view.is_contiguous()) return invalid_argument(who + " is not contiguous");
    const std::optional<uint64_t> bytes =
        dtype_storage_bytes(t.view.dtype, static_cast<uint64_t>(t.view.numel()));
    if (!bytes) {
      return invalid_argument(who + " of dtype " + std::string(dtype_name(t.view.dtype)) + " and shape " +
                              shape_to_string(t.view.shape) + " is not a whole number of bytes");
    }
    if (*bytes > 0 && t.view.data == nullptr) return invalid_argument(who + " has no data");
    planned.push_back({&t, *bytes});
  }
  for (const auto& [key, value] : metadata) {
    if (!is_valid_utf8(key) || !is_valid_utf8(value)) {
      return invalid_argument("writing " + path + ": metadata entry '" + key + "' is not valid UTF-8");
    }
  }
  // Descending alignment, then name: every tensor starts at a multiple of its alignment
  // because all earlier sizes are multiples of a larger-or-equal power of two.
  std::sort(planned.begin(), planned.end(), [](const Planned& a, const Planned& b) {
    const int align_a = dtype_alignment(a.tensor->view.dtype);
    const int align_b = dtype_alignment(b.tensor->view.dtype);
    if (align_a != align_b) return align_a > align_b;
    return a.tensor->name < b.tensor->name;
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const Planned& p : planned) {
    header[p.tensor->name] = {
        {"dtype", std::string(dtype_name(p.tensor->view.dtype))},
        {"shape", p.tensor->view.shape},
        {"data_offsets", {offset, offset + p.bytes}},
    };
    offset += p.bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  const std::string size_bytes = u64_le_bytes(header_text.size());
  std::vector<std::string_view> pieces = {size_bytes, header_text};
  for (const Planned& p : planned) {
    if (p.bytes > 0) pieces.emplace_back(static_cast<const char*>(p.tensor->view.data), p.bytes);
  }
  return write_file_atomically(path, pieces);
}

}  // namespace moert::io
