// What the `moert` binary tests of cli_test share (cli_test.cpp and cli_*_test.cpp files of
// the same binary): the binary, a small model made by it, one-line errors, JSONL results.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert::cli_test {

namespace fs = std::filesystem;
using testing::run_command;

inline std::string moert() { return testing::moert_binary(); }

inline int count_lines(const std::string& text) {
  int lines = 0;
  for (char ch : text) lines += ch == '\n' ? 1 : 0;
  return lines;
}

// Makes a small two-layer model with several shards; returns its directory.
inline std::string make_small_model(const testing::ScratchDir& scratch, const std::string& name, const std::string& arch) {
  const std::string dir = scratch / name;
  const testing::CommandResult made =
      run_command(moert() + " make-model --arch " + arch + " --preset tiny --num-layers 2 --hidden-size 64 "
                  "--expert-size 64 --vocab-size 256 --head-dim 16 --shard-mb 0.05 --seed 3 --out " + dir);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return dir;
}

// Each bad input: exit code != 0 and exactly one line on stderr naming the problem.
inline void expect_one_line_error(const testing::CommandResult& result, const std::string& needle) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(testing::read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

}  // namespace moert::cli_test
