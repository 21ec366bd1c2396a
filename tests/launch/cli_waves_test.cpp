// n larger than --max-seqs under real `mpirun`: the samples of one request run in waves of at
// most --max-seqs, and every sample's tokens (greedy and sampled, with or without the prefix
// cache) are byte for byte those of a run whose --max-seqs holds all of them at once.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::outputs_by_id;
using testing::run_command;

TEST(CliWaves, SamplesBeyondMaxSeqsRunInWavesWithTheSameTokens) {
  testing::ScratchDir scratch("cli-waves");
  const std::string model = scratch / "model";
  const testing::CommandResult made =
      run_command(testing::moert_binary() + " make-model --arch qwen3_moe --preset tiny --num-layers 2 --hidden-size 64 "
                  "--expert-size 64 --vocab-size 256 --head-dim 16 --seed 5 --out " + model);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string requests;
  for (int i = 0; i < 6; ++i) {
    nlohmann::json request = {{"id", "r" + std::to_string(i)}, {"max_tokens", 3 + i % 4}};
    std::vector<int> prompt;
    for (int j = 0; j < 5 + 9 * i; ++j) prompt.push_back((i * 37 + j * 11 + 1) % 256);  // up to 50 tokens: full blocks
    request["prompt_token_ids"] = prompt;
    if (i % 3 != 2) {
      request["temperature"] = 0.9;
      request["n"] = i == 0 ? 7 : 5;  // more than --max-seqs 2 and 3, not a multiple of them
      if (i == 1) request["seed"] = 11;   // the others draw from their id's seed
    } else {
      request["n"] = 3;  // greedy: every sample the same tokens
    }
    requests += request.dump() + "\n";
  }
  testing::write_file(scratch / "in.jsonl", requests);
  auto run = [&](int ranks, const std::string& name, const std::string& extra) {
    const std::string output = scratch / (name + ".jsonl");
    const testing::CommandResult result =
        run_command(testing::mpirun_prefix(ranks, 180) + testing::moert_binary() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                    " --output " + output + " --threads 1 --max-batched-tokens 32 " + extra);
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    EXPECT_NE(result.err.find("requests: 6 finished"), std::string::npos) << name << ": " << result.err;
    return outputs_by_id(output);
  };
  const std::map<std::string, std::string> one_wave = run(2, "one-wave", "--max-seqs 16");
  ASSERT_EQ(one_wave.size(), 6u);
  EXPECT_EQ(nlohmann::json::parse(one_wave.at("\"r0\"")).size(), 7u);
  EXPECT_EQ(run(2, "waves-of-2", "--max-seqs 2"), one_wave);
  EXPECT_EQ(run(2, "waves-of-3-no-cache", "--max-seqs 3 --no-prefix-caching"), one_wave);
  EXPECT_EQ(run(1, "one-rank-waves-of-1", "--max-seqs 1"), one_wave);
}

}  // namespace
}  // namespace moert
