// hold_weights_in_memory: copy moves every region the forward reads out of the checkpoint's
// mappings with the same bytes (once per shared region, never the routed experts another
// rank computes); mlock locks them in place; mmap leaves them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_weight_layout.h"
#include "tests/support/laid_out_model.h"
#include "runtime/model/eval.h"
#include "runtime/model/generator.h"
#include "runtime/model/quantizer.h"
#include "runtime/model/weight_memory.h"
#include "runtime/model/weights.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

struct Region {
  const uint8_t* data;
  int64_t bytes;
};

std::vector<Region> regions_of(const ModelWeights& weights) {
  std::vector<Region> regions;
  for_each_weight_region(weights, [&](const void* data, int64_t bytes) {
    regions.push_back({static_cast<const uint8_t*>(data), bytes});
  });
  return regions;
}

bool in_mapping(const io::Checkpoint& checkpoint, const void* pointer) {
  const auto* p = static_cast<const uint8_t*>(pointer);
  for (const auto& shard : checkpoint.shards()) {
    const std::span<const uint8_t> m = shard->mapped_bytes();
    if (p >= m.data() && p < m.data() + m.size()) return true;
  }
  return false;
}

// Bytes of the distinct mapped regions (start -> largest size), as hold_weights_in_memory counts.
int64_t mapped_bytes(const LoadedModel& model) {
  std::map<const uint8_t*, int64_t> distinct;
  for (const Region& r : regions_of(model.weights)) {
    if (in_mapping(*model.checkpoint, r.data)) distinct[r.data] = std::max(distinct[r.data], r.bytes);
  }
  int64_t total = 0;
  for (const auto& [data, bytes] : distinct) total += bytes;
  return total;
}

// VmLck of this process, in bytes.
int64_t locked_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

class WeightMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("weight-memory");
    ModelShapeOverrides shape;
    shape.vocab_size = 256;
    shape.hidden_size = 128;
    shape.num_layers = 2;
    shape.moe_intermediate_size = 96;
    shape.head_dim = 32;
    ThreadPool pool(2);
    // GLM-4 MoE: a dense first layer, routed and shared experts, a correction bias.
    ModelConfig config = preset_model_config(find_architecture("glm4_moe"), "tiny", shape).value();
    ASSERT_TRUE(write_random_checkpoint(config, 4, dir("bf16"), 1 << 20, pool).is_ok());  // several shards
    config.tie_word_embeddings = true;
    ASSERT_TRUE(write_random_checkpoint(config, 5, dir("tied"), 1 << 30, pool).is_ok());
    for (const char* format : {"nvfp4", "fp8"}) {
      QuantizeOptions options;
      options.format = parse_weight_format(format).value();
      ASSERT_TRUE(quantize_checkpoint(dir("bf16"), dir(format), options).is_ok()) << format;
    }
  }
  static void TearDownTestSuite() { delete scratch_; }
  static std::string dir(const std::string& name) { return *scratch_ / name; }
  // Laid out on the CPU backend as `moert run --weight-memory mmap` does.
  static std::unique_ptr<LoadedModel> load_mapped(const std::string& name) {
    ThreadPool pool(1);
    backend::CpuBackend cpu(pool);
    return testing::load_laid_out(dir(name), cpu, {.memory = WeightMemory::kMmap});
  }

  static testing::ScratchDir* scratch_;
};
testing::ScratchDir* WeightMemoryTest::scratch_ = nullptr;

TEST(WeightMemory, NamesParseBackAndOthersAreRefused) {
  for (WeightMemory memory : {WeightMemory::kCopy, WeightMemory::kMmap, WeightMemory::kMlock}) {
    EXPECT_EQ(parse_weight_memory(weight_memory_name(memory)).value(), memory);
  }
  const Result<WeightMemory> bad = parse_weight_memory("swap");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "weight memory 'swap' is not one of copy, mmap, mlock");
}

TEST(WeightMemory, ACopyLargerThanTheAvailableMemoryIsRefused) {
  EXPECT_TRUE(copy_fits_in_memory(int64_t{3} << 20, int64_t{3} << 20).is_ok());
  EXPECT_TRUE(copy_fits_in_memory(int64_t{1} << 40, std::nullopt).is_ok());  // unknown: the copy is tried
  const Status refused = copy_fits_in_memory((int64_t{3} << 20) + 1, int64_t{3} << 20);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "copying 4 MiB of weights into memory needs more than the 3 MiB available: use --weight-memory mmap "
            "(read in place) or more ranks");
}

TEST_F(WeightMemoryTest, CopyMovesEveryMappedRegionWithItsBytes) {
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  for (const char* name : {"bf16", "nvfp4", "fp8"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<LoadedModel> model = load_mapped(name);
    const std::vector<Region> before = regions_of(model->weights);
    const int64_t expected = mapped_bytes(*model);
    ASSERT_GT(expected, 0) << "mmap reads the checkpoint in place";
    // Every matrix's bytes, as the mapping holds them.
    std::vector<std::vector<uint8_t>> contents;
    for (const Region& r : before) contents.emplace_back(r.data, r.data + r.bytes);

    EXPECT_EQ(hold_weights_in_memory(model->weights, *model->checkpoint, WeightMemory::kCopy).value(), expected);
    const std::vector<Region> after = regions_of(model->weights);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_FALSE(in_mapping(*model->checkpoint, after[i].data)) << "region " << i;
      ASSERT_EQ(after[i].bytes, before[i].bytes);
      EXPECT_EQ(std::memcmp(after[i].data, contents[i].data(), static_cast<size_t>(after[i].bytes)), 0) << "region " << i;
      if (!in_mapping(*model->checkpoint, before[i].data)) EXPECT_EQ(after[i].data, before[i].data) << "owned stays";
    }
    // The CPU backend's default layout copies too, and computes what the mapped weights compute.
    const std::unique_ptr<LoadedModel> copied = testing::load_laid_out(dir(name), cpu);
    for (const Region& r : regions_of(copied->weights)) EXPECT_FALSE(in_mapping(*copied->checkpoint, r.data));
    const std::unique_ptr<LoadedModel> mapped = load_mapped(name);
    ReferenceForward mapped_forward(mapped->config, mapped->weights, cpu);
    ReferenceForward copied_forward(copied->config, copied->weights, cpu);
    const DistributionComparison same =
        compare_models(mapped_forward, copied_forward, {{1, 7, 42, 200, 3, 3, 9}, {5, 4, 3}}).value();
    EXPECT_EQ(same.mean_kl(), 0.0);
    EXPECT_EQ(same.top1_agreement(), 1.0);
  }
}

TEST_F(WeightMemoryTest, RoutedExpertsOfOtherRanksStayMapped) {
  // As the CPU backend lays out an expert-parallel rank's weights: repack and hold this rank's.
  std::unique_ptr<LoadedModel> model = load_model(dir("nvfp4")).value();
  const auto even_here = [](int /*layer*/, int expert) { return expert % 2 == 0; };
  backend::cpu_weights::repack_fp4_codes(model->weights, even_here);
  ASSERT_GT(hold_weights_in_memory(model->weights, *model->checkpoint, WeightMemory::kCopy, even_here).value(), 0);
  const LayerWeights& moe_layer = model->weights.layers[1];
  ASSERT_TRUE(moe_layer.is_moe);
  for (size_t e = 0; e < moe_layer.moe.experts.size(); ++e) {
    const quant::QuantizedWeightView& up = *moe_layer.moe.experts[e].up.weight.packed;
    EXPECT_EQ(in_mapping(*model->checkpoint, up.data), e % 2 == 1) << "expert " << e;
    EXPECT_EQ(in_mapping(*model->checkpoint, up.scales), e % 2 == 1) << "expert " << e;
  }
  ASSERT_TRUE(moe_layer.moe.shared_expert.has_value());
  EXPECT_FALSE(in_mapping(*model->checkpoint, moe_layer.moe.shared_expert->down.weight.packed->scales));
  EXPECT_FALSE(in_mapping(*model->checkpoint, moe_layer.attention.q.weight.packed->scales));
  EXPECT_FALSE(in_mapping(*model->checkpoint, model->weights.embed_tokens.data));
}

TEST_F(WeightMemoryTest, ATiedEmbeddingIsCopiedOnce) {
  std::unique_ptr<LoadedModel> model = load_mapped("tied");
  ASSERT_EQ(model->weights.lm_head.dense.data, model->weights.embed_tokens.data);
  const int64_t expected = mapped_bytes(*model);
  EXPECT_EQ(hold_weights_in_memory(model->weights, *model->checkpoint, WeightMemory::kCopy).value(), expected);
  EXPECT_EQ(model->weights.lm_head.dense.data, model->weights.embed_tokens.data);
  EXPECT_FALSE(in_mapping(*model->checkpoint, model->weights.embed_tokens.data));
}

TEST_F(WeightMemoryTest, MlockLocksTheRegionsInPlace) {
  std::unique_ptr<LoadedModel> model = load_mapped("fp8");
  const std::vector<Region> before = regions_of(model->weights);
  const int64_t locked_before = locked_bytes();
  const Result<int64_t> held = hold_weights_in_memory(model->weights, *model->checkpoint, WeightMemory::kMlock);
  if (!held.is_ok() && ::geteuid() != 0) GTEST_SKIP() << "mlock refused to a user: " << held.status().message();
  ASSERT_TRUE(held.is_ok()) << held.status().message();
  EXPECT_EQ(*held, mapped_bytes(*model));
  if (!testing::kAddressSanitizer) EXPECT_GE(locked_bytes() - locked_before, *held);  // ASan ignores mlock
  const std::vector<Region> after = regions_of(model->weights);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].data, before[i].data) << "region " << i;
  // mmap holds nothing.
  std::unique_ptr<LoadedModel> mapped = load_mapped("fp8");
  EXPECT_EQ(hold_weights_in_memory(mapped->weights, *mapped->checkpoint, WeightMemory::kMmap).value(), 0);
  EXPECT_TRUE(in_mapping(*mapped->checkpoint, mapped->weights.layers[0].attention.q.weight.packed->data));
}

}  // namespace
}  // namespace moert
