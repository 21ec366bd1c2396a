// RegularFile / read_regular_file: links are followed, anything but a regular file is refused
// by name without blocking or reading, and a whole-file read is bounded.
#include "core/regular_file.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/fifo_watchdog.h"

namespace moert {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("regular_file_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(RegularFileTest, ReadsRegularFilesThroughLinks) {
  std::ofstream(path("a.json")) << "hello";
  fs::create_symlink(path("a.json"), path("link.json"));
  fs::create_symlink("link.json", path("link2.json"));  // a relative chain, as in a Hugging Face cache
  EXPECT_EQ(read_regular_file(path("a.json"), 5, "a test file").value(), "hello");
  EXPECT_EQ(read_regular_file(path("link2.json"), 100, "a test file").value(), "hello");
  std::ofstream(path("empty"));
  EXPECT_EQ(read_regular_file(path("empty"), 0, "a test file").value(), "");
  const RegularFile file = RegularFile::open(path("link.json")).value();
  EXPECT_EQ(file.size(), 5);
}

TEST_F(RegularFileTest, RefusesWhatIsNotARegularFileByName) {
  EXPECT_EQ(read_regular_file(path("missing"), 10, "x").status().code(), StatusCode::kNotFound);
  fs::create_symlink(path("nowhere"), path("dangling"));
  EXPECT_EQ(read_regular_file(path("dangling"), 10, "x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_regular_file(dir_.string(), 10, "x").status().message(), dir_.string() + " is not a regular file (a directory)");
  EXPECT_EQ(read_regular_file("/dev/zero", 10, "x").status().message(), "/dev/zero is not a regular file (a character device)");
  fs::create_symlink("/dev/zero", path("zero.json"));  // read until the memory limit, before
  EXPECT_EQ(read_regular_file(path("zero.json"), int64_t{1} << 40, "x").status().message(),
            path("zero.json") + " is not a regular file (a character device)");
}

TEST_F(RegularFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_symlink(path("fifo"), path("fifo-link"));
  Status status;
  EXPECT_TRUE(testing::returns_without_blocking_on_fifo(
      [&] { status = RegularFile::open(path("fifo-link")).status(); }, path("fifo")));
  EXPECT_EQ(status.message(), path("fifo-link") + " is not a regular file (a FIFO)");
}

// The watchdog itself: a reader that does block on the FIFO is reported (false), not left hanging.
TEST_F(RegularFileTest, TheFifoWatchdogReportsAReaderThatBlocks) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  int fd = -1;
  EXPECT_FALSE(testing::returns_without_blocking_on_fifo([&] { fd = ::open(path("fifo").c_str(), O_RDONLY); },
                                                         path("fifo"), 0.2));
  if (fd >= 0) ::close(fd);
}

TEST_F(RegularFileTest, ReadsAreBounded) {
  std::ofstream(path("big")) << std::string(100, 'x');
  EXPECT_EQ(read_regular_file(path("big"), 99, "a chat template").status().message(),
            path("big") + " is 100 bytes, more than the 99 bytes a chat template may have");
  EXPECT_TRUE(read_regular_file(path("big"), 100, "a chat template").is_ok());
}

}  // namespace
}  // namespace moert
