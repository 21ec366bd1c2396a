// DeepSeek Sparse Attention through `moert run` under real `mpirun` (docs/sparse-attention.md):
// the engine's paged latent cache with the indexer key gives the reference forward's tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/cli_parallel_support.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

using cli_parallel::expect_run_matches_score;
using cli_parallel::outputs_by_id;
using cli_parallel::scored_greedy_tokens;
using testing::mpirun_prefix;
using testing::run_command;

// GLM-5 DSA through `moert run` (docs/sparse-attention.md): prompts 3 to 9 times index_topk
// (8) long, some chunked (the step holds 48 tokens), two sharing 66 tokens, on 1 and 2 ranks
// with an F32 latent cache whose rows carry the indexer key, give the reference forward's
// tokens; the summary reports layers x (kv_lora_rank + qk_rope_head_dim + index_head_dim) x 4
// bytes per token.
TEST(CliParallelGlm5Dsa, LongPromptsGiveTheReferenceTokensOnOneAndTwoRanks) {
  if (testing::shared_dir().empty() || !std::filesystem::exists(testing::shared_dir() + "/reference/glm5dsa-tiny/hf")) {
    GTEST_SKIP() << "no shared GLM-5 DSA case";
  }
  std::vector<std::vector<int>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 5; ++i) {
    std::vector<int> prompt;
    const int length = 24 + 12 * i;  // 24 .. 72
    for (int j = 0; j < length; ++j) prompt.push_back((i * 173 + j * 41 + 3) % 1000);
    prompts.push_back(prompt);
    max_tokens.push_back(6 + 3 * i);
  }
  prompts.push_back(prompts[4]);  // 66 tokens shared: latent blocks (kI included) may be reused
  prompts.back().resize(66);
  prompts.back().push_back(11);
  max_tokens.push_back(10);
  const int64_t bytes_per_token = 4 * (32 + 16 + 32) * 4;  // 4 layers, kv_lora 32, rope 16, indexer 32, F32
  const std::vector<std::string> logs =
      expect_run_matches_score("cli-parallel-glm5dsa", {"glm5dsa-tiny"}, prompts, max_tokens, "");
  for (const std::string& log : logs) {
    EXPECT_NE(log.find(std::to_string(bytes_per_token) + " KV cache bytes per token (all layers, f32)"),
              std::string::npos) << log;
  }
}

// GLM-5.2's indexer sharing through `moert run` (docs/sparse-attention.md): make-model's tiny
// GLM-5 with layers 1 and 3 "shared" (two latent cache groups, with and without kI), prompts of 3
// to 9 times index_topk with chunked prefill, on 1 and 2 ranks, gives `moert score`'s tokens.
TEST(CliParallelGlm52, SharedIndexerLayersGiveTheReferenceTokensOnOneAndTwoRanks) {
  testing::ScratchDir scratch("cli-parallel-glm52");
  const std::string model = scratch / "model";
  const testing::CommandResult made = run_command(testing::moert_binary() +
                                                  " make-model --arch glm_moe_dsa --preset tiny --vocab-size 512 "
                                                  "--seed 52 --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  nlohmann::json config = nlohmann::json::parse(testing::read_file(model + "/config.json"));
  config["indexer_types"] = {"full", "shared", "full", "shared"};  // layers 1 and 3's indexers go unread
  testing::write_file(model + "/config.json", config.dump(2));
  std::string text;
  std::map<std::string, std::vector<int>> expected;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> prompt;
    for (int j = 0; j < 24 + 16 * i; ++j) prompt.push_back((i * 97 + j * 53 + 7) % 509);
    const std::string id = "g" + std::to_string(i);
    text += nlohmann::json({{"id", id}, {"prompt_token_ids", prompt}, {"max_tokens", 8}}).dump() + "\n";
    expected[id] = scored_greedy_tokens(model, prompt, 8);
  }
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, text);
  for (const std::string launcher : {std::string(), mpirun_prefix(2)}) {
    const std::string output = scratch / (launcher.empty() ? "single.jsonl" : "np2.jsonl");
    const testing::CommandResult result =
        run_command(launcher + testing::moert_binary() + " run --model " + model + " --input " + input + " --output " +
                    output + " --threads 1 --max-batched-tokens 32 --block-size 8 --kv-cache-dtype f32");
    ASSERT_EQ(result.exit_code, 0) << result.err;
    // Per token: layers 0 and 2 store 64 + 16 + 32 values, layers 1 and 3 64 + 16; f32.
    EXPECT_NE(result.err.find(std::to_string(4 * (2 * 112 + 2 * 80)) + " KV cache bytes per token"), std::string::npos)
        << result.err;
    const std::map<std::string, nlohmann::json> got = outputs_by_id(output);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [id, tokens] : expected) {
      EXPECT_EQ(got.at(id)[0]["token_ids"], nlohmann::json(tokens)) << id << " " << launcher;
    }
  }
}

// Speculative decoding on the 2026 targets through `moert run` on 1 and 2 ranks, drafted by a
// model (the shared Qwen3-MoE case, same vocabulary, unrelated weights: most drafts rejected). A
// DSA verify's rejected rows are dropped from the latent cache like any KV (kI included), a Gated
// DeltaNet verify restores the state after the last accepted row (docs/gated-deltanet.md): the
// tokens are `moert score`'s. (Prompt lookup on these targets: engine_linear_attention_test.)
TEST(CliParallelSpec2026, DraftModelSpeculationGivesTheReferenceTokens) {
  const std::string shared = testing::shared_dir() + "/reference/";
  for (const char* name : {"glm5dsa-tiny", "qwen35moe-tiny", "qwen3moe-tiny"}) {
    if (testing::shared_dir().empty() || !std::filesystem::exists(shared + name + "/hf")) {
      GTEST_SKIP() << "no shared " << name << " case";
    }
  }
  std::vector<std::vector<int>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> prompt;
    for (int j = 0; j < 30 + 6 * i; ++j) prompt.push_back((i * 97 + j * 31 + 7) % 1000);
    prompts.push_back(prompt);
    max_tokens.push_back(10 + 2 * i);
  }
  const std::string extra = " --spec draft --spec-k 3 --draft-model " + shared + "qwen3moe-tiny/hf";
  const std::vector<std::string> logs =
      expect_run_matches_score("cli-spec-2026", {"glm5dsa-tiny", "qwen35moe-tiny"}, prompts, max_tokens, extra);
  for (const std::string& log : logs) {  // the runs verified drafts ("spec: ..., N passes, M drafts, ...")
    std::smatch passes;
    ASSERT_TRUE(std::regex_search(log, passes, std::regex(R"(: (\d+) passes, (\d+) drafts)"))) << log;
    EXPECT_GT(std::stoi(passes[1]), 0) << log;
  }
}

}  // namespace
}  // namespace moert
