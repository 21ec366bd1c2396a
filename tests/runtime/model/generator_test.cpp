#include "runtime/model/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/io/checkpoint.h"
#include "runtime/model/reference_forward.h"
#include "runtime/model/weights.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

ModelShapeOverrides small_shape() {
  ModelShapeOverrides o;
  o.vocab_size = 128;
  o.hidden_size = 64;
  o.num_layers = 2;
  o.moe_intermediate_size = 32;
  o.head_dim = 16;
  return o;
}

TEST(Generator, LargePresetHasTheAdvertisedSize) {
  ModelConfig c = preset_model_config(Architecture::kQwen3Moe, "large").value();
  const ParameterCounts counts = count_parameters(c);
  EXPECT_NEAR(static_cast<double>(counts.total), 432e6, 3e6);
  EXPECT_NEAR(static_cast<double>(counts.active_per_token), 130e6, 3e6);
  ModelConfig tiny = preset_model_config(Architecture::kGlm4Moe, "tiny").value();
  EXPECT_EQ(tiny.rotary_dim, 32);
  EXPECT_EQ(tiny.router.n_group, 2);
  EXPECT_FALSE(preset_model_config(Architecture::kMixtral, "huge").is_ok());
}

TEST(Generator, EveryArchitectureWritesALoadableShardedCheckpoint) {
  testing::ScratchDir scratch("generator");
  ThreadPool pool(2);
  for (Architecture arch : {Architecture::kQwen3Moe, Architecture::kQwen2Moe, Architecture::kMixtral,
                            Architecture::kGlm4Moe}) {
    const std::string dir = scratch / architecture_name(arch);
    ModelConfig config = preset_model_config(arch, "tiny", small_shape()).value();
    ASSERT_TRUE(write_random_checkpoint(config, 11, dir, 64 * 1024, pool).is_ok());
    EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/generation_config.json"));
    int num_shards = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      num_shards += entry.path().extension() == ".safetensors" ? 1 : 0;
    }
    EXPECT_GE(num_shards, 2) << architecture_name(arch);
    Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
    ASSERT_TRUE(model.is_ok()) << architecture_name(arch) << ": " << model.status().to_string();
    EXPECT_EQ(model_config_to_json((*model)->config), model_config_to_json(config));
    ReferenceForward forward((*model)->config, (*model)->weights, pool);
    Result<GreedyOutput> output = greedy_generate(forward, {1, 2, 3, 4}, 6);
    ASSERT_TRUE(output.is_ok());
    EXPECT_EQ(output->gen_tokens.size(), 6u);
    // Well-conditioned: finite logits with a spread (not all equal).
    float lo = output->gen_logits[0], hi = lo;
    for (float v : output->gen_logits) {
      ASSERT_TRUE(std::isfinite(v));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GT(hi - lo, 1.0f) << architecture_name(arch);
  }
}

TEST(Generator, SameSeedSameBytesAnyThreadCount) {
  testing::ScratchDir scratch("generator-seed");
  ModelConfig config = preset_model_config(Architecture::kMixtral, "tiny", small_shape()).value();
  ThreadPool one(1), three(3);
  ASSERT_TRUE(write_random_checkpoint(config, 5, scratch / "a", 1 << 30, one).is_ok());
  ASSERT_TRUE(write_random_checkpoint(config, 5, scratch / "b", 1 << 30, three).is_ok());
  ASSERT_TRUE(write_random_checkpoint(config, 6, scratch / "c", 1 << 30, three).is_ok());
  const std::string shard = "/model-00001-of-00001.safetensors";
  const std::string a = testing::read_file(scratch / "a" + shard);
  ASSERT_GT(a.size(), 1000u);
  EXPECT_EQ(a, testing::read_file(scratch / "b" + shard));
  EXPECT_NE(a, testing::read_file(scratch / "c" + shard));
}

}  // namespace
}  // namespace moert
