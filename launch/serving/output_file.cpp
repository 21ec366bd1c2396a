#include "launch/serving/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"
#include "launch/serving/request_io.h"

namespace moert::serving {
namespace {

using nlohmann::json;

std::string errno_text() { return std::strerror(errno); }

// Cuts the file after its last newline; returns the bytes cut.
Result<int64_t> cut_torn_tail(int fd, const std::string& path) {
  struct stat info {};
  if (fstat(fd, &info) != 0) return io_error("cannot stat " + path + ": " + errno_text());
  int64_t end = info.st_size;
  char buffer[4096];
  while (end > 0) {
    const int64_t chunk = std::min<int64_t>(end, sizeof(buffer));
    if (pread(fd, buffer, static_cast<size_t>(chunk), end - chunk) != chunk) {
      return io_error("cannot read " + path + ": " + errno_text());
    }
    int64_t i = chunk;
    while (i > 0 && buffer[i - 1] != '\n') --i;
    if (i > 0) {
      end = end - chunk + i;
      break;
    }
    end -= chunk;
  }
  const int64_t cut = info.st_size - end;
  if (cut > 0 && ftruncate(fd, end) != 0) return io_error("cannot cut the torn last line of " + path + ": " + errno_text());
  return cut;
}

// What a key a manifest lacks meant when that manifest was written: keys added later carry
// the behaviour of the versions before them, so their jobs still resume.
std::string absent_manifest_value(const std::string& key) {
  if (key == "ep_payloads") return "f32/f32";  // before --ep-dispatch-dtype / --ep-combine-dtype
  return "(missing)";
}

Result<OutputManifest> read_manifest(const std::string& path) {
  const Result<json> read = read_strict_json_file(path, kMaxOptionsFileBytes);
  if (read.status().code() == StatusCode::kNotFound) return not_found("no manifest " + path);
  if (!read.is_ok()) return read.status();
  const json& j = *read;
  if (!j.is_object()) return corrupt(path + " is not a JSON object");
  OutputManifest manifest;
  for (const auto& [key, value] : j.items()) manifest[key] = value.is_string() ? value.get<std::string>() : value.dump();
  return manifest;
}

Status write_manifest(const std::string& path, const OutputManifest& manifest) {
  json j = json::object();
  for (const auto& [key, value] : manifest) j[key] = value;
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out.flush()) return io_error("cannot write " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) return io_error("cannot write " + path + ": " + errno_text());
  return Status::ok();
}

}  // namespace

std::string manifest_path(const std::string& output_path) { return output_path + ".manifest.json"; }

Result<std::unique_ptr<OutputFile>> OutputFile::open(const std::string& path, const OutputManifest& manifest,
                                                     bool resume) {
  struct stat info {};
  const bool exists = ::stat(path.c_str(), &info) == 0;
  if (path == "-" || (exists && !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode))) {
    std::FILE* file = path == "-" ? stdout : std::fopen(path.c_str(), "w");
    if (file == nullptr) return io_error("cannot open " + path + " for writing: " + errno_text());
    return std::unique_ptr<OutputFile>(new OutputFile(path, file, -1, true));
  }
  if (exists && S_ISDIR(info.st_mode)) return invalid_argument("--output " + path + " is a directory");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open " + path + " for writing: " + errno_text());
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const std::string why = errno == EWOULDBLOCK ? "another job is writing it (it is locked)" : errno_text();
    ::close(fd);
    return io_error("cannot take " + path + ": " + why);
  }
  auto fail = [&](Status status) -> Result<std::unique_ptr<OutputFile>> {
    ::close(fd);
    return status;
  };
  struct stat opened {};
  if (fstat(fd, &opened) != 0) return fail(io_error("cannot stat " + path + ": " + errno_text()));
  const std::string manifest_file = manifest_path(path);
  int64_t cut = 0;
  std::unordered_set<std::string> finished;
  if (opened.st_size > 0) {
    if (!resume) {
      return fail(invalid_argument(path + " already holds results; pass --resume to continue the job that wrote it, "
                                   "or choose another --output (nothing was changed)"));
    }
    Result<OutputManifest> there = read_manifest(manifest_file);
    if (!there.is_ok()) {
      return fail(invalid_argument("--resume: " + path + " was not written by a moert job with a manifest (" +
                                   there.status().message() + "); nothing was changed"));
    }
    for (const auto& [key, value] : manifest) {
      const auto found = there->find(key);
      const std::string theirs = found == there->end() ? absent_manifest_value(key) : found->second;
      if (theirs != value) {
        return fail(invalid_argument("--resume: " + path + " was written by another job: " + key + " is " + theirs +
                                     " there and " + value + " here; nothing was changed"));
      }
    }
    MOERT_ASSIGN_OR_RETURN(cut, cut_torn_tail(fd, path));
    int torn = 0;
    Result<std::unordered_set<std::string>> ids = read_finished_ids(path, &torn);
    if (!ids.is_ok()) return fail(ids.status());
    finished = std::move(ids).value();
  } else {
    const Status written = write_manifest(manifest_file, manifest);
    if (!written.is_ok()) return fail(written);
  }
  std::FILE* file = fdopen(fd, "a");
  if (file == nullptr) return fail(io_error("cannot open " + path + " for appending: " + errno_text()));
  auto output = std::unique_ptr<OutputFile>(new OutputFile(path, file, fd, false));
  output->finished_ids_ = std::move(finished);
  output->cut_bytes_ = cut;
  return output;
}

OutputFile::~OutputFile() {
  if (stream_) {
    std::fflush(file_);
    if (file_ != stdout) std::fclose(file_);
  } else {
    std::fclose(file_);  // closes lock_fd_ and releases the lock
  }
}

Status OutputFile::write_line(const std::string& line) {
  const std::string whole = line + "\n";
  if (std::fwrite(whole.data(), 1, whole.size(), file_) != whole.size() || std::fflush(file_) != 0) {
    return io_error("write to " + path_ + " failed: " + errno_text());
  }
  return Status::ok();
}

}  // namespace moert::serving
