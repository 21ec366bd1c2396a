// What `moert` does with its files and resources (cli_test): outputs never lost or mixed up,
// non-regular and unreadable inputs, impossible requests refused before allocating.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/cli_test_support.h"

namespace moert::cli_test {
namespace {

// The results file is never lost or mixed up (docs/outputs.md): a non-empty output is only
// continued by --resume of the same job (model, input, result-changing options, recorded in
// OUTPUT.manifest.json); every refusal is one line and leaves the bytes as they were; a
// file locked by another job is refused; a torn last line is cut before resuming; the
// output may not be the input or the metrics file; "-" streams to stdout; a full disk is an
// error naming the file. Ids of any JSON type come back as given.
TEST(CliOutputSafety, RefusesForeignOutputsLocksCutsTornLinesAndStreams) {
  testing::ScratchDir scratch("cli-output-safety");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string other = make_small_model(scratch, "other", "mixtral");
  std::string text;
  const std::vector<std::string> ids = {"\"a\"", "7", "-3.5", "true", "[1, \"x\"]", "{\"k\": 1}",
                                        "\"" + std::string(5000, 'z') + "\""};
  for (size_t i = 0; i < ids.size(); ++i) {
    text += "{\"id\": " + ids[i] + ", \"prompt_token_ids\": [" + std::to_string(i + 1) + ", 2, 3], \"max_tokens\": 4}\n";
  }
  const std::string input = scratch / "in.jsonl", output = scratch / "out.jsonl";
  testing::write_file(input, text);
  const std::string run = moert() + " run --input " + input + " --threads 1 ";
  const testing::CommandResult first = run_command(run + "--model " + model + " --output " + output);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::vector<nlohmann::json> lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), ids.size());
  std::set<std::string> echoed;
  for (const auto& line : lines) echoed.insert(line["id"].dump());
  for (const std::string& id : ids) EXPECT_EQ(echoed.count(nlohmann::json::parse(id).dump()), 1u) << id;
  const std::string written = testing::read_file(output);

  // Refusals: bytes unchanged, one line each.
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output), "pass --resume");
  expect_one_line_error(run_command(run + "--model " + other + " --output " + output + " --resume"),
                        "was written by another job: model is");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output + " --resume --kv-cache-dtype bf16"),
                        "kv_cache_dtype is f32 there and bf16 here");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + input), "is the input file");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output + " --resume --metrics " + output),
                        "is the output file");
  EXPECT_EQ(testing::read_file(output), written);
  EXPECT_EQ(testing::read_file(input), text);
  const std::string foreign = scratch / "foreign.jsonl";
  testing::write_file(foreign, "{\"id\": \"mine\"}\n");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + foreign + " --resume"),
                        "not written by a moert job with a manifest");
  EXPECT_EQ(testing::read_file(foreign), "{\"id\": \"mine\"}\n");

  // Another process holds the lock: refused; the file is untouched.
  const testing::CommandResult locked =
      run_command("flock " + output + " -c '" + moert() + " run --input " + input + " --threads 1 --model " + model +
                  " --output " + output + " --resume'");
  EXPECT_NE(locked.exit_code, 0);
  EXPECT_NE(locked.err.find("another job is writing it"), std::string::npos) << locked.err;
  EXPECT_EQ(testing::read_file(output), written);

  // A torn last line (killed mid-write) and two results missing: --resume cuts the fragment
  // and serves exactly the missing ones; every line is whole JSON.
  std::string partial;
  for (size_t i = 0; i + 2 < lines.size(); ++i) partial += lines[i].dump() + "\n";
  partial += lines.back().dump().substr(0, 40);
  testing::write_file(output, partial);
  const testing::CommandResult resumed = run_command(run + "--model " + model + " --output " + output + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("cut a torn last line of 40 bytes"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("2 finished, 5 skipped"), std::string::npos) << resumed.err;
  const std::vector<nlohmann::json> after = read_jsonl(output);  // throws on a broken line
  EXPECT_EQ(after.size(), ids.size());

  // "-" writes the results to stdout (logs stay on stderr); /dev/full fails with its name.
  const testing::CommandResult streamed = run_command(run + "--model " + model + " --output -");
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(std::count(streamed.out.begin(), streamed.out.end(), '\n'), static_cast<long>(ids.size()));
  const testing::CommandResult full = run_command(run + "--model " + model + " --output /dev/full");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("/dev/full"), std::string::npos) << full.err;
}


// Inputs that are not regular files (a directory, a device, a FIFO) and model paths that are
// not directories are one-line errors, never a hang on an endless read.
TEST(CliFiles, NonRegularInputsAndModelPaths) {
  testing::ScratchDir scratch("cli-files");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string fifo = scratch / "fifo";
  ASSERT_EQ(run_command("mkfifo " + fifo).exit_code, 0);
  const std::string run = moert() + " run --model " + model + " --output " + (scratch / "out.jsonl") + " --input ";
  expect_one_line_error(run_command(run + "/dev/zero"), "input /dev/zero is not a regular file");
  expect_one_line_error(run_command(run + scratch.path()), "is a directory");
  expect_one_line_error(run_command(run + fifo), "is not a regular file");
  expect_one_line_error(run_command(run + (scratch / "missing.jsonl")), "cannot open input");
  EXPECT_FALSE(std::filesystem::exists(scratch / "out.jsonl"));
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --input /dev/zero"), "not a regular file");
  testing::write_file(scratch / "file", "x");
  const testing::CommandResult not_dir = run_command(moert() + " score --model " + (scratch / "file") + " --tokens 1");
  expect_one_line_error(not_dir, "Not a directory");
}


// Resource requests beyond what the node has, and impossible values, are one-line errors
// before anything is allocated or written: a huge make-model vocabulary, a KV pool larger
// than the available memory, --threads outside [1, 4096].
TEST(CliResources, ImpossibleRequestsFailBeforeAllocating) {
  testing::ScratchDir scratch("cli-resources");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  expect_one_line_error(run_command(moert() + " make-model --arch qwen3_moe --preset tiny --vocab-size 2000000000 --out " +
                                    (scratch / "big")),
                        "MiB in memory, more than the");
  EXPECT_FALSE(std::filesystem::exists(scratch / "big"));
  testing::write_file(scratch / "in.jsonl", "{\"id\": \"a\", \"prompt_token_ids\": [1, 2], \"max_tokens\": 2, \"n\": 5}\n"
                                            "{\"id\": \"b\", \"prompt_token_ids\": [3, 4], \"max_tokens\": 2, \"n\": 2}\n");
  const std::string run = moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --output ";
  expect_one_line_error(run_command(run + (scratch / "o1.jsonl") + " --kv-cache-mb 1000000"),
                        "more than the");
  expect_one_line_error(run_command(run + (scratch / "o2.jsonl") + " --threads 0"), "--threads '0' must be auto");
  expect_one_line_error(run_command(run + (scratch / "o3.jsonl") + " --threads 99999"), "in [1, 4096]");
  // n above --max-seqs runs in waves (docs/requests.md): both served.
  const testing::CommandResult capped = run_command(run + (scratch / "o4.jsonl") + " --max-seqs 3 --threads 1");
  EXPECT_EQ(capped.exit_code, 0) << capped.err;
  const std::vector<nlohmann::json> capped_lines = read_jsonl(scratch / "o4.jsonl");
  ASSERT_EQ(capped_lines.size(), 2u);
  for (const nlohmann::json& line : capped_lines) {
    EXPECT_EQ(line["outputs"].size(), line["id"] == "a" ? 5u : 2u) << line;
  }
}


// An unreadable model directory or input says why (the permission), run as an unprivileged
// user (root reads everything); skipped where runuser or the nobody account is missing.
TEST(CliFiles, UnreadableModelDirectorySaysWhy) {
  if (run_command("runuser -u nobody -- true").exit_code != 0) GTEST_SKIP() << "cannot run as nobody here";
  testing::ScratchDir scratch("cli-unreadable");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  ASSERT_EQ(run_command("chmod 755 " + scratch.path() + " && chmod 700 " + model).exit_code, 0);
  const testing::CommandResult denied =
      run_command("runuser -u nobody -- " + moert() + " score --model " + model + " --tokens 1,2");
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_EQ(count_lines(denied.err), 1) << denied.err;
  EXPECT_NE(denied.err.find("Permission denied"), std::string::npos) << denied.err;
}

}  // namespace
}  // namespace moert::cli_test
