// DeepSeek Sparse Attention (docs/sparse-attention.md) through the reference forward:
// * DeepSeek-V3.2 has no shared case: the checkpoint `moert make-model --arch deepseek_v32
//   --preset tiny --vocab-size 512 --seed 32` is written here again (the same bytes for the
//   same seed) and its logits are compared with tests/data/dsa/deepseek_v32_tiny/ref.*, made
//   from that checkpoint by tools/dsa_ref_forward.py (float64, numpy, written from the spec
//   apart from the C++): within 1e-4 relative L2 per row, identical greedy tokens.
// * GLM-5.2's shared indexer layers likewise (make-model's tiny glm_moe_dsa at seed 52 with
//   `indexer_types` [full, shared, full, shared]; tests/data/dsa/glm52_shared_tiny).
// * With index_topk covering the whole context the sparse path is the dense MLA path bit for
//   bit (glm5dsa-tiny, when the shared folder is there).
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/io/npy.h"
#include "runtime/model/generator.h"
#include "runtime/model/reference_forward.h"
#include "tests/support/reference_logits.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::max_row_error;

// make-model's tiny `arch` (vocab 512, `seed`, GLM-5.2 `shared_layers` when not empty) written
// to a scratch folder, greedy against tests/data/dsa/<data>/ref.*; returns the config.
ModelConfig expect_made_checkpoint_matches(const std::string& arch, uint64_t seed, const std::vector<bool>& shared_layers,
                                           const std::string& data_name) {
  const std::string data = std::string(MOERT_TEST_DATA_DIR) + "/dsa/" + data_name;
  ModelShapeOverrides overrides;
  overrides.vocab_size = 512;
  Result<ModelConfig> config = preset_model_config(find_architecture(arch), "tiny", overrides);
  EXPECT_TRUE(config.is_ok()) << config.status().to_string();
  if (!config.is_ok()) return {};
  config->dsa.shared_layers = shared_layers;
  testing::ScratchDir scratch("dsa-" + data_name);
  ThreadPool pool(2);
  EXPECT_TRUE(write_random_checkpoint(*config, seed, scratch.path(), 16ull << 20, pool).is_ok());
  Result<std::unique_ptr<LoadedModel>> model = load_model(scratch.path());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok()) return {};
  const ModelConfig& c = (*model)->config;
  EXPECT_TRUE(c.dsa.enabled());
  EXPECT_EQ(c.dsa.shared_layers, shared_layers);
  const nlohmann::json ref = nlohmann::json::parse(testing::read_file(data + "/ref.json"));
  const std::vector<int32_t> prompt = ref.at("prompt_tokens").get<std::vector<int32_t>>();
  const std::vector<int32_t> expected_tokens = ref.at("gen_tokens").get<std::vector<int32_t>>();
  EXPECT_GT(static_cast<int>(prompt.size()), 3 * c.dsa.index_topk);  // the selection is exercised
  backend::CpuBackend cpu(pool);
  ReferenceForward forward(c, (*model)->weights, cpu);
  Result<GreedyOutput> output = greedy_generate(forward, prompt, static_cast<int>(expected_tokens.size()));
  EXPECT_TRUE(output.is_ok()) << output.status().to_string();
  if (!output.is_ok()) return c;
  EXPECT_EQ(output->gen_tokens, expected_tokens);
  const double prompt_error =
      max_row_error(output->prompt_logits, data + "/ref.prompt_logits.npy", static_cast<int64_t>(prompt.size()), c.vocab_size);
  const double gen_error = max_row_error(output->gen_logits, data + "/ref.gen_logits.npy",
                                         static_cast<int64_t>(expected_tokens.size()), c.vocab_size);
  std::printf("%s: max relative L2 error per row: prompt %.3g, generated %.3g\n", data_name.c_str(), prompt_error,
              gen_error);
  return c;
}

TEST(DeepseekV32, MadeCheckpointMatchesTheFloat64Reference) {
  const ModelConfig c = expect_made_checkpoint_matches("deepseek_v32", 32, {}, "deepseek_v32_tiny");
  EXPECT_EQ(c.dsa.rope_pairing, attention::RopePairing::kRotateHalf);
  EXPECT_EQ(c.rope_pairing, attention::RopePairing::kInterleaved);
  EXPECT_EQ(c.rope_scaling.kind, attention::RopeScaling::Kind::kYarn);
}

// GLM-5.2's indexer sharing: layers 1 and 3 have no indexer and reuse the selection of layers 0
// and 2 (their cache rows have no kI: two latent groups of different widths).
TEST(Glm52, SharedIndexerLayersMatchTheFloat64Reference) {
  const ModelConfig c = expect_made_checkpoint_matches("glm_moe_dsa", 52, {false, true, false, true}, "glm52_shared_tiny");
  EXPECT_FALSE(c.dsa.has_indexer(1));
  EXPECT_TRUE(c.dsa.has_indexer(2));
}

TEST(SparseAttention, TopkCoveringTheContextIsTheDenseMlaPathBitForBit) {
  const std::string dir = testing::shared_dir() + "/reference/glm5dsa-tiny/hf";
  if (testing::shared_dir().empty() || !std::filesystem::exists(dir)) GTEST_SKIP() << "no shared glm5dsa-tiny case";
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ModelConfig sparse = (*model)->config, dense = (*model)->config;
  sparse.dsa.index_topk = 1 << 20;
  dense.dsa = SparseAttentionDims{};  // the indexer's weights are left unread
  std::vector<int32_t> prompt;
  for (int j = 0; j < 30; ++j) prompt.push_back((j * 53 + 9) % 1000);
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  std::vector<std::vector<float>> logits;
  for (const ModelConfig* config : {&sparse, &dense}) {
    ReferenceForward forward(*config, (*model)->weights, cpu);
    DenseKvCache cache = forward.new_cache();
    Result<std::vector<float>> prefill = forward.forward(cache, prompt);
    ASSERT_TRUE(prefill.is_ok());
    Result<std::vector<float>> step = forward.forward(cache, {7});  // one absorbed decode step
    ASSERT_TRUE(step.is_ok());
    prefill->insert(prefill->end(), step->begin(), step->end());
    logits.push_back(std::move(*prefill));
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)));
}

}  // namespace
}  // namespace moert
