// safetensors reading (mmap, zero copy) and writing (docs/quant-formats.md §6).
//
// File layout: u64 LE N | N bytes of UTF-8 JSON header | data buffer.
// Header: {name: {"dtype": "BF16", "shape": [..], "data_offsets": [BEGIN, END]}, ...,
//          "__metadata__": {string: string}}. Offsets are relative to the data buffer
// (file offset 8 + N) and END is exclusive.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace moert::io {

// One header entry. Invariant (after parse_safetensors_header): end - begin ==
// numel(shape) * bits(dtype) / 8, and the entries of a file tile [0, buffer length).
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offset relative to the data buffer
  uint64_t end = 0;    // exclusive
  uint64_t size_bytes() const { return end - begin; }
};

// Validates a whole file image held in memory (header size, JSON, every entry, and that
// the entries tile the data buffer exactly). Returns the entries sorted by (begin, end,
// name). `metadata` (may be null) receives "__metadata__". Every failure is kCorrupt with a
// message naming `path_for_errors`.
Result<std::vector<TensorInfo>> parse_safetensors_header(const uint8_t* data, uint64_t size,
                                                         std::map<std::string, std::string>* metadata,
                                                         const std::string& path_for_errors);

// A read-only safetensors file mapped with mmap(PROT_READ, MAP_PRIVATE). Views returned by
// view() point into the mapping and are valid while this object lives; they must not be
// written through (the pages are read-only).
class SafetensorsFile {
 public:
  // kNotFound if the file does not exist, kIoError if it cannot be read or mapped,
  // kCorrupt if its contents break the format.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Sorted by begin offset.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if the file has no tensor called `name`.
  const TensorInfo* find(std::string_view name) const;
  // Contiguous view into the mapping. `info` must come from this file's tensors().
  TensorView view(const TensorInfo& info) const;
  // The "__metadata__" map (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Start of the data buffer inside the mapping.
  const uint8_t* data_buffer() const { return data_buffer_; }
  // The whole mapping (header included; empty for an empty file): views point inside it.
  std::span<const uint8_t> mapped_bytes() const { return {static_cast<const uint8_t*>(map_base_), map_size_}; }

 private:
  SafetensorsFile() = default;
  void unmap();

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string path_;
  void* map_base_ = nullptr;  // null when nothing is mapped
  uint64_t map_size_ = 0;
  const uint8_t* data_buffer_ = nullptr;  // map_base_ + 8 + N
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> index_;  // name -> tensors_ idx
  std::map<std::string, std::string> metadata_;
};

// A tensor to write; `view` must be contiguous and hold whole bytes.
struct NamedTensor {
  std::string name;
  TensorView view;
};

// Writes a safetensors file: tensors sorted by descending dtype alignment then name, the
// header padded with spaces to a multiple of 8 bytes (so the buffer is 8-aligned), and
// {"__metadata__": metadata} when metadata is non-empty. Writes `path + ".tmp"`, syncs it,
// then renames it over `path`, so a crash never leaves a half-written file at `path`.
// kInvalidArgument for duplicate or reserved names, non-contiguous views or sub-byte
// remainders; kIoError if the OS refuses a write.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Shared helpers for the other I/O files.
// True if `bytes` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view bytes);
// Writes `bytes` to `path + ".tmp"`, fsyncs it and renames it over `path`.
Status write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace moert::io
