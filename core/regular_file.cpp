#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <utility>

namespace moert {
namespace {

std::string errno_text() { return std::strerror(errno); }

Status open_error(const std::string& path) {
  if (errno == ENOENT) return not_found("cannot open " + path + ": no such file");
  return io_error("cannot open " + path + ": " + errno_text());
}

}  // namespace

const char* file_kind_name(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a file";
}

Result<RegularFile> RegularFile::open(const std::string& path) {
  // stat first (it follows links): a device or FIFO is refused without being opened, since
  // opening some devices acts on them.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return open_error(path);
  if (!S_ISREG(info.st_mode)) {
    return invalid_argument(path + " is not a regular file (" + file_kind_name(info.st_mode) + ")");
  }
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open still returns at
  // once, and the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return open_error(path);
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const std::string kind = file_kind_name(info.st_mode);
    ::close(fd);
    return invalid_argument(path + " is not a regular file (" + kind + ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return RegularFile(path, fd, static_cast<int64_t>(info.st_size));
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> RegularFile::read_all(int64_t max_bytes, const std::string& what) const {
  const std::string limit = "the " + std::to_string(max_bytes) + " bytes " + what + " may have";
  if (size_ > max_bytes) return invalid_argument(path_ + " is " + std::to_string(size_) + " bytes, more than " + limit);
  const auto grew = [&] { return invalid_argument(path_ + " grew past " + limit + " while being read"); };
  std::string text(static_cast<size_t>(size_), '\0');
  int64_t done = 0;
  while (true) {
    // One byte past the limit tells a file that grew past it from one that ended.
    if (done == static_cast<int64_t>(text.size())) {
      if (done > max_bytes) return grew();
      text.resize(static_cast<size_t>(std::min<int64_t>(max_bytes + 1, std::max<int64_t>(2 * done, 4096))));
    }
    const ssize_t got = ::pread(fd_, text.data() + done, text.size() - static_cast<size_t>(done), done);
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read " + path_ + ": " + errno_text());
    }
    if (got == 0) break;
    done += got;
  }
  if (done > max_bytes) return grew();
  text.resize(static_cast<size_t>(done));
  return text;
}

Result<std::string> read_regular_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  MOERT_ASSIGN_OR_RETURN(RegularFile file, RegularFile::open(path));
  return file.read_all(max_bytes, what);
}

}  // namespace moert
