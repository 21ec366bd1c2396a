// Opening the files moert reads (docs/files.md). A path is followed through symbolic links
// (a Hugging Face cache links every file of a snapshot to a blob) and must end at a regular
// file: a FIFO, a device, a socket or a directory is refused by name before a byte is read, so
// a FIFO never blocks the open and /dev/zero is never read. A whole-file read is bounded by
// what that kind of file can legitimately hold (the kMax*Bytes below), so a runaway file is
// refused instead of filling memory.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace moert {

// Bounds of the whole-file reads, by kind of file (docs/files.md says why each is enough).
inline constexpr int64_t kMaxConfigJsonBytes = int64_t{16} << 20;      // config.json, generation_config.json
inline constexpr int64_t kMaxCheckpointIndexBytes = int64_t{256} << 20;  // model.safetensors.index.json
inline constexpr int64_t kMaxTokenizerFileBytes = int64_t{512} << 20;    // tokenizer.json, tokenizer_config.json
inline constexpr int64_t kMaxChatTemplateBytes = int64_t{16} << 20;      // chat_template.jinja
inline constexpr int64_t kMaxPlacementBytes = int64_t{256} << 20;        // --placement JSON
inline constexpr int64_t kMaxOptionsFileBytes = int64_t{16} << 20;       // --config, manifests, bench JSON

// An open, read-only descriptor of a regular file; closed on destruction.
class RegularFile {
 public:
  // Errors, each naming the path: not_found (no such file, or a dangling link), io_error
  // (permission, ...), invalid_argument "PATH is not a regular file (a FIFO)" (directory,
  // FIFO, character device, block device, socket).
  static Result<RegularFile> open(const std::string& path);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }  // at open
  const std::string& path() const { return path_; }

  // The whole file, or invalid_argument "PATH is N bytes, more than the M a WHAT may have"
  // when it holds more than max_bytes (also when it grew past them while being read).
  Result<std::string> read_all(int64_t max_bytes, const std::string& what) const;

 private:
  RegularFile(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// RegularFile::open(path) then read_all(max_bytes, what).
Result<std::string> read_regular_file(const std::string& path, int64_t max_bytes, const std::string& what);

// "a FIFO", "a directory", "a character device", ... for a stat mode (messages).
const char* file_kind_name(unsigned mode);

}  // namespace moert
