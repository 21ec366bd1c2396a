// `moert run` under real `mpirun -np N`: the one output file written by rank 0 holds the
// same results as a single-rank run for every rank count and for a placement with
// replicas, on every shared reference model; setup errors on any rank end every rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/cli_parallel_support.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::mpirun_prefix;
using testing::run_command;

using cli_parallel::expect_run_matches_score;
using cli_parallel::outputs_by_id;
using cli_parallel::scored_greedy_tokens;

std::string requests_text(int vocab) {
  std::string text;
  for (int i = 0; i < 12; ++i) {
    nlohmann::json request = {{"id", "q" + std::to_string(i)}, {"max_tokens", 2 + (i * 5) % 11}};
    std::vector<int> prompt;
    for (int j = 0; j < 1 + (i * 7) % 30; ++j) prompt.push_back((i * 131 + j * 17 + 3) % vocab);
    request["prompt_token_ids"] = prompt;
    if (i % 4 == 1) {
      request["temperature"] = 0.7;
      request["seed"] = i;
      request["n"] = 2;
    }
    text += request.dump() + "\n";
  }
  return text;
}

class CliParallelRun : public ::testing::TestWithParam<std::string> {};

TEST_P(CliParallelRun, OutputsEqualOneRankForEveryRankCountAndReplicas) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  const std::string model = testing::shared_dir() + "/reference/" + GetParam() + "/hf";
  const nlohmann::json file = nlohmann::json::parse(testing::read_file(model + "/config.json"));
  const nlohmann::json& config = file.contains("text_config") ? file["text_config"] : file;  // Qwen3.5 nests it
  const int vocab = config["vocab_size"];
  const int experts = config.value("num_local_experts", config.value("n_routed_experts", config.value("num_experts", 0)));
  testing::ScratchDir scratch("cli-parallel-" + testing::test_param_name(GetParam()));
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, requests_text(vocab));
  // Replicas: expert e on rank e % 3, and every other expert also on rank (e + 1) % 3.
  std::vector<std::vector<int>> rank_experts(3);
  for (int e = 0; e < experts; ++e) rank_experts[e % 3].push_back(e);
  for (int e = 0; e < experts; e += 2) rank_experts[(e + 1) % 3].push_back(e);
  const nlohmann::json placement = {{"num_ranks", 3}, {"layers", {{{"rank_experts", rank_experts}}}}};
  testing::write_file(scratch / "replicas.json", placement.dump());

  auto run = [&](const std::string& launcher, const std::string& name, const std::string& extra) {
    const std::string output = scratch / (name + ".jsonl");
    const testing::CommandResult result = run_command(launcher + testing::moert_binary() + " run --model " + model +
                                                      " --input " + input + " --output " + output +
                                                      " --threads 1 --max-batched-tokens 40 " + extra);
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    EXPECT_NE(result.err.find("requests: 12 finished"), std::string::npos) << name << ": " << result.err;
    return outputs_by_id(output);
  };
  const std::map<std::string, nlohmann::json> single = run("", "single", "");
  ASSERT_EQ(single.size(), 12u);
  EXPECT_EQ(run(mpirun_prefix(1), "np1", ""), single);
  EXPECT_EQ(run(mpirun_prefix(2), "np2", "--metrics " + (scratch / "metrics.jsonl")), single);
  // Per-step metrics: one line per (step, rank), both ranks in every step, the steps in order.
  std::istringstream metrics(testing::read_file(scratch / "metrics.jsonl"));
  int lines = 0, finished = 0;
  int64_t dispatch_bytes = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const nlohmann::json m = nlohmann::json::parse(line);
    EXPECT_EQ(m["rank"], lines % 2) << line;
    EXPECT_EQ(m["step"], lines / 2) << line;
    finished += m["finished"].get<int>();
    dispatch_bytes += m["dispatch_bytes"].get<int64_t>();
    EXPECT_GE(m["step_s"].get<double>(), m["all_to_all_s"].get<double>()) << line;
  }
  EXPECT_GT(lines, 2);
  EXPECT_EQ(finished, 12);
  EXPECT_GT(dispatch_bytes, 0);
  EXPECT_EQ(run(mpirun_prefix(4), "np4", ""), single);
  EXPECT_EQ(run(mpirun_prefix(2), "np2_mmap", "--weight-memory mmap"), single);  // weights read in place
  EXPECT_EQ(run(mpirun_prefix(3), "np3_replicas", "--placement " + (scratch / "replicas.json")), single);
  EXPECT_EQ(run(mpirun_prefix(2), "np2_bias0", "--balance bias --balance-gamma 0"), single);  // a zero step changes nothing
  EXPECT_EQ(run(mpirun_prefix(4), "np4_replicate", "--balance replicate --balance-interval 2"), single);
}

INSTANTIATE_TEST_SUITE_P(Models, CliParallelRun, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });


// gpt-oss through `moert run`: prompts six or more windows long (W = 16), greedy, on 1 and 2
// ranks with an F32 KV cache, from the BF16 and the MXFP4 release checkpoints, give the
// reference forward's greedy tokens (`moert score`).
TEST(CliParallelGptOss, LongPromptsGiveTheReferenceTokensOnOneAndTwoRanks) {
  if (testing::shared_dir().empty() || !std::filesystem::exists(testing::shared_dir() + "/reference/gptoss-tiny/hf")) {
    GTEST_SKIP() << "no shared gpt-oss cases";
  }
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> prompt;
    for (int j = 0; j < 96 + 9 * i; ++j) prompt.push_back((i * 211 + j * 37 + 5) % 1000);
    prompts.push_back(prompt);
  }
  expect_run_matches_score("cli-parallel-gptoss", {"gptoss-tiny", "gptoss-tiny-mxfp4"}, prompts, {12, 12, 12, 12}, "");
}

// DeepSeek-V3 through `moert run`: a mixed batch (prompts of 1 to 70 tokens, 1 to 20 new
// tokens, two sharing a prefix) on 1 and 2 ranks with an F32 latent cache gives the
// reference forward's tokens from the BF16 and the FP8 release checkpoints; the summary and
// every metrics line report the latent cache's size, layers x (kv_lora_rank +
// qk_rope_head_dim) x 4 bytes per token.
TEST(CliParallelDeepseekV3, MixedBatchGivesTheReferenceTokensOnOneAndTwoRanks) {
  if (testing::shared_dir().empty() || !std::filesystem::exists(testing::shared_dir() + "/reference/deepseekv3-tiny/hf")) {
    GTEST_SKIP() << "no shared DeepSeek-V3 cases";
  }
  std::vector<std::vector<int>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 7; ++i) {
    std::vector<int> prompt;
    const int length = i == 0 ? 1 : 3 + (i * 23) % 68;
    for (int j = 0; j < length; ++j) prompt.push_back((i * 131 + j * 29 + 7) % 1000);
    prompts.push_back(prompt);
    max_tokens.push_back(1 + (i * 7) % 20);
  }
  prompts.push_back(prompts[3]);  // a prefix-cache hit on the latent blocks
  prompts.back().push_back(5);
  max_tokens.push_back(9);
  testing::ScratchDir metrics_dir("cli-parallel-deepseek-metrics");
  const std::string metrics = metrics_dir / "metrics.jsonl";
  const int64_t bytes_per_token = 4 * (64 + 16) * 4;  // 4 layers, kv_lora_rank 64, rope 16, F32
  const std::vector<std::string> logs = expect_run_matches_score(
      "cli-parallel-deepseek", {"deepseekv3-tiny", "deepseekv3-tiny-fp8"}, prompts, max_tokens, " --metrics " + metrics);
  for (const std::string& log : logs) {
    EXPECT_NE(log.find(std::to_string(bytes_per_token) + " KV cache bytes per token (all layers, f32)"),
              std::string::npos) << log;
  }
  std::istringstream lines(testing::read_file(metrics));
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    EXPECT_EQ(nlohmann::json::parse(line).at("kv_cache_bytes_per_token"), bytes_per_token) << line;
  }
  EXPECT_GT(count, 0);
}

// Greedy outputs of speculative decoding equal plain decoding on 1, 2 and 4 ranks, with a
// truncated draft of a draft-friendly target, the target's own NVFP4 copy as its draft
// (self-speculation), the n-gram proposer, and adaptive depth. Sampled requests finish
// (their tokens legitimately depend on the pass structure).
TEST(CliParallelSpec, GreedyOutputsEqualPlainDecodingOnOneAndFourRanks) {
  testing::ScratchDir scratch("cli-parallel-spec");
  const std::string moert = testing::moert_binary();
  const std::string target = scratch / "target", draft = scratch / "draft", nvfp4 = scratch / "nvfp4";
  const std::string shape = " --arch qwen3_moe --preset tiny --seed 8 --faithful-layers 1 --late-layer-scale 0.2";
  ASSERT_EQ(run_command(moert + " make-model" + shape + " --num-layers 4 --out " + target).exit_code, 0);
  ASSERT_EQ(run_command(moert + " make-model" + shape + " --num-layers 1 --out " + draft).exit_code, 0);
  ASSERT_EQ(run_command(moert + " quantize --model " + target + " --format nvfp4 --out " + nvfp4).exit_code, 0);
  std::string text;
  for (int i = 0; i < 12; ++i) {
    nlohmann::json request = {{"id", "s" + std::to_string(i)}, {"max_tokens", 6 + (i * 7) % 25}};
    std::vector<int> prompt;
    const int phrase = 3 + i % 4;
    for (int j = 0; j < 4 + (i * 5) % 27; ++j) prompt.push_back(i % 2 == 0 ? (i * 31 + (j % phrase) * 7) % 1024 : (i * 131 + j * 17 + 3) % 1024);
    request["prompt_token_ids"] = prompt;
    if (i % 4 == 3) {
      request["temperature"] = 0.8;
      request["seed"] = i;
    }
    text += request.dump() + "\n";
  }
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, text);
  auto run = [&](const std::string& launcher, const std::string& name, const std::string& extra) {
    const std::string output = scratch / (name + ".jsonl");
    const testing::CommandResult result = run_command(launcher + moert + " run --model " + target + " --input " + input +
                                                      " --output " + output + " --threads 1 --max-batched-tokens 48 " + extra);
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    EXPECT_NE(result.err.find("requests: 12 finished"), std::string::npos) << name << ": " << result.err;
    if (!extra.empty()) {  // it speculated: the summary counts verified passes
      EXPECT_NE(result.err.find("spec: "), std::string::npos) << name << ": " << result.err;
      EXPECT_EQ(result.err.find(" 0 passes"), std::string::npos) << name << ": " << result.err;
    }
    std::map<std::string, nlohmann::json> greedy;
    for (const auto& [id, outputs] : outputs_by_id(output)) {
      if (std::stoi(id.substr(1)) % 4 != 3) greedy[id] = outputs;
    }
    EXPECT_EQ(outputs_by_id(output).size(), 12u) << name;
    return greedy;
  };
  const std::map<std::string, nlohmann::json> plain = run("", "plain", "");
  ASSERT_EQ(plain.size(), 9u);
  EXPECT_EQ(run(mpirun_prefix(1), "draft_np1", "--spec draft --draft-model " + draft + " --spec-k 3"), plain);
  EXPECT_EQ(run(mpirun_prefix(4), "draft_np4", "--spec draft --draft-model " + draft + " --spec-k 5 --metrics " +
                                            (scratch / "spec_metrics.jsonl")),
            plain);
  // Per-step, per-rank metrics carry the verified drafts; they add up to the summary's.
  int64_t drafts = 0, accepted = 0;
  std::istringstream metrics(testing::read_file(scratch / "spec_metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json m = nlohmann::json::parse(line);
    drafts += m["spec_drafts"].get<int64_t>();
    accepted += m["spec_accepted"].get<int64_t>();
  }
  EXPECT_GT(drafts, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, drafts);
  EXPECT_EQ(run(mpirun_prefix(1), "ngram_np1", "--spec ngram --spec-k 4"), plain);
  EXPECT_EQ(run(mpirun_prefix(4), "ngram_np4", "--spec ngram --spec-k 4"), plain);
  EXPECT_EQ(run(mpirun_prefix(2), "nvfp4_np2", "--spec draft --draft-model " + nvfp4 + " --spec-k 4"), plain);
  // A draft computed with int8 activations proposes other tokens at times, never other outputs.
  EXPECT_EQ(run(mpirun_prefix(2), "nvfp4_int8_np2",
                "--spec draft --draft-model " + nvfp4 + " --draft-fp4-activations int8 --spec-k 4"),
            plain);
  // The int8-activation mode on an NVFP4 target is rank-invariant like the F32 path (every
  // request, sampled ones included), and its own outputs, not the F32 ones.
  auto run_int8 = [&](const std::string& launcher, const std::string& name) {
    const std::string output = scratch / (name + ".jsonl");
    const testing::CommandResult result =
        run_command(launcher + moert + " run --model " + nvfp4 + " --input " + input + " --output " + output +
                    " --threads 1 --max-batched-tokens 48 --fp4-activations int8");
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    return outputs_by_id(output);
  };
  const auto int8_one_rank = run_int8("", "int8_np1");
  EXPECT_EQ(int8_one_rank.size(), 12u);
  EXPECT_EQ(run_int8(mpirun_prefix(4), "int8_np4"), int8_one_rank);
}

// The MPI transport under each point-to-point layer Open MPI can use here: UCX (pml ucx;
// selected only where asked, see docs/environment.md), TCP and shared memory (pml ob1
// with btl tcp / vader). Forcing a layer that cannot start makes mpirun fail, so a pass
// means the job really ran over it; outputs equal one rank's each time.
TEST(CliParallelTransports, OutputsEqualOneRankOverUcxTcpAndSharedMemory) {
  testing::ScratchDir scratch("cli-parallel-transports");
  const std::string model = scratch / "m";
  ASSERT_EQ(run_command(testing::moert_binary() + " make-model --arch mixtral --preset tiny --num-layers 2 --out " +
                        model).exit_code, 0);
  testing::write_file(scratch / "in.jsonl", requests_text(1024));
  auto run = [&](const std::string& launcher, const std::string& name) {
    const std::string output = scratch / (name + ".jsonl");
    const testing::CommandResult result =
        run_command(launcher + testing::moert_binary() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                    " --output " + output + " --threads 1 --max-batched-tokens 40");
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    return outputs_by_id(output);
  };
  const std::map<std::string, nlohmann::json> single = run("", "single");
  ASSERT_EQ(single.size(), 12u);
  EXPECT_EQ(run(mpirun_prefix(2) + "--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any ", "ucx"), single);
  EXPECT_EQ(run(mpirun_prefix(3) + "--mca pml ob1 --mca btl self,tcp ", "tcp"), single);
  EXPECT_EQ(run(mpirun_prefix(2) + "--mca pml ob1 --mca btl self,vader ", "shared_memory"), single);
}

TEST(CliParallelRunErrors, ASetupErrorOnTheRanksEndsEveryRankWithOneMessage) {
  testing::ScratchDir scratch("cli-parallel-errors");
  const std::string model = scratch / "m";
  ASSERT_EQ(run_command(testing::moert_binary() + " make-model --arch qwen3_moe --preset tiny --num-layers 2 --out " +
                        model).exit_code, 0);
  testing::write_file(scratch / "in.jsonl", R"({"id": "a", "prompt_token_ids": [1, 2], "max_tokens": 2})" "\n");
  testing::write_file(scratch / "three.json", R"({"num_ranks": 3, "layers": [{"rank_experts": [[0, 1, 2], [3, 4, 5], [6, 7]]}]})");
  const std::string base = testing::moert_binary() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                           " --output " + (scratch / "out.jsonl");
  const testing::CommandResult wrong_ranks = run_command(mpirun_prefix(2) + base + " --placement " + (scratch / "three.json"));
  EXPECT_NE(wrong_ranks.exit_code, 0);
  EXPECT_NE(wrong_ranks.err.find("places experts on 3 ranks, the job has 2"), std::string::npos) << wrong_ranks.err;
  const testing::CommandResult missing = run_command(mpirun_prefix(2) + testing::moert_binary() + " run --model " +
                                                     (scratch / "nowhere") + " --input " + (scratch / "in.jsonl") +
                                                     " --output " + (scratch / "out.jsonl"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
  const testing::CommandResult bad_mode = run_command(mpirun_prefix(2) + base + " --balance sideways");
  EXPECT_NE(bad_mode.exit_code, 0);
  EXPECT_NE(bad_mode.err.find("'sideways' is not one of none, bias, replicate"), std::string::npos) << bad_mode.err;
  // Speculative-decoding options that cannot work are refused at setup, on every rank.
  ASSERT_EQ(run_command(testing::moert_binary() + " make-model --arch mixtral --preset tiny --num-layers 1 --vocab-size 512 --out " +
                        (scratch / "other_vocab")).exit_code, 0);
  const std::vector<std::pair<std::string, std::string>> bad_spec = {
      {" --spec draft", "--spec=draft needs --draft-model DIR"},
      {" --draft-model " + model, "needs --spec=draft (got --spec=none)"},
      {" --spec ngram --spec-k 0", "--spec-k '0' must be an integer in [1, 32] or auto"},
      {" --spec guess", "--spec 'guess' is not one of none, draft, ngram"},
      {" --spec ngram --ngram-min 5 --ngram-max 3", "min_n = 5 must be <= max_n = 3"},
      {" --spec draft --draft-model " + (scratch / "nowhere"), "nowhere"},
      {" --spec draft --draft-model " + (scratch / "other_vocab"), "has a vocabulary of 512 tokens, the target 1024"}};
  for (const auto& [options, message] : bad_spec) {
    const testing::CommandResult bad = run_command(mpirun_prefix(2) + base + options);
    EXPECT_NE(bad.exit_code, 0) << options;
    EXPECT_NE(bad.err.find(message), std::string::npos) << options << ": " << bad.err;
  }
}


// `moert bench` under mpirun -np 2 is ONE expert-parallel benchmark: rank 0 alone reports
// one result per batch size (ranks 2) with throughput and latency percentiles, in the text
// line, the JSON document, the CSV (header + one row per result) and the PNG; `moert plot`
// redraws the PNG from the JSON.
TEST(CliParallelBench, OneResultPerBatchSizeAcrossTwoRanks) {
  testing::ScratchDir scratch("cli-parallel-bench");
  const std::string moert = testing::moert_binary();
  ASSERT_EQ(run_command(moert + " make-model --arch qwen3_moe --preset tiny --num-layers 2 --out " + (scratch / "m")).exit_code, 0);
  const std::string json_path = scratch / "b.json", csv_path = scratch / "b.csv", png_path = scratch / "b.png";
  const testing::CommandResult result = run_command(
      mpirun_prefix(2) + moert + " bench --model " + (scratch / "m") + " --batch-sizes 1,4 --input-len 24 --output-len 8 " +
      "--warmup 1 --repeats 2 --threads 1 --kv-cache-mb 64 --json " + json_path + " --csv " + csv_path + " --plot " + png_path);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  size_t lines = 0;
  for (size_t at = result.out.find("bench: ranks=2"); at != std::string::npos; at = result.out.find("bench: ranks=2", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u) << result.out;  // one per batch size, from rank 0 only
  EXPECT_NE(result.out.find("bench: ranks=2 batch_size=4 requests=16 input_len=24.0 output_len=8.0"), std::string::npos)
      << result.out;

  const nlohmann::json document = nlohmann::json::parse(testing::read_file(json_path));
  EXPECT_EQ(document["config"]["ranks"], 2);
  for (const char* key : {"model", "architecture", "weight_formats", "kv_cache_dtype", "device", "commit", "host"}) {
    EXPECT_TRUE(document["config"].contains(key)) << key;
  }
  ASSERT_EQ(document["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& r = document["results"][i];
    EXPECT_EQ(r["ranks"], 2);
    EXPECT_EQ(r["batch_size"], i == 0 ? 1 : 4);
    EXPECT_EQ(r["repeats"], 2);
    EXPECT_EQ(r["input_len"], 24.0);
    EXPECT_EQ(r["output_len"], 8.0);
    EXPECT_GT(r["output_throughput_tok_s"].get<double>(), 0.0);
    EXPECT_GT(r["total_throughput_tok_s"].get<double>(), r["output_throughput_tok_s"].get<double>());
    for (const char* metric : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
      for (const char* stat : {"mean", "p50", "p90", "p99"}) {
        EXPECT_GT(r[metric][stat].get<double>(), 0.0) << metric << " " << stat;
      }
      EXPECT_LE(r[metric]["p50"].get<double>(), r[metric]["p99"].get<double>()) << metric;
    }
    EXPECT_LE(r["ttft_ms"]["p50"].get<double>(), r["e2e_ms"]["p50"].get<double>());
    EXPECT_EQ(r["itl_ms"]["count"], 2 * r["num_requests"].get<int>() * 7);  // 8 tokens: 7 gaps, 2 repeats
    // Each rank's exchange in the last timed run: rows went both ways, and a rank cannot wait
    // longer than its exchanges were in flight.
    ASSERT_EQ(r["exchange"].size(), 2u);
    for (int rank = 0; rank < 2; ++rank) {
      const nlohmann::json& x = r["exchange"][rank];
      EXPECT_EQ(x["rank"], rank);
      EXPECT_GT(x["dispatch_bytes"].get<int64_t>(), 0);
      EXPECT_GT(x["combine_bytes"].get<int64_t>(), 0);
      EXPECT_GT(x["exchange_in_flight_s"].get<double>(), 0.0);
      EXPECT_LE(x["exchange_wait_s"].get<double>(), x["exchange_in_flight_s"].get<double>());
      EXPECT_GE(x["hidden_fraction"].get<double>(), 0.0);
      EXPECT_LE(x["hidden_fraction"].get<double>(), 1.0);
      EXPECT_LE(x["all_to_all_s"].get<double>(), x["step_s"].get<double>());
    }
  }
  EXPECT_EQ(document["config"]["ep_dispatch_dtype"], "f32");
  EXPECT_EQ(document["config"]["ep_combine_dtype"], "f32");
  EXPECT_EQ(document["config"]["micro_batches"], "auto");
  std::istringstream csv(testing::read_file(csv_path));
  std::vector<std::string> rows;
  for (std::string row; std::getline(csv, row);) rows.push_back(row);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].rfind("ranks,batch_size,", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1].rfind("2,1,", 0), 0u) << rows[1];
  EXPECT_EQ(rows[2].rfind("2,4,", 0), 0u) << rows[2];
  const std::string png = testing::read_file(png_path);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const std::string redrawn = scratch / "again.png";
  const testing::CommandResult plotted = run_command(moert + " plot --json " + json_path + " --out " + redrawn);
  EXPECT_EQ(plotted.exit_code, 0) << plotted.err;
  EXPECT_EQ(testing::read_file(redrawn).substr(1, 3), "PNG");
  testing::write_file(scratch / "empty.json", R"({"config": {}, "results": []})");
  const testing::CommandResult empty = run_command(moert + " plot --json " + (scratch / "empty.json") + " --out " + redrawn);
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.err.find("no benchmark results"), std::string::npos) << empty.err;
}


double prefix_hit_rate(const std::string& log) {
  const size_t at = log.find("prefix-cache hit rate ");
  EXPECT_NE(at, std::string::npos) << log;
  return at == std::string::npos ? -1.0 : std::stod(log.substr(at + 22));
}

// Cache-aware routing: on 8 system prompts x 8 questions in shuffled order, 2 ranks keep
// the single-rank prefix-cache hit rate with --request-routing prefix (the default) and
// lose it with the free-block rule alone; outputs are the same either way. A placement
// saved by a --balance=replicate job loads into the next job and serves the same outputs.
TEST(CliParallelRouting, PrefixRoutingKeepsTheSingleRankHitRateAndPlacementsRoundTrip) {
  testing::ScratchDir scratch("cli-parallel-routing");
  const std::string moert = testing::moert_binary();
  ASSERT_EQ(run_command(moert + " make-model --arch qwen3_moe --preset tiny --num-layers 2 --out " + (scratch / "m")).exit_code, 0);
  std::string text;
  for (int i = 0; i < 64; ++i) {
    const int system = (i * 5 + i / 8) % 8;
    std::vector<int> prompt;
    for (int j = 0; j < 64; ++j) prompt.push_back((system * 131 + j * 17 + 3) % 1000);
    for (int j = 0; j < 8; ++j) prompt.push_back((i * 71 + j * 13 + 500) % 1000);
    text += nlohmann::json({{"id", "p" + std::to_string(i)}, {"prompt_token_ids", prompt}, {"max_tokens", 3}}).dump() + "\n";
  }
  testing::write_file(scratch / "in.jsonl", text);
  auto run = [&](const std::string& launcher, const std::string& name, const std::string& extra) {
    const testing::CommandResult result =
        run_command(launcher + moert + " run --model " + (scratch / "m") + " --input " + (scratch / "in.jsonl") +
                    " --output " + (scratch / name) + " --threads 1 --max-seqs 8 --progress-interval 0 " + extra);
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    return result.err;
  };
  const double single = prefix_hit_rate(run("", "one.jsonl", ""));
  const double routed = prefix_hit_rate(run(mpirun_prefix(2), "prefix.jsonl", ""));
  const double free_blocks = prefix_hit_rate(run(mpirun_prefix(2), "free.jsonl", "--request-routing free-blocks"));
  EXPECT_GT(single, 0.7);
  EXPECT_EQ(routed, single);
  EXPECT_LT(free_blocks, single - 0.05);
  EXPECT_EQ(outputs_by_id(scratch / "prefix.jsonl"), outputs_by_id(scratch / "one.jsonl"));
  EXPECT_EQ(outputs_by_id(scratch / "free.jsonl"), outputs_by_id(scratch / "one.jsonl"));

  const std::string placement = scratch / "placement.json";
  run(mpirun_prefix(2), "replicate.jsonl", "--balance replicate --balance-interval 2 --save-expert-placement " + placement);
  const nlohmann::json saved = nlohmann::json::parse(testing::read_file(placement));
  EXPECT_TRUE(saved.is_object()) << saved.dump();
  run(mpirun_prefix(2), "placed.jsonl", "--expert-placement " + placement);
  EXPECT_EQ(outputs_by_id(scratch / "placed.jsonl"), outputs_by_id(scratch / "one.jsonl"));
  const testing::CommandResult both = run_command(mpirun_prefix(2) + moert + " run --model " + (scratch / "m") + " --input " +
                                                  (scratch / "in.jsonl") + " --output " + (scratch / "x.jsonl") +
                                                  " --balance replicate --expert-placement " + placement);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("drop --expert-placement"), std::string::npos) << both.err;
}


// Ranks started with different options or models (mpirun's MPMD form) are refused at
// start-up, every rank exiting non-zero with one message naming the rank, the field and both
// values; the output is not created.
TEST(CliParallelAgreement, RanksStartedDifferentlyAreRefused) {
  testing::ScratchDir scratch("cli-parallel-agreement");
  const std::string moert = testing::moert_binary();
  const std::string shape = " make-model --arch qwen3_moe --preset tiny --num-layers 2 --out ";
  ASSERT_EQ(run_command(moert + shape + (scratch / "a") + " --seed 1").exit_code, 0);
  ASSERT_EQ(run_command(moert + shape + (scratch / "b") + " --seed 2").exit_code, 0);  // same shapes, other weights
  testing::write_file(scratch / "in.jsonl", "{\"id\": \"x\", \"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 2}\n");
  auto mpmd = [&](const std::string& first, const std::string& second) {
    const std::string base = moert + " run --input " + (scratch / "in.jsonl") + " --output " + (scratch / "out.jsonl") +
                             " --threads 1 ";
    return run_command("timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 1 " + base + first + " : -np 1 " +
                       base + second);
  };
  const testing::CommandResult dtype = mpmd("--model " + (scratch / "a") + " --kv-cache-dtype f32",
                                            "--model " + (scratch / "a") + " --kv-cache-dtype bf16");
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_NE(dtype.err.find("rank 1 was started differently from rank 0: kv_cache_dtype is bf16 there and f32 on rank 0"),
            std::string::npos) << dtype.err;
  const testing::CommandResult model = mpmd("--model " + (scratch / "a"), "--model " + (scratch / "b"));
  EXPECT_NE(model.exit_code, 0);
  EXPECT_NE(model.err.find("rank 1 was started differently from rank 0: model is"), std::string::npos) << model.err;
  const testing::CommandResult spec = mpmd("--model " + (scratch / "a"), "--model " + (scratch / "a") + " --spec ngram");
  EXPECT_NE(spec.exit_code, 0);
  EXPECT_NE(spec.err.find("spec is ngram there and none on rank 0"), std::string::npos) << spec.err;
  EXPECT_FALSE(std::filesystem::exists(scratch / "out.jsonl"));
  const testing::CommandResult same = mpmd("--model " + (scratch / "a"), "--model " + (scratch / "a"));
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

}  // namespace
}  // namespace moert

#if MOERT_TEST_WITH_TEXT
#include "text/tokenizer/tokenizer.h"

namespace moert {
namespace {

// A tiny Qwen3-MoE model over the real Qwen3 vocabulary (151,669 ids) with the Qwen3 tokenizer
// files (tokenizer.json, tokenizer_config.json with its chat template) at `model`.
void make_qwen3_vocabulary_model(const std::string& model) {
  ASSERT_EQ(run_command(testing::moert_binary() +
                        " make-model --arch qwen3_moe --preset tiny --vocab-size 151669 --hidden-size 64 "
                        "--num-layers 2 --num-heads 2 --num-kv-heads 1 --head-dim 32 --expert-size 64 --out " + model)
                .exit_code, 0);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3/" + file, model + "/" + file);
  }
}

// Text in, text out: a tiny model over the real Qwen3 vocabulary (151,669 ids) with the
// Qwen3 tokenizer files; "prompt" text is tokenized at rank 0 exactly as the tokenizer does,
// and every output's "text" is the tokenizer's decode of its ids, on 1 and 2 ranks; a text
// prompt without tokenizer files is an error for its line only.
TEST(CliParallelText, PromptTextInDecodedTextOutOnOneAndTwoRanks) {
  testing::ScratchDir scratch("cli-parallel-text");
  const std::string moert = testing::moert_binary(), model = scratch / "m";
  ASSERT_NO_FATAL_FAILURE(make_qwen3_vocabulary_model(model));
  const std::string tokenizer_dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3";
  const text::Tokenizer tokenizer = text::Tokenizer::load(tokenizer_dir);
  const std::vector<std::string> prompts = {"Hello world, how are", "<|im_start|>user\n你好 🌍<|im_end|>",
                                            "def f(x):\n\treturn x ** 2  # square", "Ünïcödé  spaces\r\n"};
  std::string text;
  for (size_t i = 0; i < prompts.size(); ++i) {
    text += nlohmann::json({{"id", "p" + std::to_string(i)}, {"prompt", prompts[i]}, {"max_tokens", 5 + 3 * i}}).dump() + "\n";
    text += nlohmann::json({{"id", "i" + std::to_string(i)}, {"prompt_token_ids", tokenizer.encode(prompts[i])},
                            {"max_tokens", 5 + 3 * i}}).dump() + "\n";
  }
  // A chat in moert's own line shape, rendered with the checkpoint's template (Qwen3's).
  text += R"({"id": "chat", "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 4})" "\n";
  testing::write_file(scratch / "in.jsonl", text);
  std::map<std::string, nlohmann::json> single;
  for (const std::string launcher : {std::string(), mpirun_prefix(2)}) {
    const std::string out = scratch / (launcher.empty() ? "one.jsonl" : "two.jsonl");
    const testing::CommandResult result = run_command(launcher + moert + " run --model " + model + " --input " +
                                                      (scratch / "in.jsonl") + " --output " + out +
                                                      " --threads 1 --kv-cache-mb 64");
    ASSERT_EQ(result.exit_code, 0) << result.err;
    std::map<std::string, nlohmann::json> lines;
    std::istringstream in(testing::read_file(out));
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      lines[j["id"]] = j;
    }
    ASSERT_EQ(lines.size(), 2 * prompts.size() + 1);
    EXPECT_EQ(lines.at("chat")["prompt_tokens"],
              tokenizer.encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n").size());
    lines.erase("chat");
    for (size_t i = 0; i < prompts.size(); ++i) {
      const nlohmann::json& by_text = lines.at("p" + std::to_string(i));
      const nlohmann::json& by_ids = lines.at("i" + std::to_string(i));
      EXPECT_EQ(by_text["prompt_tokens"], tokenizer.encode(prompts[i]).size()) << i;
      EXPECT_EQ(by_text["outputs"][0]["token_ids"], by_ids["outputs"][0]["token_ids"]) << i;
      for (const nlohmann::json* line : {&by_text, &by_ids}) {
        const std::vector<int32_t> ids = (*line)["outputs"][0]["token_ids"].get<std::vector<int32_t>>();
        EXPECT_EQ((*line)["outputs"][0]["text"], tokenizer.decode(ids, true)) << i;
      }
    }
    if (launcher.empty()) {
      single = lines;
    } else {
      for (const auto& [id, line] : lines) EXPECT_EQ(line["outputs"], single.at(id)["outputs"]) << id;
    }
  }
  // Without the tokenizer files: the text line fails alone.
  std::filesystem::remove(model + "/tokenizer.json");
  testing::write_file(scratch / "mixed.jsonl", "{\"id\": \"a\", \"prompt\": \"hi\", \"max_tokens\": 2}\n"
                                               "{\"id\": \"b\", \"prompt_token_ids\": [1, 2], \"max_tokens\": 2}\n");
  const testing::CommandResult no_tokenizer = run_command(moert + " run --model " + model + " --input " +
                                                          (scratch / "mixed.jsonl") + " --output " +
                                                          (scratch / "mixed.out.jsonl") + " --threads 1 --kv-cache-mb 64");
  EXPECT_EQ(no_tokenizer.exit_code, 3) << no_tokenizer.err;
  EXPECT_NE(no_tokenizer.err.find("'prompt' text needs the tokenizer"), std::string::npos) << no_tokenizer.err;
}

// An OpenAI Batch API file (docs/requests.md) with chats and text completions on 1 and 2 ranks:
// every result is in the batch output shape, its text is the tokenizer's decode of its ids
// (cut before a stop string), chats are rendered with the checkpoint's template, EOS ids and
// sampling defaults come from generation_config.json, and each malformed line gets its own
// error line while the rest run.
TEST(CliParallelText, OpenAiBatchFileOnOneAndTwoRanks) {
  testing::ScratchDir scratch("cli-parallel-openai");
  const std::string moert = testing::moert_binary(), model = scratch / "m";
  ASSERT_NO_FATAL_FAILURE(make_qwen3_vocabulary_model(model));
  const std::string tokenizer_dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/qwen3";
  // Qwen3's generation_config.json: two EOS ids and sampling defaults.
  testing::write_file(model + "/generation_config.json",
                      R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                          "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95})");
  const text::Tokenizer tokenizer = text::Tokenizer::load(tokenizer_dir);
  const auto line = [](const std::string& id, const std::string& url, const nlohmann::json& body) {
    return nlohmann::json({{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", body}}).dump() + "\n";
  };
  const std::string chat_url = "/v1/chat/completions", completion_url = "/v1/completions";
  std::string input;
  input += line("chat-greedy", chat_url,
                {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi there"}}}}, {"max_tokens", 6},
                 {"temperature", 0}});
  input += line("chat-sampled", chat_url,
                {{"model", "tiny"},
                 {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "你好 🌍"}}}},
                 {"max_completion_tokens", 7}, {"n", 2}, {"seed", 5}, {"logprobs", true}, {"top_logprobs", 2}});
  input += "{this is not json\n";
  input += line("text", completion_url, {{"model", "tiny"}, {"prompt", "def f(x):\n\treturn"}, {"max_tokens", 5},
                                          {"temperature", 0}, {"logprobs", 1}});
  input += line("ids", completion_url, {{"model", "tiny"}, {"prompt", tokenizer.encode("Hello world")},
                                         {"max_tokens", 4}, {"temperature", 0}, {"presence_penalty", 1.5}});
  input += line("unsupported", completion_url, {{"model", "tiny"}, {"prompt", "x"}, {"logit_bias", {{"1", 5}}}});
  input += line("no-messages", chat_url, {{"model", "tiny"}});
  testing::write_file(scratch / "batch.jsonl", input);

  // The greedy text completion without a stop string, to build one that spans tokens.
  std::map<std::string, nlohmann::json> single;
  for (const std::string launcher : {std::string(), mpirun_prefix(2)}) {
    const std::string out = scratch / (launcher.empty() ? "one.jsonl" : "two.jsonl");
    const testing::CommandResult result = run_command(launcher + moert + " run --model " + model + " --input " +
                                                      (scratch / "batch.jsonl") + " --output " + out +
                                                      " --threads 1 --kv-cache-mb 64");
    EXPECT_EQ(result.exit_code, 3) << result.err;  // three bad lines
    std::map<std::string, nlohmann::json> lines;
    int errors = 0;
    std::istringstream in(testing::read_file(out));
    for (std::string text; std::getline(in, text);) {
      const nlohmann::json j = nlohmann::json::parse(text);
      if (!j["error"].is_null()) {
        ++errors;
        EXPECT_TRUE(j["response"].is_null()) << j;
        const std::string message = j["error"]["message"];
        if (j["custom_id"] == "unsupported") {
          EXPECT_NE(message.find("'body.logit_bias' is not supported"), std::string::npos) << message;
        } else if (j["custom_id"] == "no-messages") {
          EXPECT_NE(message.find("'body.messages' is missing"), std::string::npos) << message;
        } else {
          EXPECT_TRUE(j["custom_id"].is_null()) << j;
          EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
        }
        continue;
      }
      lines[j["custom_id"]] = j;
    }
    EXPECT_EQ(errors, 3);
    ASSERT_EQ(lines.size(), 4u);
    for (const auto& [id, j] : lines) {
      SCOPED_TRACE(id);
      EXPECT_EQ(j["response"]["status_code"], 200);
      const nlohmann::json& body = j["response"]["body"];
      EXPECT_EQ(body["model"], "tiny");
      int64_t completion_tokens = 0;
      for (const nlohmann::json& choice : body["choices"]) {
        const std::vector<int32_t> ids = choice["token_ids"].get<std::vector<int32_t>>();
        completion_tokens += static_cast<int64_t>(ids.size());
        const nlohmann::json text = body["object"] == "chat.completion" ? choice["message"]["content"] : choice["text"];
        EXPECT_EQ(text, tokenizer.decode(ids, true));
        // EOS ends a choice with "stop"; otherwise max_tokens with "length".
        const bool eos = !ids.empty() && (ids.back() == 151645 || ids.back() == 151643);
        EXPECT_EQ(choice["finish_reason"], eos ? "stop" : "length");
      }
      EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);
    }
    const nlohmann::json& greedy = lines.at("chat-greedy")["response"]["body"];
    EXPECT_EQ(greedy["object"], "chat.completion");
    EXPECT_EQ(greedy["usage"]["prompt_tokens"],
              tokenizer.encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n").size());
    const nlohmann::json& sampled = lines.at("chat-sampled")["response"]["body"];
    ASSERT_EQ(sampled["choices"].size(), 2u);
    for (const nlohmann::json& choice : sampled["choices"]) {
      ASSERT_EQ(choice["logprobs"]["content"].size(), choice["token_ids"].size());
      for (const nlohmann::json& entry : choice["logprobs"]["content"]) {
        EXPECT_LE(entry["logprob"].get<double>(), 0.0);
        EXPECT_EQ(entry["top_logprobs"].size(), 2u);
        EXPECT_GE(entry["top_logprobs"][0]["logprob"].get<double>(), entry["logprob"].get<double>() - 1e-9);
      }
    }
    const nlohmann::json& text_body = lines.at("text")["response"]["body"];
    EXPECT_EQ(text_body["object"], "text_completion");
    EXPECT_EQ(text_body["usage"]["prompt_tokens"], tokenizer.encode("def f(x):\n\treturn").size());
    EXPECT_EQ(text_body["choices"][0]["logprobs"]["tokens"].size(), text_body["choices"][0]["token_ids"].size());
    if (launcher.empty()) {
      single = lines;
    } else {
      for (const auto& [id, j] : lines) {
        EXPECT_EQ(j["response"]["body"]["choices"], single.at(id)["response"]["body"]["choices"]) << id;
      }
    }
  }

  // A stop string that spans two tokens of the greedy completion ends it there and is not emitted.
  const nlohmann::json& choice = single.at("text")["response"]["body"]["choices"][0];
  const std::vector<int32_t> ids = choice["token_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 3u);
  const std::vector<int32_t> one_id(ids.begin(), ids.begin() + 1), two_ids(ids.begin(), ids.begin() + 2);
  const std::string first_one = tokenizer.decode(one_id, true), first_two = tokenizer.decode(two_ids, true);
  ASSERT_FALSE(first_one.empty());
  ASSERT_GT(first_two.size(), first_one.size());
  const std::string stop = first_one.substr(first_one.size() - 1) + first_two.substr(first_one.size(), 1);
  testing::write_file(scratch / "stop.jsonl",
                      line("stop", completion_url, {{"model", "tiny"}, {"prompt", "def f(x):\n\treturn"}, {"max_tokens", 5},
                                                    {"temperature", 0}, {"stop", {"never-there", stop}}}));
  const testing::CommandResult stopped = run_command(mpirun_prefix(2) + moert + " run --model " + model + " --input " +
                                                     (scratch / "stop.jsonl") + " --output " + (scratch / "stop.out.jsonl") +
                                                     " --threads 1 --kv-cache-mb 64");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const nlohmann::json result = nlohmann::json::parse(testing::read_file(scratch / "stop.out.jsonl"));
  const nlohmann::json& stopped_choice = result["response"]["body"]["choices"][0];
  EXPECT_EQ(stopped_choice["finish_reason"], "stop");
  EXPECT_EQ(stopped_choice["stop_reason"], stop);
  const std::string full = tokenizer.decode(ids, true);
  EXPECT_EQ(stopped_choice["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(stopped_choice["token_ids"], nlohmann::json(std::vector<int32_t>(ids.begin(), ids.begin() + 2)));
}

}  // namespace
}  // namespace moert
#endif
