// `moert run`, `bench` and their options through the binary (cli_test): serving a batch,
// resuming, weight memory, KV cache dtypes, --config files and progress lines, and
// speculative decoding that equals plain decoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/cli_test_support.h"

namespace moert::cli_test {
namespace {

TEST(CliRun, ServesABatchSkipsBadLinesAndResumes) {
  testing::ScratchDir scratch("cli-run");
  const std::string model = make_small_model(scratch, "model", "qwen2_moe");
  const std::string input = scratch / "in.jsonl";
  std::string text;
  for (int r = 0; r < 6; ++r) {
    text += R"({"id": "r)" + std::to_string(r) + R"(", "prompt_token_ids": [)" + std::to_string(r + 1) + ", 7, 9], " +
            R"("max_tokens": )" + std::to_string(3 + r) + "}\n";
  }
  text += "{broken json\n";
  text += R"({"id": "sampled", "prompt_token_ids": [4, 4, 4], "max_tokens": 5, "temperature": 0.9, "n": 2, "seed": 1, "ignore_eos": true})" "\n";
  testing::write_file(input, text);
  const std::string output = scratch / "out.jsonl";
  const std::string run = moert() + " run --model " + model + " --input " + input + " --output " + output + " --threads 2";
  const testing::CommandResult first = run_command(run);
  EXPECT_EQ(first.exit_code, 3) << first.err;  // one malformed line
  EXPECT_NE(first.err.find("in.jsonl line 7: the line is not valid JSON"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("summary: "), std::string::npos);
  EXPECT_NE(first.err.find("prefix-cache hit rate"), std::string::npos);
  const std::vector<nlohmann::json> lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), 8u);  // 7 results and the error line of line 7
  std::map<std::string, nlohmann::json> by_id;
  for (const auto& line : lines) {
    if (line.contains("outputs")) {
      by_id[line["id"]] = line;
    } else {
      EXPECT_TRUE(line["id"].is_null()) << line;
      EXPECT_EQ(line["error"]["line"], 7) << line;
      EXPECT_NE(line["error"]["message"].get<std::string>().find("not valid JSON"), std::string::npos) << line;
    }
  }
  ASSERT_EQ(by_id.size(), 7u);
  for (int r = 0; r < 6; ++r) {
    const nlohmann::json& line = by_id.at("r" + std::to_string(r));
    EXPECT_EQ(line["outputs"][0]["token_ids"].size(), static_cast<size_t>(3 + r));
    EXPECT_EQ(line["outputs"][0]["finish_reason"], "length");
    EXPECT_EQ(line["prompt_tokens"], 3);
  }
  EXPECT_EQ(by_id.at("sampled")["outputs"].size(), 2u);
  EXPECT_EQ(by_id.at("sampled")["output_tokens"], 10);

  // A rerun after a "kill": drop two finished lines; only those two are served again,
  // with the same tokens.
  std::string kept;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["id"] != "r2" && lines[i]["id"] != "r4") kept += lines[i].dump() + "\n";
  }
  testing::write_file(output, kept);
  const testing::CommandResult second = run_command(run + " --resume");
  EXPECT_EQ(second.exit_code, 3);
  EXPECT_NE(second.err.find("2 finished, 5 skipped"), std::string::npos) << second.err;
  const std::vector<nlohmann::json> resumed = read_jsonl(output);
  ASSERT_EQ(resumed.size(), 8u);  // the error line is not written twice
  for (const auto& line : resumed) {
    if (line.contains("outputs")) {
      EXPECT_EQ(line["outputs"], by_id.at(line["id"])["outputs"]) << line["id"];
    }
  }
}

TEST(CliRun, BenchPrintsThroughput) {
  testing::ScratchDir scratch("cli-bench");
  const std::string model = make_small_model(scratch, "model", "mixtral");
  const testing::CommandResult bench = run_command(moert() + " bench --model " + model +
                                                   " --num-requests 6 --input-len 20 --output-len 5 --threads 2");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("bench: ranks=1 batch_size=64 requests=6 input_len=20.0 output_len=5.0"), std::string::npos)
      << bench.out;
  EXPECT_NE(bench.out.find("output_tok_s="), std::string::npos);
  EXPECT_NE(bench.out.find("(120 tokens), output"), std::string::npos) << bench.out;
}

// --weight-memory: every choice serves the same tokens (the start-up line names a choice
// other than the default copy); a bad value, a host choice with --device cuda, and mlock past
// RLIMIT_MEMLOCK (the lock capability dropped, as for a user) each fail in one line.
TEST(CliOptions, WeightMemoryChoicesServeTheSameTokensAndRefusalsAreOneLine) {
  testing::ScratchDir scratch("cli-weight-memory");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, "{\"id\": \"a\", \"prompt_token_ids\": [1, 2, 3, 4, 5], \"max_tokens\": 6}\n"
                             "{\"id\": \"b\", \"prompt_token_ids\": [9, 8, 7], \"max_tokens\": 6}\n");
  std::map<std::string, std::map<std::string, nlohmann::json>> outputs;  // memory -> id -> outputs
  for (const char* memory : {"copy", "mmap", "mlock"}) {
    const std::string output = scratch / (std::string(memory) + ".jsonl");
    const testing::CommandResult run = run_command("MOERT_LOG_LEVEL=info " + moert() + " run --model " + model + " --input " + input +
                                                   " --output " + output + " --threads 2 --weight-memory " + memory);
    ASSERT_EQ(run.exit_code, 0) << memory << ": " << run.err;
    EXPECT_EQ(run.err.find("weight memory " + std::string(memory)) != std::string::npos, std::string(memory) != "copy")
        << run.err;
    std::istringstream lines(testing::read_file(output));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json result = nlohmann::json::parse(line);
      outputs[memory][result["id"]] = result["outputs"];
    }
    EXPECT_EQ(outputs[memory].size(), 2u) << memory;
  }
  EXPECT_EQ(outputs["mmap"], outputs["copy"]);
  EXPECT_EQ(outputs["mlock"], outputs["copy"]);
  const std::string bench = moert() + " bench --model " + model + " --num-requests 1 --input-len 4 --output-len 2";
  expect_one_line_error(run_command(bench + " --weight-memory swap"),
                        "--weight-memory 'swap' is not one of copy, mmap, mlock");
  expect_one_line_error(run_command(bench + " --weight-memory mmap --device cuda"),
                        "--weight-memory mmap runs on the CPU only");
  expect_one_line_error(run_command(moert() + " score --model " + model + " --tokens 1,2 --weight-memory lock"),
                        "--weight-memory 'lock' is not one of copy, mmap, mlock");
  const std::string as_user = "prlimit --memlock=4096:4096 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock ";
  if (testing::kAddressSanitizer) return;  // its runtime makes mlock a no-op that never fails
  if (run_command(as_user + "true").exit_code != 0) return;  // no util-linux, or no right to drop capabilities
  const testing::CommandResult refused = run_command(as_user + bench + " --weight-memory mlock");
  expect_one_line_error(refused, "cannot lock ");
  EXPECT_NE(refused.err.find("RLIMIT_MEMLOCK 4 KiB (ulimit -l 4)"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("or use --weight-memory copy"), std::string::npos) << refused.err;
}

// --kv-cache-dtype on run/bench/eval: the engine line names the dtype, eval measures the
// drift against F32 (none for f32 itself), and a bad value is one line naming it.
TEST(CliRun, KvCacheDtypes) {
  testing::ScratchDir scratch("cli-kv-dtype");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const testing::CommandResult bench = run_command(moert() + " bench --model " + model +
                                                   " --num-requests 3 --input-len 20 --output-len 4 --threads 2 "
                                                   "--kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("tokens (fp8_e4m3)"), std::string::npos) << bench.out;
  const testing::CommandResult exact =
      run_command(moert() + " eval --model " + model + " --kv-cache-dtype f32 --num-sequences 2 --length 12");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_NE(exact.out.find("24 positions, mean KL 0 nats, top-1 agreement 1.0000"), std::string::npos) << exact.out;
  const testing::CommandResult bf16 =
      run_command(moert() + " eval --model " + model + " --kv-cache-dtype bf16 --num-sequences 2 --length 12");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_NE(bf16.out.find("with a bf16 KV cache against f32: 24 positions"), std::string::npos) << bf16.out;
  EXPECT_EQ(bf16.out.find("mean KL 0 nats"), std::string::npos) << bf16.out;
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --num-requests 1 --kv-cache-dtype int4"),
                        "--kv-cache-dtype 'int4'");
  expect_one_line_error(run_command(moert() + " eval --model " + model + " --kv-cache-dtype bf16 --against " + model),
                        "exactly one of --against");
}

// Speculative decoding (rollback after rejected drafts) on the release-shaped architectures:
// gpt-oss (sliding windows in the target's and the draft's caches) and DeepSeek-V3 (latent
// caches). The model drafting for itself accepts everything, and both it and the n-gram
// proposer give the outputs of plain decoding.
class CliRunSelfDraft : public ::testing::TestWithParam<std::string> {};

TEST_P(CliRunSelfDraft, EqualsPlainDecoding) {
  const std::string model = testing::shared_dir() + "/reference/" + GetParam() + "/hf";
  if (testing::shared_dir().empty() || !fs::exists(model)) GTEST_SKIP() << "no shared " << GetParam() << " case";
  testing::ScratchDir scratch("cli-self-draft-" + GetParam());
  std::string text;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> prompt;
    const int phrase = 3 + i;  // repeats give the n-gram proposer something to propose
    for (int j = 0; j < 30 + 11 * i; ++j) prompt.push_back(i % 2 == 0 ? (i * 97 + j * 13 + 1) % 1000 : (i * 31 + (j % phrase) * 7) % 1000);
    text += nlohmann::json({{"id", "s" + std::to_string(i)}, {"prompt_token_ids", prompt}, {"max_tokens", 20}}).dump() + "\n";
  }
  testing::write_file(scratch / "in.jsonl", text);
  auto run = [&](const std::string& name, const std::string& extra) {
    const testing::CommandResult result =
        run_command(moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --output " +
                    (scratch / name) + " --threads 1 --block-size 8 " + extra);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result;
  };
  auto outputs = [&](const std::string& name) {
    std::map<std::string, nlohmann::json> by_id;
    for (const auto& line : read_jsonl(scratch / name)) by_id[line["id"]] = line["outputs"];
    return by_id;
  };
  run("plain.jsonl", "");
  const testing::CommandResult spec = run("draft.jsonl", "--spec draft --draft-model " + model + " --spec-k 3");
  EXPECT_NE(spec.err.find("accepted (rate 1.000)"), std::string::npos) << spec.err;
  EXPECT_EQ(read_jsonl(scratch / "draft.jsonl").size(), 4u);
  EXPECT_EQ(outputs("draft.jsonl"), outputs("plain.jsonl"));
  run("ngram.jsonl", "--spec ngram --spec-k 4");
  EXPECT_EQ(outputs("ngram.jsonl"), outputs("plain.jsonl"));
}

INSTANTIATE_TEST_SUITE_P(ReleaseShapes, CliRunSelfDraft, ::testing::Values("gptoss-tiny", "deepseekv3-tiny"),
                         [](const auto& info) { return testing::test_param_name(info.param); });

// --config FILE gives any long option as `key = value` (the command line wins; unknown keys
// and missing files are one-line errors); --kv-cache-memory-fraction sizes the pool from
// the available memory and refuses values outside (0, 1]; `moert run` prints progress
// lines with the request total, rate, ETA and KV use when stderr is not a terminal.
TEST(CliOptions, ConfigFileMemoryFractionAndProgressLines) {
  testing::ScratchDir scratch("cli-options");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  testing::write_file(scratch / "bench.ini", "# bench settings\ninput-len = 12\noutput-len = 3\nwarmup = 0\n"
                                             "repeats = 1\nbatch-sizes = 2\nthreads = 1\n");
  const testing::CommandResult bench =
      run_command(moert() + " bench --model " + model + " --config " + (scratch / "bench.ini") + " --output-len 5");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("batch_size=2 requests=8 input_len=12.0 output_len=5.0"), std::string::npos) << bench.out;
  testing::write_file(scratch / "bad.ini", "no-such-option = 3\n");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --config " + (scratch / "bad.ini")),
                        "unrecognised option 'no-such-option'");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --config " + (scratch / "none.ini")),
                        "--config: cannot open");

  const testing::CommandResult fraction = run_command(moert() + " bench --model " + model +
                                                      " --kv-cache-memory-fraction 0.001 --batch-sizes 1 --repeats 1 "
                                                      "--warmup 0 --input-len 8 --output-len 2 --threads 1");
  ASSERT_EQ(fraction.exit_code, 0) << fraction.err;
  EXPECT_NE(fraction.out.find("engine: "), std::string::npos);
  EXPECT_EQ(fraction.out.find("engine: 16384 KV blocks"), std::string::npos) << "the default 1 GiB pool was used";
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --kv-cache-memory-fraction 1.5"),
                        "--kv-cache-memory-fraction = 1.5");

  // --input: the file's requests, cycled to --num-requests (10-token prompts, 3 new tokens).
  testing::write_file(scratch / "requests.jsonl",
                      "{\"id\": \"a\", \"prompt_token_ids\": [1,2,3,4,5,6,7,8,9,10], \"max_tokens\": 3}\n\n"
                      "{\"id\": \"b\", \"prompt_token_ids\": [9,8,7,6,5,4,3,2,1,0], \"max_tokens\": 3}\n");
  const testing::CommandResult from_file =
      run_command(moert() + " bench --model " + model + " --input " + (scratch / "requests.jsonl") +
                  " --num-requests 5 --batch-sizes 2 --warmup 0 --repeats 1 --threads 1 --json " + (scratch / "f.json"));
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  const nlohmann::json file_result = nlohmann::json::parse(testing::read_file(scratch / "f.json"));
  EXPECT_EQ(file_result["results"][0]["num_requests"], 5);
  EXPECT_EQ(file_result["results"][0]["input_len"], 10.0);
  EXPECT_EQ(file_result["results"][0]["output_len"], 3.0);
  testing::write_file(scratch / "broken.jsonl", "{\"id\": \"a\"}\n");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --input " + (scratch / "broken.jsonl")),
                        "broken.jsonl line 1");

  std::string text;
  for (int i = 0; i < 24; ++i) {
    text += "{\"id\": \"r" + std::to_string(i) + "\", \"prompt_token_ids\": [" + std::to_string(i + 1) +
            ", 3, 5, 7], \"max_tokens\": 40}\n";
  }
  testing::write_file(scratch / "in.jsonl", text);
  const testing::CommandResult run = run_command("MOERT_LOG_LEVEL=info " + moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                                                 " --output " + (scratch / "out.jsonl") +
                                                 " --threads 1 --max-seqs 2 --progress-interval 0.000001");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("/24 requests, "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(", ETA "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" blocks)"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace moert::cli_test
