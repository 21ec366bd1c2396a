#include "tests/launch/cli_parallel_support.h"

#include <sstream>

#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace moert::cli_parallel {

using testing::mpirun_prefix;
using testing::run_command;

// id -> "outputs" of every line (timings differ between runs and are left out).
std::map<std::string, nlohmann::json> outputs_by_id(const std::string& path) {
  std::map<std::string, nlohmann::json> by_id;
  std::istringstream in(testing::read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json parsed = nlohmann::json::parse(line);
    EXPECT_EQ(by_id.count(parsed["id"]), 0u) << "id " << parsed["id"] << " written twice in " << path;
    by_id[parsed["id"]] = parsed["outputs"];
  }
  return by_id;
}

// `moert score`'s greedy tokens (the reference forward) for `prompt`.
std::vector<int> scored_greedy_tokens(const std::string& model, const std::vector<int>& prompt, int count) {
  std::string tokens;
  for (int t : prompt) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  const testing::CommandResult scored = run_command(testing::moert_binary() + " score --model " + model + " --tokens " +
                                                    tokens + " -n " + std::to_string(count));
  EXPECT_EQ(scored.exit_code, 0) << scored.err;
  const size_t at = scored.out.find("generated: ");
  EXPECT_NE(at, std::string::npos) << scored.out;
  std::vector<int> ids;
  if (at == std::string::npos) return ids;
  std::istringstream generated(scored.out.substr(at + 11));
  for (int id; static_cast<int>(ids.size()) < count && generated >> id;) ids.push_back(id);
  return ids;
}

// Greedy requests (prompt i, max_tokens[i]) through `moert run` on 1 and 2 ranks with an F32
// KV cache give the reference forward's tokens for each shared checkpoint of `names`.
// Returns the stderr of every run.
std::vector<std::string> expect_run_matches_score(const std::string& scratch_name, const std::vector<std::string>& names,
                                                  const std::vector<std::vector<int>>& prompts,
                                                  const std::vector<int>& max_tokens, const std::string& extra) {
  testing::ScratchDir scratch(scratch_name);
  const std::string ref = testing::shared_dir() + "/reference/";
  std::string text;
  for (size_t i = 0; i < prompts.size(); ++i) {
    text += nlohmann::json({{"id", "g" + std::to_string(i)}, {"prompt_token_ids", prompts[i]},
                            {"max_tokens", max_tokens[i]}}).dump() + "\n";
  }
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, text);
  std::vector<std::string> logs;
  for (const std::string& name : names) {
    const std::string model = ref + name + "/hf";
    std::map<std::string, std::vector<int>> expected;
    for (size_t i = 0; i < prompts.size(); ++i) {
      expected["g" + std::to_string(i)] = scored_greedy_tokens(model, prompts[i], max_tokens[i]);
    }
    for (const std::string launcher : {std::string(), mpirun_prefix(2)}) {
      const std::string output = scratch / (name + (launcher.empty() ? "-single" : "-np2") + ".jsonl");
      const testing::CommandResult result =
          run_command(launcher + testing::moert_binary() + " run --model " + model + " --input " + input + " --output " +
                      output + " --threads 1 --max-batched-tokens 48 --block-size 8 --kv-cache-dtype f32" + extra);
      EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
      logs.push_back(result.err);
      const std::map<std::string, nlohmann::json> got = outputs_by_id(output);
      EXPECT_EQ(got.size(), expected.size()) << name;
      for (const auto& [id, tokens] : expected) {
        EXPECT_EQ(got.count(id), 1u) << name << " " << id;
        if (got.count(id) == 1) EXPECT_EQ(got.at(id)[0]["token_ids"], nlohmann::json(tokens)) << name << " " << id << " " << launcher;
      }
    }
  }
  return logs;
}

}  // namespace moert::cli_parallel
