// What the `moert run` under mpirun tests share (cli_parallel_test.cpp, cli_dsa_parallel_test.cpp):
// results files by id, `moert score`'s greedy tokens, and the run-equals-score check on 1 and 2 ranks.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moert::cli_parallel {

// id -> "outputs" of every line (timings differ between runs and are left out).
std::map<std::string, nlohmann::json> outputs_by_id(const std::string& path);

// `moert score`'s greedy tokens (the reference forward) for `prompt`.
std::vector<int> scored_greedy_tokens(const std::string& model, const std::vector<int>& prompt, int count);

// Greedy requests (prompt i, max_tokens[i]) through `moert run` on 1 and 2 ranks with an F32
// KV cache give the reference forward's tokens for each shared checkpoint of `names`
// (shared/reference/<name>/hf). Returns the stderr of every run.
std::vector<std::string> expect_run_matches_score(const std::string& scratch_name, const std::vector<std::string>& names,
                                                  const std::vector<std::vector<int>>& prompts,
                                                  const std::vector<int>& max_tokens, const std::string& extra);

}  // namespace moert::cli_parallel
