// The results file of a batch job (docs/outputs.md): what moert guarantees about it.
// * A regular file is locked (flock, exclusive) while a job writes it: a second job on the
//   same file is refused instead of interleaving lines.
// * Beside it, OUTPUT.manifest.json records who wrote it (the model's digest, the input's
//   digest, the options that change results). A non-empty file is only ever continued by
//   --resume of a job with the same manifest; anything else is refused and nothing is
//   written, truncated or erased.
// * Lines are whole and flushed one by one. A torn last line (the job died mid-write, the
//   disk filled up) is cut before a resumed job appends, so every line stays valid JSON.
// * "-" or a non-regular file (a pipe, /dev/stdout) is a plain stream: no lock, no
//   manifest, no resume.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>

#include "core/status.h"

namespace moert::serving {

// Field -> value; two jobs write the same results when every field agrees.
using OutputManifest = std::map<std::string, std::string>;

class OutputFile {
 public:
  // Errors (one line each, naming the path and the reason): a directory; a file locked by
  // another job; a non-empty file without `resume`; with `resume`, a missing or different
  // manifest (naming the first differing field, its value there and here).
  static Result<std::unique_ptr<OutputFile>> open(const std::string& path, const OutputManifest& manifest, bool resume);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The ids (as JSON, Request::id_json) of the results already in the file when it opened.
  const std::unordered_set<std::string>& finished_ids() const { return finished_ids_; }
  // Bytes of a torn last line cut at open (0: none).
  int64_t cut_bytes() const { return cut_bytes_; }
  bool is_stream() const { return stream_; }
  // Appends one whole line and flushes it; io_error naming the path on failure (disk full).
  Status write_line(const std::string& line);

 private:
  OutputFile(std::string path, std::FILE* file, int lock_fd, bool stream)
      : path_(std::move(path)), file_(file), lock_fd_(lock_fd), stream_(stream) {}
  std::string path_;
  std::FILE* file_;
  int lock_fd_;  // holds the flock; -1 for streams
  bool stream_;
  std::unordered_set<std::string> finished_ids_;
  int64_t cut_bytes_ = 0;
};

// The manifest's path for an output path.
std::string manifest_path(const std::string& output_path);
}  // namespace moert::serving
