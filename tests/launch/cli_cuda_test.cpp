// `moert score|run|bench --device cuda` end to end on a GPU (label cuda; the binary reports
// itself skipped without one, tests/support/cuda_test_main.cpp): every shared reference
// scored on the GPU gives the float64 reference's greedy tokens and the CPU's, with logits
// within 1e-4 relative of the reference (F32 compute over weights exact in F32); `run`
// gives the CPU's greedy ids on 1 and 2 ranks; `bench` prints its figures.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::run_command;

std::string moert() { return testing::moert_binary(); }

std::string join_ids(const nlohmann::json& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : ",") + std::to_string(id.get<int>());
  return text;
}

// Largest relative L2 error over the rows of two [rows, vocab] arrays.
double worst_row_error(const std::vector<double>& expected, const std::vector<double>& got, int64_t vocab) {
  double worst = 0.0;
  for (size_t row = 0; row * static_cast<size_t>(vocab) < expected.size(); ++row) {
    double diff = 0.0, norm = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double e = expected[row * static_cast<size_t>(vocab) + static_cast<size_t>(i)];
      const double g = got[row * static_cast<size_t>(vocab) + static_cast<size_t>(i)];
      diff += (e - g) * (e - g);
      norm += e * e;
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-300)));
  }
  return worst;
}

class CliCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(CliCuda, ScoreMatchesTheFloat64ReferenceAndTheCpu) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  testing::ScratchDir scratch("cli-cuda-score");
  const std::string ref = testing::shared_dir() + "/reference/" + GetParam();
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "/ref.json"));
  const std::string tokens = join_ids(expected.at("prompt_tokens"));
  const int num_generate = static_cast<int>(expected.at("gen_tokens").size());
  for (const char* device : {"cuda", "cpu"}) {
    const testing::CommandResult scored =
        run_command(moert() + " score --device " + device + " --model " + ref + "/hf --tokens " + tokens + " -n " +
                    std::to_string(num_generate) + " --out " + (scratch / device));
    ASSERT_EQ(scored.exit_code, 0) << device << ": " << scored.err;
    const nlohmann::json got = nlohmann::json::parse(testing::read_file(scratch / (std::string(device) + ".json")));
    EXPECT_EQ(got.at("gen_tokens"), expected.at("gen_tokens")) << device;
  }
  const Result<io::NpyArray> reference = io::read_npy(ref + "/ref.prompt_logits.npy");
  const Result<io::NpyArray> gpu = io::read_npy(scratch / "cuda.prompt_logits.npy");
  ASSERT_TRUE(reference.is_ok() && gpu.is_ok());
  ASSERT_EQ(reference->shape, gpu->shape);
  EXPECT_LT(worst_row_error(reference->values, gpu->values, reference->shape.at(1)), 1e-4);
}

TEST_P(CliCuda, RunGivesTheCpuGreedyIdsOnOneAndTwoRanks) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  testing::ScratchDir scratch("cli-cuda-run");
  const std::string ref = testing::shared_dir() + "/reference/" + GetParam();
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "/ref.json"));
  nlohmann::json request = {{"id", "r0"}, {"prompt_token_ids", expected.at("prompt_tokens")},
                            {"max_tokens", expected.at("gen_tokens").size()}, {"temperature", 0}, {"ignore_eos", true}};
  testing::write_file(scratch / "in.jsonl", request.dump() + "\n");
  std::vector<std::string> launches{""};
  // Two ranks where this machine has an MPI launcher (a device machine may not).
  if (run_command("command -v mpirun").exit_code == 0) launches.push_back("mpirun -np 2 --oversubscribe --bind-to none ");
  // On the GPU: expert rows through NCCL (device buffers) and through host memory; n-gram
  // speculation verified on the device; EPLB replicas re-planned every step. None may change
  // a greedy token.
  const std::vector<std::string> ways{"--device cuda --ep-transport nccl", "--device cuda --ep-transport mpi",
                                      "--device cuda --spec ngram --spec-k 3",
                                      "--device cuda --balance replicate --balance-interval 1", "--device cpu"};
  for (const std::string& launch : launches) {
    for (size_t w = 0; w < ways.size(); ++w) {
      const std::string& way = ways[w];
      const std::string out = scratch / ("run" + std::to_string(w) + "-" + std::to_string(launch.size()) + ".jsonl");
      const testing::CommandResult ran =
          run_command(launch + moert() + " run " + way + " --kv-cache-dtype f32 --threads 2 --model " + ref +
                      "/hf --input " + (scratch / "in.jsonl") + " --output " + out);
      ASSERT_EQ(ran.exit_code, 0) << launch << way << ": " << ran.err;
      const std::string text = testing::read_file(out);
      const nlohmann::json result = nlohmann::json::parse(text.substr(0, text.find('\n')));
      EXPECT_EQ(result.at("outputs").at(0).at("token_ids"), expected.at("gen_tokens"))
          << launch << way << ": " << result.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(References, CliCuda, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

TEST(CliCudaBench, PrintsItsSummaryFields) {
  testing::ScratchDir scratch("cli-cuda-bench");
  const std::string dir = scratch / "model";
  ASSERT_EQ(run_command(moert() + " make-model --arch qwen3_moe --preset tiny --out " + dir).exit_code, 0);
  const testing::CommandResult bench =
      run_command(moert() + " bench --device cuda --model " + dir + " --batch-sizes 1,4 --input-len 16 --output-len 8");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("output_tok_s="), std::string::npos) << bench.out;
}

}  // namespace
}  // namespace moert
