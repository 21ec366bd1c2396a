#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/model/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  ModelConfig c = preset_model_config(find_architecture("qwen3_moe"), "large").value();
  const ParameterCounts counts = count_parameters(c);
  EXPECT_NEAR(static_cast<double>(counts.total), 432e6, 3e6);
  EXPECT_NEAR(static_cast<double>(counts.active_per_token), 130e6, 3e6);
  ModelConfig tiny = preset_model_config(find_architecture("glm4_moe"), "tiny").value();
  EXPECT_EQ(tiny.rotary_dim, 32);
  EXPECT_EQ(tiny.router.n_group, 2);
  EXPECT_FALSE(preset_model_config(find_architecture("mixtral"), "huge").is_ok());
}

TEST(Generator, EveryArchitectureWritesALoadableShardedCheckpoint) {
  testing::ScratchDir scratch("generator");
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  for (const ArchSpec* arch : registered_architectures()) {
    const std::string dir = scratch / architecture_name(arch);
    if (!arch->has_generator) {  // refused with a message naming it, never a wrong checkpoint
      const Status refused = preset_model_config(arch, "tiny", small_shape()).status();
      EXPECT_NE(refused.message().find(architecture_name(arch)), std::string::npos) << refused.to_string();
      continue;
    }
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
    ReferenceForward forward((*model)->config, (*model)->weights, cpu);
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

// The names of one table (runtime/model/arch/tensor_names.h) joined into full names.
TEST(TensorNames, JoinThePiecesOfOneTable) {
  const TensorNames qwen = find_architecture("qwen3_moe")->names;
  EXPECT_EQ(qwen.layer_prefix(3), "model.layers.3.");
  EXPECT_EQ(qwen.attention_prefix(3) + qwen.q_proj, "model.layers.3.self_attn.q_proj");
  EXPECT_EQ(qwen.mlp_prefix(0) + qwen.mlp_projections[TensorNames::kDown], "model.layers.0.mlp.down_proj");
  EXPECT_EQ(qwen.router_module(1), "model.layers.1.mlp.gate");
  EXPECT_EQ(qwen.expert_prefix(1, 5) + qwen.expert_projections[TensorNames::kUp], "model.layers.1.mlp.experts.5.up_proj");
  EXPECT_EQ(qwen.every_layer({qwen.moe_block, qwen.router}), "model.layers.*.mlp.gate");
  EXPECT_EQ(qwen.layer_of("model.layers.12.mlp.gate.weight"), 12);
  EXPECT_EQ(qwen.layer_of("model.norm.weight"), -1);
  EXPECT_EQ(qwen.layer_of("model.layers.x.mlp"), -1);
  const TensorNames mixtral = find_architecture("mixtral")->names;
  EXPECT_EQ(mixtral.expert_prefix(0, 2) + mixtral.expert_projections[TensorNames::kDown],
            "model.layers.0.block_sparse_moe.experts.2.w2");
  EXPECT_EQ(find_architecture("qwen2_moe")->names.shared_expert_prefix(1), "model.layers.1.mlp.shared_expert.");
  EXPECT_EQ(find_architecture("deepseek_v3")->names.shared_expert_prefix(1), "model.layers.1.mlp.shared_experts.");
  EXPECT_EQ(find_architecture("gpt_oss")->names.router_module(0), "model.layers.0.mlp.router");
}

// Another spelling of the checkpoint names (Qwen3.5-MoE's `model.language_model.` prefix, a
// norm of another name) is one table: make-model writes it and the loader binds it, and a
// checkpoint of the other spelling is refused naming the tensor it lacks.
TEST(TensorNames, AnotherSpellingIsOneTable) {
  testing::ScratchDir scratch("tensor-names");
  ArchSpec renamed = *find_architecture("qwen3_moe");
  renamed.names.embed_tokens = "model.language_model.embed_tokens";
  renamed.names.final_norm = "model.language_model.norm";
  renamed.names.layers = "model.language_model.layers";
  renamed.names.post_attention_norm = "pre_feedforward_layernorm";
  ModelConfig config = preset_model_config(find_architecture("qwen3_moe"), "tiny", small_shape()).value();
  const ModelConfig plain = config;
  config.arch = &renamed;
  ThreadPool pool(1);
  ASSERT_TRUE(write_random_checkpoint(config, 5, scratch / "renamed", 1 << 30, pool).is_ok());
  ASSERT_TRUE(write_random_checkpoint(plain, 5, scratch / "plain", 1 << 30, pool).is_ok());
  const io::Checkpoint checkpoint = io::Checkpoint::open(scratch / "renamed").value();
  for (const std::string& name : checkpoint.tensor_names()) {
    EXPECT_TRUE(name.starts_with("model.language_model.") || name == "lm_head.weight") << name;
  }
  EXPECT_NE(checkpoint.find("model.language_model.layers.1.pre_feedforward_layernorm.weight"), nullptr);
  Result<ModelWeights> weights = bind_model_weights(config, checkpoint);
  ASSERT_TRUE(weights.is_ok()) << weights.status().to_string();
  EXPECT_EQ(weights->layers.size(), static_cast<size_t>(config.num_layers));
  const io::Checkpoint other = io::Checkpoint::open(scratch / "plain").value();
  const Status refused = bind_model_weights(config, other).status();
  EXPECT_NE(refused.message().find("model.language_model.embed_tokens.weight"), std::string::npos)
      << refused.to_string();
}

TEST(Generator, SameSeedSameBytesAnyThreadCount) {
  testing::ScratchDir scratch("generator-seed");
  ModelConfig config = preset_model_config(find_architecture("mixtral"), "tiny", small_shape()).value();
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


// Loads of every MoE layer, summed, recorded on the way to the local experts.
class CountingExperts : public RoutedExperts {
 public:
  explicit CountingExperts(const ModelConfig& config)
      : local_(config), loads_(static_cast<size_t>(config.num_experts()), 0), top_k_(config.top_k()) {}
  void run(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h, int64_t num_tokens,
           DevicePtr<const int32_t> ids, DevicePtr<const float> w, DevicePtr<float> out,
           const std::function<void()>& overlapped) override {
    const int32_t* routed = ids.host("the routing");  // a CPU backend
    for (int64_t i = 0; i < num_tokens * top_k_; ++i) ++loads_[static_cast<size_t>(routed[i])];
    local_.run(backend, layer, moe, h, num_tokens, ids, w, out, overlapped);
  }
  const std::vector<int64_t>& loads() const { return loads_; }

 private:
  LocalRoutedExperts local_;
  std::vector<int64_t> loads_;
  int top_k_;
};

// Share of the routed entries that go to the lower half of the expert ids.
double low_half_share(const std::string& dir) {
  const std::unique_ptr<LoadedModel> model = load_model(dir).value();
  ThreadPool pool(1);
  backend::CpuBackend cpu(pool);
  TransformerForward forward(model->config, model->weights, cpu);
  CountingExperts counting(model->config);
  forward.set_routed_experts(&counting);
  ForwardBatch batch;
  for (int t = 0; t < 64; ++t) {
    batch.tokens.push_back((t * 37 + 5) % model->config.vocab_size);
    batch.positions.push_back(t);
  }
  DenseKvCache cache(model->config);
  EXPECT_TRUE(forward.forward(batch, cache).is_ok());
  int64_t total = 0;
  for (int64_t load : counting.loads()) total += load;
  int64_t low = 0;
  for (int e = 0; e < model->config.num_experts() / 2; ++e) low += counting.loads()[static_cast<size_t>(e)];
  return static_cast<double>(low) / static_cast<double>(total);
}

TEST(Generator, RouterSkewSendsMostTokensToTheLowExpertIds) {
  testing::ScratchDir scratch("generator-skew");
  ModelShapeOverrides shape;
  shape.num_layers = 2;
  const ModelConfig config = preset_model_config(find_architecture("qwen3_moe"), "tiny", shape).value();
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  WeightShaping skewed;
  skewed.router_skew = 1.0f;
  ASSERT_TRUE(write_random_checkpoint(config, 3, scratch / "plain", 1 << 30, pool).is_ok());
  ASSERT_TRUE(write_random_checkpoint(config, 3, scratch / "skewed", 1 << 30, pool, skewed).is_ok());
  const double plain = low_half_share(scratch / "plain");
  const double skew = low_half_share(scratch / "skewed");
  EXPECT_GT(plain, 0.3) << "skewed: " << skew;
  EXPECT_LT(plain, 0.6) << "skewed: " << skew;
  EXPECT_GT(skew, plain + 0.15) << "plain: " << plain;
  WeightShaping bad;
  bad.router_skew = -1.0f;
  EXPECT_FALSE(validate_weight_shaping(bad).is_ok());
}

// Greedy agreement of `draft` with `target` on a few prompts, position by position.
double greedy_agreement(const std::string& target_dir, const std::string& draft_dir) {
  const std::unique_ptr<LoadedModel> target = load_model(target_dir).value();
  const std::unique_ptr<LoadedModel> draft = load_model(draft_dir).value();
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward target_forward(target->config, target->weights, cpu);
  ReferenceForward draft_forward(draft->config, draft->weights, cpu);
  int agree = 0, total = 0;
  for (int p = 0; p < 4; ++p) {
    const std::vector<int32_t> prompt = {static_cast<int32_t>(p * 11 + 1), 7, static_cast<int32_t>(p * 3 + 2)};
    const GreedyOutput a = greedy_generate(target_forward, prompt, 12).value();
    // Teacher-forced: the draft's argmax after each target prefix.
    DenseKvCache cache = draft_forward.new_cache();
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), a.gen_tokens.begin(), a.gen_tokens.end() - 1);
    const std::vector<float> logits = draft_forward.forward(cache, tokens).value();
    const int64_t vocab = draft->config.vocab_size;
    for (size_t j = 0; j < a.gen_tokens.size(); ++j) {
      const int64_t row = static_cast<int64_t>(prompt.size() + j) - 1;
      agree += argmax_lowest_index(logits.data() + row * vocab, vocab) == a.gen_tokens[j] ? 1 : 0;
      ++total;
    }
  }
  return static_cast<double>(agree) / total;
}

TEST(Generator, FaithfulLayersMakeTheTruncatedModelAGoodDraft) {
  testing::ScratchDir scratch("generator-draft");
  ModelShapeOverrides deep = small_shape();
  deep.num_layers = 6;
  ModelShapeOverrides shallow = small_shape();
  shallow.num_layers = 1;
  const ModelConfig target_config = preset_model_config(find_architecture("qwen3_moe"), "tiny", deep).value();
  const ModelConfig draft_config = preset_model_config(find_architecture("qwen3_moe"), "tiny", shallow).value();
  ThreadPool pool(2);
  WeightShaping faithful;
  faithful.faithful_layers = 1;
  faithful.late_layer_scale = 0.05f;
  ASSERT_TRUE(write_random_checkpoint(target_config, 9, scratch / "plain", 1 << 30, pool).is_ok());
  ASSERT_TRUE(write_random_checkpoint(target_config, 9, scratch / "target", 1 << 30, pool, faithful).is_ok());
  ASSERT_TRUE(write_random_checkpoint(draft_config, 9, scratch / "draft", 1 << 30, pool, faithful).is_ok());
  // The draft's tensors are the target's first layer, embeddings and head, byte for byte.
  const std::unique_ptr<LoadedModel> target = load_model(scratch / "target").value();
  const std::unique_ptr<LoadedModel> draft = load_model(scratch / "draft").value();
  const TensorView& a = target->weights.layers[0].attention.q.weight.dense;
  const TensorView& b = draft->weights.layers[0].attention.q.weight.dense;
  ASSERT_EQ(static_cast<size_t>(a.numel()) * 2, static_cast<size_t>(b.numel()) * 2);
  EXPECT_EQ(0, std::memcmp(a.data, b.data, static_cast<size_t>(a.numel()) * 2));
  const double shaped = greedy_agreement(scratch / "target", scratch / "draft");
  const double unshaped = greedy_agreement(scratch / "plain", scratch / "draft");
  EXPECT_GT(shaped, 0.8) << "unshaped target: " << unshaped;
  EXPECT_LT(unshaped, 0.5) << "shaped target: " << shaped;
}

}  // namespace
}  // namespace moert
