// `moert run --spec mtp` (docs/mtp.md) on a generated DeepSeek-V3 model with a faithful MTP
// layer, BF16 and FP8, on 1 rank and under `mpirun -np 2` and `-np 4` (the MTP layer's routed
// experts sliced across the ranks, its draft calls in lock step): greedy outputs equal plain
// decoding's on every rank count (sampled requests with n > 1 beside them), with chunked prefills (--max-batched-tokens 24), prefix-cache hits (repeated prompts),
// preemptions (a pool of 12 blocks) and a --resume of a cut output; the run summary reports
// the MTP's acceptance; --spec mtp on a model without the layer is one line naming it.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::mpirun_prefix;
using testing::outputs_by_id;
using testing::run_command;

std::string requests_text() {
  std::string text;
  for (int i = 0; i < 8; ++i) {
    nlohmann::json request = {{"id", "q" + std::to_string(i)}, {"max_tokens", 6 + (i * 5) % 17}};
    std::vector<int> prompt;
    const int source = i == 6 ? 2 : i;  // q6 repeats q2's prompt: a prefix-cache hit
    for (int j = 0; j < 3 + (source * 7) % 30; ++j) prompt.push_back((source * 131 + j * 17 + 3) % 256);
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

TEST(CliMtpRun, OutputsEqualPlainDecodingOnOneTwoAndFourRanks) {
  testing::ScratchDir scratch("cli-mtp-run");
  const std::string bf16 = scratch / "bf16";
  const testing::CommandResult made = run_command(
      testing::moert_binary() + " make-model --arch deepseek_v3 --preset tiny --num-layers 3 --hidden-size 128 "
      "--expert-size 64 --vocab-size 256 --num-heads 4 --head-dim 32 --seed 5 --mtp-layers 1 --faithful-layers 1 "
      "--late-layer-scale 0.3 --out " + bf16);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string fp8 = scratch / "fp8";
  ASSERT_EQ(run_command(testing::moert_binary() + " quantize --model " + bf16 + " --format fp8 --out " + fp8).exit_code, 0);
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, requests_text());
  for (const std::string& model : {bf16, fp8}) {
    const std::string name = model == bf16 ? "bf16" : "fp8";
    auto run = [&](const std::string& launcher, const std::string& tag, const std::string& extra) {
      const std::string output = scratch / (name + "-" + tag + ".jsonl");
      const testing::CommandResult result =
          run_command(launcher + testing::moert_binary() + " run --model " + model + " --input " + input +
                      " --output " + output + " --threads 1 --max-batched-tokens 24 --block-size 8 --kv-blocks 12 " +
                      extra);
      EXPECT_EQ(result.exit_code, 0) << tag << ": " << result.err;
      return std::pair{outputs_by_id(output), result.err};
    };
    const auto [plain, plain_err] = run("", "plain", "");
    ASSERT_EQ(plain.size(), 8u);
    for (const char* k : {"1", "3"}) {
      for (const auto& [launcher, tag] :
           {std::pair{std::string(), std::string("np1")}, {mpirun_prefix(2), "np2"}, {mpirun_prefix(4), "np4"}}) {
        const auto [got, err] = run(launcher, tag + "-k" + k, std::string("--spec mtp --spec-k ") + k);
        ASSERT_EQ(got.size(), plain.size());
        // Greedy requests: plain decoding's tokens on every rank count. Sampled ones (q1, q5)
        // follow the target's distribution, but which tokens come out depends on where drafts
        // were made (a prefix hit or a preemption on one layout and not on another), so only
        // their shape is compared.
        for (const auto& [id, outputs] : plain) {
          if (id != "\"q1\"" && id != "\"q5\"") {
            EXPECT_EQ(got.at(id), outputs) << name << " " << tag << " K " << k << " " << id;
          } else {
            EXPECT_EQ(nlohmann::json::parse(got.at(id)).size(), 2u) << name << " " << tag << " K " << k << " " << id;
          }
        }
        EXPECT_NE(err.find("spec: mtp, K = " + std::string(k)), std::string::npos) << err;
        EXPECT_EQ(err.find(" 0 accepted"), std::string::npos) << name << " " << tag << " K " << k << ": " << err;
      }
    }
    // The preemptions the tiny pool forces happened (the summary counts them).
    EXPECT_EQ(plain_err.find(" 0 preemptions"), std::string::npos) << plain_err;
    // --resume of a cut output on 2 ranks: the missing requests come back with plain decoding's tokens.
    const std::string cut = scratch / (name + "-np2-k3.jsonl");
    std::istringstream lines(testing::read_file(cut));
    std::string kept;
    int num_lines = 0;
    for (std::string line; std::getline(lines, line);) {
      if (++num_lines % 2 == 0) kept += line + "\n";
    }
    testing::write_file(cut, kept);
    const testing::CommandResult resumed =
        run_command(mpirun_prefix(2) + testing::moert_binary() + " run --model " + model + " --input " + input + " --output " +
                    cut + " --threads 1 --max-batched-tokens 24 --block-size 8 --kv-blocks 12 --spec mtp --spec-k 3 --resume");
    EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
    const auto after = outputs_by_id(cut);
    ASSERT_EQ(after.size(), plain.size());
    for (const auto& [id, outputs] : plain) {
      if (id != "\"q1\"" && id != "\"q5\"") EXPECT_EQ(after.at(id), outputs) << name << " resumed " << id;
    }
  }
  // Greedy requests with room for all: every draft is a function of the sequence alone, so
  // the drafts and acceptances are the same on 1, 2 and 4 ranks (the MTP layer's experts
  // computed on their ranks and exchanged: a rank that skipped or mispaired them would draft
  // otherwise).
  std::string greedy_text;
  for (int i = 0; i < 8; ++i) {
    nlohmann::json request = {{"id", "g" + std::to_string(i)}, {"max_tokens", 12 + i}};
    std::vector<int> prompt;
    for (int j = 0; j < 3 + (i * 7) % 30; ++j) prompt.push_back((i * 131 + j * 17 + 3) % 256);
    request["prompt_token_ids"] = prompt;
    greedy_text += request.dump() + "\n";
  }
  const std::string greedy_input = scratch / "greedy.jsonl";
  testing::write_file(greedy_input, greedy_text);
  std::string one_rank_counts;
  for (int ranks : {1, 2, 4}) {
    const testing::CommandResult result =
        run_command(mpirun_prefix(ranks) + testing::moert_binary() + " run --model " + bf16 + " --input " + greedy_input +
                    " --output " + (scratch / ("greedy-np" + std::to_string(ranks) + ".jsonl")) +
                    " --threads 1 --spec mtp --spec-k 3");
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const size_t from = result.err.find("spec: mtp, K = 3: ");
    ASSERT_NE(from, std::string::npos) << result.err;
    const std::string counts = result.err.substr(from, result.err.find(" (rate", from) - from);  // passes, drafts, accepted
    if (ranks == 1) one_rank_counts = counts;
    EXPECT_EQ(counts, one_rank_counts) << ranks << " ranks";
  }

  // A model without the layer: one line naming it, nothing written.
  const std::string plain_model = scratch / "plain-model";
  ASSERT_EQ(run_command(testing::moert_binary() + " make-model --arch deepseek_v3 --num-layers 2 --hidden-size 64 "
                        "--expert-size 64 --vocab-size 256 --head-dim 16 --out " + plain_model).exit_code, 0);
  const testing::CommandResult refused =
      run_command(testing::moert_binary() + " run --model " + plain_model + " --input " + input + " --output " +
                  (scratch / "x.jsonl") + " --spec mtp");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("no multi-token prediction layer"), std::string::npos) << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
}

}  // namespace
}  // namespace moert
