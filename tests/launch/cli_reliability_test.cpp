// The adversarial suite's last classes, through the real binary: files that are not files
// (docs/files.md), ids that print alike (docs/requests.md), numbers reported as written, and
// `moert bench` refusing options outside their ranges (docs/bench.md). Every bad input is one
// line on stderr naming the problem and a non-zero exit, never a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string moert() { return "timeout -k 5 60 " + testing::moert_binary(); }

int count_lines(const std::string& text) {
  int lines = 0;
  for (char ch : text) lines += ch == '\n' ? 1 : 0;
  return lines;
}

void expect_one_line_error(const testing::CommandResult& result, const std::string& needle) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.exit_code, 124) << "timed out (blocked?): " << result.err;
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

std::string make_small_model(const testing::ScratchDir& scratch, const std::string& name) {
  const std::string dir = scratch / name;
  const testing::CommandResult made =
      run_command(testing::moert_binary() + " make-model --arch qwen3_moe --preset tiny --num-layers 2 --hidden-size 64 "
                  "--expert-size 64 --vocab-size 256 --head-dim 16 --shard-mb 0.05 --seed 3 --out " + dir);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return dir;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(testing::read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// Every file moert reads, replaced by a FIFO (which blocked the load before) or linked to
// /dev/zero (which was read until the memory ran out): one line naming it, at once.
TEST(CliReliability, FilesThatAreNotFilesFailInOneLine) {
  testing::ScratchDir scratch("cli-not-files");
  const std::string model = make_small_model(scratch, "model");
  testing::write_file(scratch / "in.jsonl", "{\"id\": 1, \"prompt_token_ids\": [1, 2], \"max_tokens\": 2}\n");
  std::vector<std::string> shards;
  for (const auto& entry : fs::directory_iterator(model)) {
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path().filename().string());
  }
  ASSERT_FALSE(shards.empty());
  std::sort(shards.begin(), shards.end());
  int copies = 0;
  // A copy of the model whose `file` is a FIFO (or, with `target`, a link to it).
  auto model_with = [&](const std::string& file, const std::string& target = "") {
    const std::string copy = scratch / ("m" + std::to_string(copies++));
    fs::copy(model, copy, fs::copy_options::recursive);
    fs::remove(copy + "/" + file);
    if (target.empty()) {
      EXPECT_EQ(::mkfifo((copy + "/" + file).c_str(), 0600), 0);
    } else {
      fs::create_symlink(target, copy + "/" + file);
    }
    return copy;
  };
  auto run = [&](const std::string& model_dir, const std::string& extra = "") {
    return run_command(moert() + " run --model " + model_dir + " --input " + (scratch / "in.jsonl") + " --output " +
                       (scratch / ("out" + std::to_string(copies) + ".jsonl")) + " --threads 1 " + extra);
  };
  for (const std::string& file : {std::string("config.json"), std::string("generation_config.json"),
                                  std::string("model.safetensors.index.json"), shards.back(),
                                  std::string("chat_template.jinja")
#if MOERT_TEST_WITH_TEXT
                                      ,
                                  std::string("tokenizer.json")
#endif
       }) {
    const std::string copy = model_with(file);
    if (file == "chat_template.jinja") testing::write_file(copy + "/tokenizer_config.json", "{}");  // read with it
    expect_one_line_error(run(copy), copy + "/" + file + " is not a regular file (a FIFO)");
  }
  const std::string zero_index = model_with("model.safetensors.index.json", "/dev/zero");
  expect_one_line_error(run(zero_index), "model.safetensors.index.json is not a regular file (a character device)");
  const std::string zero_config = model_with("config.json", "/dev/zero");
  expect_one_line_error(run(zero_config), "config.json is not a regular file (a character device)");

  // Files named by options: a placement, an options file, a draft model's shard.
  const std::string fifo = scratch / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line_error(run(model, "--placement " + fifo), fifo + " is not a regular file (a FIFO)");
  expect_one_line_error(run(model, "--config " + fifo), fifo + " is not a regular file (a FIFO)");
  const std::string draft = model_with(shards.front());
  expect_one_line_error(run(model, "--spec draft --draft-model " + draft),
                        draft + "/" + shards.front() + " is not a regular file (a FIFO)");
  // Links to regular files (a Hugging Face cache) still load.
  const std::string linked = model_with("config.json", fs::absolute(model + "/config.json").string());
  const testing::CommandResult ok = run(linked);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Integer 7 and string "7" are different ids: both are served and echoed in their JSON type,
// and --resume tells them apart.
TEST(CliReliability, IdsThatPrintAlikeAreBothServed) {
  testing::ScratchDir scratch("cli-ids");
  const std::string model = make_small_model(scratch, "model");
  testing::write_file(scratch / "in.jsonl",
                      "{\"id\": 7, \"prompt_token_ids\": [1, 2], \"max_tokens\": 2}\n"
                      "{\"id\": \"7\", \"prompt_token_ids\": [3, 4], \"max_tokens\": 3}\n"
                      "{\"id\": 7.5, \"prompt_token_ids\": [5], \"max_tokens\": 2}\n"
                      "{\"id\": [7], \"prompt_token_ids\": [6], \"max_tokens\": 2}\n"
                      "{\"id\": 8, \"prompt_token_ids\": [9, 9], \"max_tokens\": 8, \"temperature\": 1.0}\n"
                      "{\"id\": \"8\", \"prompt_token_ids\": [9, 9], \"max_tokens\": 8, \"temperature\": 1.0}\n");
  const std::string output = scratch / "out.jsonl";
  const std::string run = moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --threads 1 --output " + output;
  const testing::CommandResult first = run_command(run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::vector<nlohmann::json> lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), 6u) << testing::read_file(output);
  std::map<std::string, nlohmann::json> tokens;
  std::set<std::string> ids;
  for (const nlohmann::json& line : lines) {
    EXPECT_FALSE(line.contains("error")) << line;
    ids.insert(line["id"].dump());
    if (line["id"] == nlohmann::json(7)) EXPECT_EQ(line["outputs"][0]["token_ids"].size(), 2u);
    if (line["id"] == nlohmann::json("7")) EXPECT_EQ(line["outputs"][0]["token_ids"].size(), 3u);
    tokens[line["id"].dump()] = line["outputs"][0]["token_ids"];
  }
  EXPECT_EQ(ids, (std::set<std::string>{"7", "\"7\"", "7.5", "[7]", "8", "\"8\""}));
  // Two requests, not one served twice: without a seed, 8 and "8" draw from different seeds.
  EXPECT_NE(tokens["8"], tokens["\"8\""]);
  // Keep only the string id's line: a resume serves the integer id (and the others) again.
  std::string kept;
  for (const nlohmann::json& line : lines) {
    if (line["id"] == nlohmann::json("7")) kept = line.dump() + "\n";
  }
  testing::write_file(output, kept);
  const testing::CommandResult resumed = run_command(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("5 finished, 1 skipped"), std::string::npos) << resumed.err;
  ids.clear();
  for (const nlohmann::json& line : read_jsonl(output)) EXPECT_TRUE(ids.insert(line["id"].dump()).second) << line;
  EXPECT_EQ(ids.size(), 6u);
}

// Numbers in messages are the user's numbers: 2^64 - 1 is reported as written, not as -1
// (request fields), and a --max-seqs past int is named with its value (options).
TEST(CliReliability, NumbersInMessagesAreAsWritten) {
  testing::ScratchDir scratch("cli-numbers");
  const std::string model = make_small_model(scratch, "model");
  testing::write_file(scratch / "in.jsonl",
                      "{\"id\": \"token\", \"prompt_token_ids\": [1, 18446744073709551615], \"max_tokens\": 2}\n"
                      "{\"id\": \"stop\", \"prompt_token_ids\": [1], \"stop_token_ids\": [4294967297]}\n"
                      "{\"id\": \"seed\", \"prompt_token_ids\": [1], \"seed\": 18446744073709551615}\n"
                      "{\"id\": \"n\", \"prompt_token_ids\": [1], \"n\": 4294967297}\n"
                      "{\"id\": \"huge\", \"prompt_token_ids\": [1], \"max_tokens\": 100000000000000000000000}\n"
                      "{\"id\": \"fine\", \"prompt_token_ids\": [1], \"max_tokens\": 1}\n");
  const std::string output = scratch / "out.jsonl";
  const testing::CommandResult result = run_command(moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                                                    " --threads 1 --output " + output);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  std::map<std::string, std::string> messages;
  for (const nlohmann::json& line : read_jsonl(output)) {
    if (line.contains("error")) messages[line["id"]] = line["error"]["message"];
  }
  ASSERT_EQ(messages.size(), 5u) << testing::read_file(output);
  EXPECT_NE(messages["token"].find("'prompt_token_ids'[1] = 18446744073709551615 is outside"), std::string::npos) << messages["token"];
  EXPECT_NE(messages["stop"].find("'stop_token_ids'[0] = 4294967297 is outside"), std::string::npos) << messages["stop"];
  EXPECT_NE(messages["seed"].find("'seed' = 18446744073709551615 is outside"), std::string::npos) << messages["seed"];
  EXPECT_NE(messages["n"].find("'n' = 4294967297 is outside"), std::string::npos) << messages["n"];
  EXPECT_NE(messages["huge"].find("'max_tokens' is an integer out of range"), std::string::npos) << messages["huge"];
  for (const auto& [id, message] : messages) EXPECT_EQ(message.find("= -1"), std::string::npos) << id << ": " << message;
  expect_one_line_error(run_command(moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                                    " --output " + (scratch / "o2.jsonl") + " --max-seqs 18446744073709551615"),
                        "18446744073709551615");
}

// `moert bench` refuses its options outside their ranges by name, before loading anything.
TEST(CliReliability, BenchValidatesItsOptionsLikeRun) {
  testing::ScratchDir scratch("cli-bench-options");
  const std::string model = make_small_model(scratch, "model");
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(model + "/config.json"));
  const int context = config["max_position_embeddings"];
  const std::string bench = moert() + " bench --model " + model + " --threads 1 --warmup 0 --repeats 1 ";
  expect_one_line_error(run_command(bench + "--num-requests 0"), "--num-requests 0 must be >= 1");
  expect_one_line_error(run_command(bench + "--num-requests=-3"), "--num-requests -3 must be >= 1");
  expect_one_line_error(run_command(bench + "--num-requests 2000000"), "--num-requests 2000000 is outside [1, 1000000]");
  expect_one_line_error(run_command(bench + "--input-len " + std::to_string(context)),
                        "past the model's context of " + std::to_string(context));
  expect_one_line_error(run_command(bench + "--input-len 4 --output-len " + std::to_string(context)),
                        "past the model's context");
  expect_one_line_error(run_command(bench + "--input-len " + std::to_string(context * 6 / 10) +
                                    " --output-len 1 --len-dist uniform --len-range 0.9"),  // up to 1.9 x the mean
                        "past the model's context");
  expect_one_line_error(run_command(bench + "--input-len 0"), "--input-len 0 is outside");
  expect_one_line_error(run_command(bench + "--output-len=-1"), "--output-len -1 is outside");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --repeats 0"), "--repeats 0 is outside [1, 1000]");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --warmup=-1"), "--warmup -1 is outside [0, 1000]");
  expect_one_line_error(run_command(bench + "--batch-sizes 4,0"), "--batch-sizes entry 0 is outside");
  expect_one_line_error(run_command(bench + "--seed=-1"), "--seed -1 must be >= 0");  // not 2^64 - 1
  expect_one_line_error(run_command(bench + "--len-range 1"), "--len-range 1.000000 is outside [0, 1)");
  expect_one_line_error(run_command(bench + "--len-dist normal"), "--len-dist 'normal' is not fixed or uniform");
  expect_one_line_error(run_command(bench + "--json " + (scratch / "r") + " --csv " + (scratch / "r")),
                        "must name different files");
  // Inside the ranges it runs.
  const testing::CommandResult ok = run_command(bench + "--num-requests 2 --input-len 4 --output-len 2 --batch-sizes 2");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("bench: ranks=1 batch_size=2 requests=2"), std::string::npos) << ok.out;
}

}  // namespace
}  // namespace moert
