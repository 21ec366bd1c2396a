// The reference forward against the shared float64 references: logits within 1e-4
// relative L2 per row and identical greedy tokens, for every model in shared/reference;
// and against llama.cpp's logits and greedy tokens where the case has them (llama.*).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/npy.h"
#include "runtime/model/reference_forward.h"
#include "tests/support/reference_logits.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

class SharedReference : public ::testing::TestWithParam<std::string> {};

using testing::max_row_error;

TEST_P(SharedReference, LogitsAndGreedyTokensMatchFloat64Reference) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  const std::string dir = testing::shared_dir() + "/reference/" + GetParam();
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir + "/hf");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const nlohmann::json ref = nlohmann::json::parse(testing::read_file(dir + "/ref.json"));
  const std::vector<int32_t> prompt = ref.at("prompt_tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> expected_tokens = ref.at("gen_tokens").get<std::vector<int32_t>>();

  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward forward((*model)->config, (*model)->weights, cpu);
  Result<GreedyOutput> output = greedy_generate(forward, prompt, static_cast<int>(expected_tokens.size()));
  ASSERT_TRUE(output.is_ok()) << output.status().to_string();
  EXPECT_EQ(output->gen_tokens, expected_tokens);
  const int64_t vocab = (*model)->config.vocab_size;
  const double prompt_error = max_row_error(output->prompt_logits, dir + "/ref.prompt_logits.npy",
                                            static_cast<int64_t>(prompt.size()), vocab);
  const double gen_error = max_row_error(output->gen_logits, dir + "/ref.gen_logits.npy",
                                         static_cast<int64_t>(expected_tokens.size()), vocab);
  std::printf("%s: max relative L2 error per row: prompt %.3g, generated %.3g\n", GetParam().c_str(), prompt_error,
              gen_error);
  if (!std::ifstream(dir + "/llama.json")) return;
  const nlohmann::json llama = nlohmann::json::parse(testing::read_file(dir + "/llama.json"));
  ASSERT_EQ(llama.at("prompt_tokens").get<std::vector<int32_t>>(), prompt);
  EXPECT_EQ(output->gen_tokens, llama.at("gen_tokens").get<std::vector<int32_t>>()) << "llama.cpp's greedy tokens";
  const double llama_prompt = max_row_error(output->prompt_logits, dir + "/llama.prompt_logits.npy",
                                            static_cast<int64_t>(prompt.size()), vocab);
  const double llama_gen = max_row_error(output->gen_logits, dir + "/llama.gen_logits.npy",
                                         static_cast<int64_t>(expected_tokens.size()), vocab);
  std::printf("%s: against llama.cpp: prompt %.3g, generated %.3g\n", GetParam().c_str(), llama_prompt, llama_gen);
}

TEST_P(SharedReference, ChunkedPrefillEqualsTokenByTokenBitForBit) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  const std::string dir = testing::shared_dir() + "/reference/" + GetParam();
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir + "/hf");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const std::vector<int32_t> prompt = {84, 464, 280, 117, 397, 107, 275, 114, 374, 110, 271};
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward forward((*model)->config, (*model)->weights, cpu);
  DenseKvCache whole = forward.new_cache();
  Result<std::vector<float>> all_at_once = forward.forward(whole, prompt);
  ASSERT_TRUE(all_at_once.is_ok());
  DenseKvCache pieces = forward.new_cache();
  std::vector<float> stitched;
  // Chunks of 1, 4 and 6 tokens.
  for (auto [begin, end] : {std::pair{0, 1}, {1, 5}, {5, 11}}) {
    Result<std::vector<float>> part =
        forward.forward(pieces, std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end));
    ASSERT_TRUE(part.is_ok());
    stitched.insert(stitched.end(), part->begin(), part->end());
  }
  ASSERT_EQ(stitched.size(), all_at_once->size());
  EXPECT_EQ(0, std::memcmp(stitched.data(), all_at_once->data(), stitched.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(AllModels, SharedReference, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

// Kimi-K2.5 (docs/mla.md): the shared DeepSeek-V3 case rewritten in the release's layout (keys
// under text_config, tensors under language_model.) computes the same logits bit for bit; its
// INT4 experts are refused in one line naming the tensor.
TEST(KimiK25, TheDeepseekV3CaseInKimiLayoutGivesItsLogitsBitForBit) {
  const std::string dir = testing::shared_dir() + "/reference/deepseekv3-tiny/hf";
  if (testing::shared_dir().empty() || !std::ifstream(dir + "/config.json")) GTEST_SKIP() << "no shared DeepSeek case";
  const std::unique_ptr<LoadedModel> original = load_model(dir).value();
  testing::ScratchDir scratch("kimi-k25");
  std::vector<io::NamedTensor> renamed;
  for (const std::string& name : original->checkpoint->tensor_names()) {
    renamed.push_back({"language_model." + name, original->checkpoint->get(name).value()});
  }
  ASSERT_TRUE(io::write_sharded_checkpoint(scratch.path(), renamed, 1 << 30).is_ok());
  nlohmann::json text = nlohmann::json::parse(testing::read_file(dir + "/config.json"));
  text.erase("architectures");
  text["model_type"] = "kimi_k2";
  const nlohmann::json config = {{"architectures", {"KimiK25ForConditionalGeneration"}},
                                 {"model_type", "kimi_k25"},
                                 {"text_config", text},
                                 {"vision_config", {{"model_type", "moonvit"}}}};
  std::ofstream(scratch.path() + "/config.json") << config.dump(2);
  const std::unique_ptr<LoadedModel> kimi = load_model(scratch.path()).value();
  EXPECT_STREQ(kimi->config.arch->hf_class, "KimiK25ForConditionalGeneration");
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::vector<int32_t> prompt = {84, 464, 280, 117, 397, 107, 275, 114, 374, 110, 271};
  const GreedyOutput want = greedy_generate(ReferenceForward(original->config, original->weights, cpu), prompt, 4).value();
  const GreedyOutput got = greedy_generate(ReferenceForward(kimi->config, kimi->weights, cpu), prompt, 4).value();
  EXPECT_EQ(got.gen_tokens, want.gen_tokens);
  ASSERT_EQ(got.prompt_logits.size(), want.prompt_logits.size());
  EXPECT_EQ(0, std::memcmp(got.prompt_logits.data(), want.prompt_logits.data(), want.prompt_logits.size() * 4));
  // The native release's pack-quantized INT4 experts: refused by name.
  const std::string expert = "language_model.model.layers.1.mlp.experts.0.gate_proj";
  std::vector<io::NamedTensor> int4;
  for (const io::NamedTensor& tensor : renamed) {
    if (tensor.name == expert + ".weight") continue;
    int4.push_back(tensor);
  }
  const TensorView gate = original->checkpoint->get("model.layers.1.mlp.experts.0.gate_proj.weight").value();
  std::vector<int32_t> packed(static_cast<size_t>(gate.numel() / 8), 0);
  int4.push_back({expert + ".weight_packed",
                  TensorView::contiguous(DType::kI32, {gate.dim(0), gate.dim(1) / 8}, packed.data())});
  testing::ScratchDir int4_dir("kimi-k25-int4");
  ASSERT_TRUE(io::write_sharded_checkpoint(int4_dir.path(), int4, 1 << 30).is_ok());
  std::ofstream(int4_dir.path() + "/config.json") << config.dump(2);
  const Result<std::unique_ptr<LoadedModel>> refused = load_model(int4_dir.path());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("'" + expert + ".weight_packed': compressed-tensors pack-quantized INT4"),
            std::string::npos)
      << refused.status().message();
}

// The shared folder is expected in CI; its absence is a failure there, a skip elsewhere.
TEST(SharedReferenceData, IsPresent) {
  const bool in_ci = std::getenv("CI") != nullptr;
  if (testing::reference_model_names().empty()) {
    if (in_ci) FAIL() << "MOERT_SHARED_DIR has no reference models";
    GTEST_SKIP() << "no shared reference models (set -DMOERT_SHARED_DIR=...)";
  }
  EXPECT_GE(testing::reference_model_names().size(), 3u);
}

}  // namespace
}  // namespace moert
