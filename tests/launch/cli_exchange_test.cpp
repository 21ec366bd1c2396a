// The expert-parallel exchange options of `moert run` under real `mpirun`.
// --ep-dispatch-dtype / --ep-combine-dtype: for each payload pair, greedy and sampled outputs
// are byte for byte the same on 1, 2 and 4 ranks (every routed row takes the wire trip, local
// or remote), they are not the f32 outputs (the rounding is applied), the job line names the
// pair, a job does not resume the output of another pair, and bad values are refused in one line.
// --micro-batches: 1, 2 and auto give byte-identical outputs on 2 and 4 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::outputs_by_id;
using testing::run_command;

class CliPayloads : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = scratch_ / "model";
    ASSERT_EQ(run_command(testing::moert_binary() + " make-model --arch qwen3_moe --preset tiny --seed 3 --out " + model_)
                  .exit_code, 0);
    std::string text;
    for (int i = 0; i < 10; ++i) {
      nlohmann::json request = {{"id", "p" + std::to_string(i)}, {"max_tokens", 12 + i % 5}};
      std::vector<int> prompt;
      for (int j = 0; j < 3 + (i * 7) % 20; ++j) prompt.push_back((i * 131 + j * 17 + 3) % 1000);
      request["prompt_token_ids"] = prompt;
      if (i % 3 == 1) {
        request["temperature"] = 0.8;
        request["seed"] = i;
      }
      text += request.dump() + "\n";
    }
    testing::write_file(scratch_ / "in.jsonl", text);
  }

  // One run on `ranks` ranks with `options`; the finished output's lines by id.
  testing::CommandResult run(int ranks, const std::string& name, const std::string& options) {
    return run_command("timeout -k 5 180 mpirun -np " + std::to_string(ranks) + " --oversubscribe --bind-to none " +
                       testing::moert_binary() + " run --model " + model_ + " --input " + (scratch_ / "in.jsonl") +
                       " --output " + (scratch_ / (name + ".jsonl")) + " --threads 1 --kv-cache-mb 64 " + options);
  }

  testing::ScratchDir scratch_{"cli-payloads"};
  std::string model_;
};

TEST_F(CliPayloads, EachPairGivesTheSameOutputsOnOneTwoAndFourRanks) {
  ASSERT_EQ(run(1, "f32", "").exit_code, 0);
  const auto f32 = outputs_by_id(scratch_ / "f32.jsonl");
  ASSERT_EQ(f32.size(), 10u);
  for (const auto& [dispatch, combine] : std::vector<std::pair<std::string, std::string>>{
           {"bf16", "bf16"}, {"fp8", "bf16"}, {"fp8", "f32"}}) {
    const std::string pair = dispatch + "_" + combine;
    std::map<std::string, std::string> one_rank;
    for (const int ranks : {1, 2, 4}) {
      const std::string name = pair + "_np" + std::to_string(ranks);
      const testing::CommandResult result =
          run(ranks, name, "--ep-dispatch-dtype " + dispatch + " --ep-combine-dtype " + combine);
      ASSERT_EQ(result.exit_code, 0) << name << ": " << result.err;
      EXPECT_NE(result.err.find("rows sent as " + dispatch + " (dispatch) and " + combine + " (combine)"),
                std::string::npos) << result.err;
      const auto outputs = outputs_by_id(scratch_ / (name + ".jsonl"));
      ASSERT_EQ(outputs.size(), 10u) << name;
      if (ranks == 1) {
        one_rank = outputs;
        EXPECT_NE(outputs, f32) << pair << ": the payload rounding changed no output";
      } else {
        EXPECT_EQ(outputs, one_rank) << pair << " on " << ranks << " ranks";
      }
    }
  }
}

TEST_F(CliPayloads, AJobDoesNotResumeTheOutputOfAnotherPair) {
  ASSERT_EQ(run(2, "out", "--ep-dispatch-dtype bf16 --ep-combine-dtype bf16").exit_code, 0);
  const std::string written = testing::read_file(scratch_ / "out.jsonl");
  const testing::CommandResult f32 = run(2, "out", "--resume");
  EXPECT_NE(f32.exit_code, 0);
  EXPECT_NE(f32.err.find("ep_payloads is bf16/bf16 there and f32/f32 here"), std::string::npos) << f32.err;
  EXPECT_EQ(testing::read_file(scratch_ / "out.jsonl"), written);
  const testing::CommandResult same = run(2, "out", "--resume --ep-dispatch-dtype bf16 --ep-combine-dtype bf16");
  EXPECT_EQ(same.exit_code, 0) << same.err;
}

TEST_F(CliPayloads, MicroBatchesGiveByteIdenticalOutputs) {
  for (const std::string payloads : {"", "--ep-dispatch-dtype bf16 --ep-combine-dtype bf16 "}) {
    for (const int ranks : {2, 4}) {
      std::map<std::string, std::string> one;
      for (const std::string micro_batches : {"1", "2", "auto"}) {
        const std::string name = "mb" + micro_batches + "_np" + std::to_string(ranks) + (payloads.empty() ? "" : "_bf16");
        const testing::CommandResult result = run(ranks, name, payloads + "--micro-batches " + micro_batches);
        ASSERT_EQ(result.exit_code, 0) << name << ": " << result.err;
        const auto outputs = outputs_by_id(scratch_ / (name + ".jsonl"));
        ASSERT_EQ(outputs.size(), 10u) << name;
        if (micro_batches == "1") {
          one = outputs;
        } else {
          EXPECT_EQ(outputs, one) << name;
        }
        // Each rank reports how much of its exchange compute hid.
        EXPECT_NE(result.err.find("% of it hidden behind compute"), std::string::npos) << result.err;
      }
    }
  }
}

TEST_F(CliPayloads, BadValuesAreRefusedInOneLine) {
  for (const auto& [options, message] : std::vector<std::pair<std::string, std::string>>{
           {"--micro-batches 3", "--micro-batches '3' is not one of 1, 2, auto"},
           {"--ep-dispatch-dtype fp16", "--ep-dispatch-dtype 'fp16' is not one of f32, bf16, fp8"},
           {"--ep-combine-dtype fp8", "--ep-combine-dtype 'fp8' is not one of f32, bf16"},
           {"--ep-dispatch-dtype bf16 --ep-transport nccl", "needs --ep-transport mpi"}}) {
    const testing::CommandResult result = run(2, "bad", options);
    EXPECT_NE(result.exit_code, 0) << options;
    EXPECT_NE(result.err.find(message), std::string::npos) << options << ": " << result.err;
    EXPECT_FALSE(std::filesystem::exists(scratch_ / "bad.jsonl")) << options;
  }
}

}  // namespace
}  // namespace moert
