// The paged continuous-batching engine against the reference forward, on the shared
// reference models and generated ones: greedy outputs token for token, prefix sharing,
// n > 1 copy-on-write, KV waste, preemption and batch invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "runtime/backend/cpu/cpu_backend.h"
#include "attention/kv_cache_spec.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/kv_cache_eval.h"
#include "runtime/model/kv_cache_groups.h"
#include "runtime/model/generator.h"
#include "runtime/model/reference_forward.h"
#include "runtime/sampling/logit_adjustments.h"
#include "tests/runtime/engine/serve_all.h"
#include "tests/support/test_support.h"

namespace moert::engine {
namespace {

struct MixedRequest {
  std::vector<int32_t> prompt;
  int max_tokens;
};

// Deterministic pseudo-random prompts of varied lengths (1..100 tokens).
std::vector<MixedRequest> mixed_requests(int count, int vocab, uint64_t seed) {
  std::vector<MixedRequest> requests;
  uint64_t state = seed * 2654435761u + 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % 1000003);
  };
  for (int r = 0; r < count; ++r) {
    MixedRequest request;
    const int length = 1 + next() % 100;
    for (int i = 0; i < length; ++i) request.prompt.push_back(next() % vocab);
    request.max_tokens = 1 + next() % 24;
    requests.push_back(std::move(request));
  }
  return requests;
}

std::map<std::string, RequestOutput> run_all(const TransformerForward& model, const EngineConfig& config,
                                             const std::vector<Request>& requests, EngineStats* stats = nullptr) {
  return testing::serve_all(model, config, requests, nullptr, stats);
}

std::vector<Request> greedy_requests(const std::vector<MixedRequest>& mixed) {
  std::vector<Request> requests;
  for (size_t r = 0; r < mixed.size(); ++r) {
    Request request;
    request.id = "r" + std::to_string(r);
    request.prompt = mixed[r].prompt;
    request.params.max_tokens = mixed[r].max_tokens;
    requests.push_back(std::move(request));
  }
  return requests;
}

class EngineOnReference : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineOnReference, MixedBatchGreedyEqualsReferenceForward) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  Result<std::unique_ptr<LoadedModel>> model = load_model(testing::shared_dir() + "/reference/" + GetParam() + "/hf");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  TransformerForward transformer((*model)->config, (*model)->weights, cpu);
  ReferenceForward reference((*model)->config, (*model)->weights, cpu);
  const std::vector<MixedRequest> mixed = mixed_requests(34, (*model)->config.vocab_size, 5);
  EngineConfig config;
  config.block_size = 16;
  config.num_kv_blocks = 1024;
  config.scheduler.max_batched_tokens = 96;  // forces chunked prefill of the longer prompts
  config.scheduler.max_seqs = 24;
  EngineStats stats;
  const std::map<std::string, RequestOutput> outputs = run_all(transformer, config, greedy_requests(mixed), &stats);
  ASSERT_EQ(outputs.size(), mixed.size());
  for (size_t r = 0; r < mixed.size(); ++r) {
    Result<GreedyOutput> expected = greedy_generate(reference, mixed[r].prompt, mixed[r].max_tokens);
    ASSERT_TRUE(expected.is_ok());
    const RequestOutput& got = outputs.at("r" + std::to_string(r));
    ASSERT_EQ(got.outputs.size(), 1u);
    EXPECT_EQ(got.outputs[0].token_ids, expected->gen_tokens) << GetParam() << " request " << r;
    EXPECT_EQ(got.outputs[0].finish_reason, "length");
  }
  // KV waste: reserved-but-empty slots stay below one block per running sequence.
  EXPECT_GT(stats.running_at_peak, 0);
  EXPECT_LT(stats.unused_slots_at_peak, stats.running_at_peak * config.block_size);
}

// Greedy requests through the paged engine (8-token blocks, 40-token steps) with a roomy
// pool and with one tight enough to preempt: every output equals the reference forward's.
void expect_engine_equals_reference_under_preemption(const TransformerForward& transformer,
                                                     const ReferenceForward& reference,
                                                     const std::vector<MixedRequest>& mixed) {
  for (const int blocks : {1024, 26}) {
    EngineConfig engine;
    engine.block_size = 8;
    engine.num_kv_blocks = blocks;
    engine.scheduler.max_batched_tokens = 40;
    EngineStats stats;
    const auto outputs = run_all(transformer, engine, greedy_requests(mixed), &stats);
    ASSERT_EQ(outputs.size(), mixed.size());
    for (size_t r = 0; r < mixed.size(); ++r) {
      const GreedyOutput expected = greedy_generate(reference, mixed[r].prompt, mixed[r].max_tokens).value();
      EXPECT_EQ(outputs.at("r" + std::to_string(r)).outputs[0].token_ids, expected.gen_tokens) << r << " " << blocks;
    }
    if (blocks == 26) EXPECT_GT(stats.preemptions, 0);
  }
}

// A DeepSeek-V3 of another shape than the shared one (no q LoRA, v_head_dim != nope dim,
// odd widths, three heads): the paged engine over its latent cache under chunked prefill and
// preemption equals the contiguous reference forward; the cache holds one latent row of
// kv_lora_rank + qk_rope_head_dim values per token and layer.
TEST(EngineOnGeneratedDeepseekV3, LatentCacheUnderPreemptionEqualsTheReferenceForward) {
  testing::ScratchDir scratch("engine-deepseek");
  ModelShapeOverrides shape;
  shape.vocab_size = 300;
  shape.hidden_size = 96;
  shape.num_layers = 3;
  shape.num_heads = 3;
  shape.head_dim = 40;
  shape.num_experts = 8;
  shape.top_k = 3;
  shape.moe_intermediate_size = 48;
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ModelConfig config = preset_model_config(find_architecture("deepseek_v3"), "tiny", shape).value();
  config.mla.q_lora_rank = 0;
  config.mla.v_head_dim = 12;
  ASSERT_EQ(config.mla.kv_lora_rank + config.mla.qk_rope_head_dim, config.head_dim);
  EXPECT_EQ(config.router.n_group, 4);
  ASSERT_TRUE(write_random_checkpoint(config, 29, scratch.path(), 1 << 30, pool).is_ok());
  const std::unique_ptr<LoadedModel> model = load_model(scratch.path()).value();
  EXPECT_EQ(model->config.mla.q_lora_rank, 0);
  EXPECT_EQ(model->config.mla.v_head_dim, 12);
  for (const auto& [dtype, element] : {std::pair{DType::kF32, 4}, {DType::kBF16, 2}, {DType::kF8E4M3, 1}}) {
    const std::vector<attention::KvCacheSpec> groups = kv_cache_groups(model->config, dtype).value();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].kind, attention::KvCacheKind::kLatent);
    const int64_t row = config.mla.kv_lora_rank + config.mla.qk_rope_head_dim;
    EXPECT_EQ(runner::kv_cache_bytes_per_token(model->config, dtype).value(), 3 * row * element);
    const int64_t scales = dtype == DType::kF8E4M3 ? 3 * 4 : 0;  // one F32 per block and layer
    EXPECT_EQ(runner::kv_cache_bytes_per_block(model->config, 16, dtype).value(), 16 * 3 * row * element + scales);
  }
  TransformerForward transformer(model->config, model->weights, cpu);
  ReferenceForward reference(model->config, model->weights, cpu);
  expect_engine_equals_reference_under_preemption(transformer, reference, mixed_requests(10, config.vocab_size, 31));
}

// A gpt-oss of another shape than the shared one (q heads x head_dim != hidden, one kv head,
// odd expert count, three layers sliding / full / sliding with a window of 16, YaRN): the
// paged engine under chunked prefill and preemption equals the contiguous reference forward.
TEST(EngineOnGeneratedGptOss, WindowsSinksAndYarnEqualTheReferenceForward) {
  testing::ScratchDir scratch("engine-gptoss");
  ModelShapeOverrides shape;
  shape.vocab_size = 300;
  shape.hidden_size = 128;
  shape.num_layers = 3;
  shape.num_heads = 4;
  shape.num_kv_heads = 1;
  shape.head_dim = 48;
  shape.num_experts = 6;
  shape.top_k = 3;
  shape.moe_intermediate_size = 96;
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const ModelConfig config = preset_model_config(find_architecture("gpt_oss"), "tiny", shape).value();
  EXPECT_EQ(config.sliding_windows, (std::vector<int>{16, 0, 16}));
  ASSERT_TRUE(write_random_checkpoint(config, 17, scratch.path(), 1 << 30, pool).is_ok());
  const std::unique_ptr<LoadedModel> model = load_model(scratch.path()).value();
  TransformerForward transformer(model->config, model->weights, cpu);
  ReferenceForward reference(model->config, model->weights, cpu);
  const std::vector<MixedRequest> mixed = mixed_requests(10, config.vocab_size, 23);
  expect_engine_equals_reference_under_preemption(transformer, reference, mixed);
  // One long sequence: the full layers hold every block, the sliding layers only their
  // window, so the pool holds far fewer than two tables' worth (the blocks behind the
  // window go back to the pool as decode proceeds).
  Request long_request;
  long_request.id = "long";
  long_request.prompt = mixed[0].prompt;
  long_request.params.max_tokens = 150;
  EngineConfig engine;
  engine.block_size = 8;
  engine.num_kv_blocks = 1024;
  EngineStats stats;
  const auto outputs = run_all(transformer, engine, {long_request}, &stats);
  const int64_t length = static_cast<int64_t>(long_request.prompt.size()) + 150;
  const int64_t full_blocks = (length + 7) / 8;
  EXPECT_EQ(outputs.at("long").outputs[0].token_ids,
            greedy_generate(reference, long_request.prompt, 150).value().gen_tokens);
  EXPECT_GE(stats.peak_used_blocks, full_blocks);
  EXPECT_LE(stats.peak_used_blocks, full_blocks + (static_cast<int64_t>(long_request.prompt.size()) + 7) / 8 + 3)
      << "the sliding layers kept blocks behind their window";
}

INSTANTIATE_TEST_SUITE_P(AllModels, EngineOnReference, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

// A small generated model shared by the remaining tests.
class EngineOnGeneratedModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("engine-model");
    ModelShapeOverrides shape;
    shape.vocab_size = 512;
    shape.hidden_size = 64;
    shape.num_layers = 2;
    shape.moe_intermediate_size = 64;
    shape.head_dim = 16;
    ThreadPool pool(2);
    const ModelConfig config = preset_model_config(find_architecture("glm4_moe"), "tiny", shape).value();
    ASSERT_TRUE(write_random_checkpoint(config, 9, scratch_->path(), 1 << 30, pool).is_ok());
    model_ = load_model(scratch_->path()).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete scratch_;
  }
  void SetUp() override { transformer_ = std::make_unique<TransformerForward>(model_->config, model_->weights, cpu_); }

  static testing::ScratchDir* scratch_;
  static LoadedModel* model_;
  ThreadPool pool_{2};
  backend::CpuBackend cpu_{pool_};
  std::unique_ptr<TransformerForward> transformer_;
};
testing::ScratchDir* EngineOnGeneratedModel::scratch_ = nullptr;
LoadedModel* EngineOnGeneratedModel::model_ = nullptr;

TEST_F(EngineOnGeneratedModel, SharedPrefixIsHeldOnce) {
  const std::vector<MixedRequest> mixed = mixed_requests(16, 512, 11);
  std::vector<int32_t> prefix(mixed[0].prompt.begin(), mixed[0].prompt.end());
  prefix.resize(64, 7);
  std::vector<Request> requests;
  for (int r = 0; r < 16; ++r) {
    Request request;
    request.id = "p" + std::to_string(r);
    request.prompt = prefix;
    for (int i = 0; i <= r % 5; ++i) request.prompt.push_back((r * 31 + i) % 512);  // 1..5 own tokens
    request.params.max_tokens = 4;
    requests.push_back(std::move(request));
  }
  EngineConfig config;
  config.num_kv_blocks = 512;
  EngineStats stats;
  const auto outputs = run_all(*transformer_, config, requests, &stats);
  ASSERT_EQ(outputs.size(), 16u);
  // One copy of the 4 prefix blocks, plus at most one own block per request (<= 5 prompt
  // tokens + 4 generated fit in one 16-token block).
  EXPECT_LE(stats.peak_used_blocks, 4 + 16);
  EXPECT_EQ(stats.prefix_hit_tokens, 15 * 64);
  // Caching changes nothing in the outputs.
  config.enable_prefix_caching = false;
  EngineStats uncached_stats;
  const auto uncached = run_all(*transformer_, config, requests, &uncached_stats);
  EXPECT_EQ(uncached_stats.prefix_hit_tokens, 0);
  EXPECT_GT(uncached_stats.peak_used_blocks, 16 * 4);
  for (const auto& [id, output] : outputs) EXPECT_EQ(output.outputs[0].token_ids, uncached.at(id).outputs[0].token_ids);
}

TEST_F(EngineOnGeneratedModel, ParallelSamplesShareThePromptBlocks) {
  Request request;
  request.id = "n4";
  for (int i = 0; i < 40; ++i) request.prompt.push_back((i * 37) % 512);  // 2 full blocks + 8 tokens
  request.params.n = 4;
  request.params.temperature = 1.0f;
  request.params.seed = 3;
  request.params.max_tokens = 6;  // 40 + 6 tokens stay inside the third block
  EngineConfig config;
  config.num_kv_blocks = 64;
  EngineStats stats;
  const auto outputs = run_all(*transformer_, config, {request}, &stats);
  const RequestOutput& output = outputs.at("n4");
  ASSERT_EQ(output.outputs.size(), 4u);
  for (const SampleOutput& sample : output.outputs) EXPECT_EQ(sample.token_ids.size(), 6u);
  EXPECT_EQ(output.output_tokens, 24);
  // The 2 full prompt blocks are shared; the partial third is copied on write by 3 of the 4.
  EXPECT_EQ(stats.cow_copies, 3);
  EXPECT_EQ(stats.peak_used_blocks, 2 + 4);
  // The samples differ (temperature 1 over a random model), and a rerun reproduces them.
  EXPECT_NE(output.outputs[0].token_ids, output.outputs[1].token_ids);
  const auto again = run_all(*transformer_, config, {request});
  for (int s = 0; s < 4; ++s) EXPECT_EQ(again.at("n4").outputs[s].token_ids, output.outputs[s].token_ids);
}

TEST_F(EngineOnGeneratedModel, PreemptionByRecomputeKeepsGreedyOutputs) {
  const std::vector<Request> requests = greedy_requests(mixed_requests(12, 512, 21));
  EngineConfig roomy;
  roomy.num_kv_blocks = 1024;
  const auto expected = run_all(*transformer_, roomy, requests);
  EngineConfig tight = roomy;
  tight.num_kv_blocks = 9;  // 8 usable blocks = 128 tokens: the longest request fits alone, the batch does not
  EngineStats stats;
  const auto got = run_all(*transformer_, tight, requests, &stats);
  ASSERT_EQ(got.size(), requests.size());
  EXPECT_GT(stats.preemptions, 0);
  for (const auto& [id, output] : expected) EXPECT_EQ(got.at(id).outputs[0].token_ids, output.outputs[0].token_ids) << id;
}

TEST_F(EngineOnGeneratedModel, OutputsDoNotDependOnTheBatch) {
  // Sampled and greedy requests, alone versus together with others and other chunk sizes.
  std::vector<Request> requests = greedy_requests(mixed_requests(10, 512, 33));
  for (size_t r = 0; r < requests.size(); r += 2) {
    requests[r].params.temperature = 0.8f;
    requests[r].params.top_k = 50;
    requests[r].params.top_p = 0.9f;
  }
  EngineConfig batched;
  batched.scheduler.max_batched_tokens = 37;
  const auto together = run_all(*transformer_, batched, requests);
  EngineConfig alone_config;
  alone_config.scheduler.max_batched_tokens = 1000;
  for (const Request& request : requests) {
    const auto alone = run_all(*transformer_, alone_config, {request});
    EXPECT_EQ(alone.at(request.id).outputs[0].token_ids, together.at(request.id).outputs[0].token_ids) << request.id;
  }
}

// The model's KV cache groups and their sizes: every layer in one full-attention group, K
// and V rows of KVH x Dh per token and layer, FP8 with F32 scales per block, layer and head.
// --max-seqs bounds the running sequences including the samples a request will fork into:
// with a limit of 3, requests of n = 3 and n = 2 never run together and never exceed it;
// n above the limit runs in waves of at most 3 samples (docs/requests.md), and more than
// kMaxSamplesPerRequest is refused by name.
TEST_F(EngineOnGeneratedModel, MaxSeqsCountsTheSamplesOfARequest) {
  EngineConfig config;
  config.num_kv_blocks = 256;
  config.scheduler.max_seqs = 3;
  Engine engine(*transformer_, config);
  for (const auto& [id, n] : {std::pair{"three", 3}, std::pair{"two", 2}, std::pair{"one", 1}, std::pair{"seven", 7}}) {
    Request request;
    request.id = id;
    request.prompt = {5, 6, 7, 8};
    request.params.max_tokens = 6;
    request.params.n = n;
    request.params.temperature = 0.7f;
    ASSERT_TRUE(engine.add_request(request).is_ok());
  }
  Request too_many;
  too_many.id = "many";
  too_many.prompt = {1, 2};
  too_many.params.n = kMaxSamplesPerRequest + 1;
  const Status refused = engine.check_request(too_many);
  EXPECT_NE(refused.message().find("n = 4097 samples, more than the 4096"), std::string::npos) << refused.to_string();
  size_t most = 0;
  int finished = 0;
  while (engine.has_unfinished()) {
    const std::vector<RequestOutput> outputs = engine.step().value();
    for (const RequestOutput& output : outputs) {
      ++finished;
      if (output.id == "seven") EXPECT_EQ(output.outputs.size(), 7u);
    }
    most = std::max(most, engine.num_running());
  }
  EXPECT_EQ(finished, 4);
  EXPECT_EQ(most, 3u);
}

// The samples of a request in waves (n > max_seqs) have the tokens they have in one wave:
// a sample's uniforms depend on its index, not on its wave; with and without the prefix
// cache, greedy and sampled, with penalties and log-probabilities (host sampling).
TEST_F(EngineOnGeneratedModel, SamplesInWavesEqualOneWave) {
  std::vector<Request> requests = greedy_requests(mixed_requests(4, 512, 41));
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].params.n = 3 + static_cast<int>(r);
    if (r != 1) requests[r].params.temperature = 0.8f;
    if (r == 2) requests[r].params.presence_penalty = 0.5f;
    if (r == 3) requests[r].params.logprobs = 2;
  }
  EngineConfig one_wave;
  one_wave.scheduler.max_seqs = 64;
  const auto expected = run_all(*transformer_, one_wave, requests);
  for (const bool prefix_caching : {true, false}) {
    for (const int max_seqs : {1, 2, 4}) {
      EngineConfig waves;
      waves.scheduler.max_seqs = max_seqs;
      waves.scheduler.max_batched_tokens = 29;
      waves.enable_prefix_caching = prefix_caching;
      const auto got = run_all(*transformer_, waves, requests);
      for (const Request& request : requests) {
        const auto& want = expected.at(request.id).outputs;
        const auto& have = got.at(request.id).outputs;
        ASSERT_EQ(have.size(), want.size()) << request.id;
        for (size_t s = 0; s < want.size(); ++s) {
          EXPECT_EQ(have[s].token_ids, want[s].token_ids) << request.id << " sample " << s << " max_seqs " << max_seqs;
          EXPECT_EQ(have[s].logprobs.size(), want[s].logprobs.size());
          for (size_t t = 0; t < want[s].logprobs.size() && t < have[s].logprobs.size(); ++t) {
            EXPECT_EQ(have[s].logprobs[t].logprob, want[s].logprobs[t].logprob);
          }
        }
      }
    }
  }
}

TEST_F(EngineOnGeneratedModel, KvCacheGroupsAndBytes) {
  const ModelConfig& c = model_->config;
  const int64_t values = 2LL * c.num_kv_heads * c.head_dim * c.num_layers;  // one token, all layers
  for (const auto& [dtype, element] : {std::pair{DType::kF32, 4}, {DType::kBF16, 2}, {DType::kF8E4M3, 1}}) {
    const std::vector<attention::KvCacheSpec> groups = kv_cache_groups(c, dtype).value();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].kind, attention::KvCacheKind::kFullAttention);
    EXPECT_EQ(groups[0].layers.size(), static_cast<size_t>(c.num_layers));
    EXPECT_EQ(attention::kv_cache_bytes_per_token(groups), values * element);
    EXPECT_EQ(runner::kv_cache_bytes_per_token(c, dtype).value(), values * element);
    const int64_t scales = dtype == DType::kF8E4M3 ? 2LL * 4 * c.num_kv_heads * c.num_layers : 0;
    EXPECT_EQ(runner::kv_cache_bytes_per_block(c, 16, dtype).value(), 16 * values * element + scales);
  }
  EXPECT_FALSE(kv_cache_groups(c, DType::kF16).is_ok());
  EXPECT_EQ(attention::parse_kv_cache_dtype("auto", DType::kBF16).value(), DType::kBF16);
  EXPECT_EQ(attention::parse_kv_cache_dtype("fp8_e4m3", DType::kF32).value(), DType::kF8E4M3);
  const Status bad = attention::parse_kv_cache_dtype("int4", DType::kF32).status();
  EXPECT_NE(bad.message().find("'int4'"), std::string::npos) << bad.to_string();
}

// Reduced-precision KV caches against F32 on the same prefill + decode schedule: F32 against
// itself is exact; BF16 drifts less than FP8, both only slightly.
TEST_F(EngineOnGeneratedModel, Bf16AndFp8KvCachesStayCloseToF32) {
  std::vector<std::vector<int32_t>> sequences;
  for (const MixedRequest& request : mixed_requests(4, 512, 5)) sequences.push_back(request.prompt);
  const DistributionComparison same = compare_kv_cache_dtype(*transformer_, DType::kF32, sequences).value();
  EXPECT_GT(same.positions, 20);
  EXPECT_EQ(same.sum_kl, 0.0);
  EXPECT_EQ(same.top1_agreement(), 1.0);
  const DistributionComparison bf16 = compare_kv_cache_dtype(*transformer_, DType::kBF16, sequences).value();
  const DistributionComparison fp8 = compare_kv_cache_dtype(*transformer_, DType::kF8E4M3, sequences).value();
  std::printf("kv cache vs f32 over %lld positions: bf16 KL %.3g top-1 %.4f; fp8_e4m3 KL %.3g top-1 %.4f\n",
              static_cast<long long>(bf16.positions), bf16.mean_kl(), bf16.top1_agreement(), fp8.mean_kl(),
              fp8.top1_agreement());
  EXPECT_GT(bf16.mean_kl(), 0.0);
  EXPECT_LT(bf16.mean_kl(), 1e-3);
  EXPECT_GT(fp8.mean_kl(), bf16.mean_kl());
  EXPECT_LT(fp8.mean_kl(), 5e-2);
  EXPECT_GE(bf16.top1_agreement(), 0.95);
  EXPECT_GE(fp8.top1_agreement(), 0.8);
  std::vector<std::vector<int32_t>> bad = {{1, 2, 999}};
  EXPECT_FALSE(compare_kv_cache_dtype(*transformer_, DType::kBF16, bad).is_ok());
}

// The engine serves through BF16 and FP8 caches (prefix sharing, copy-on-write for n > 1,
// preemption in a tight pool), and a reduced cache's greedy outputs stay those of the same
// cache whatever the batch.
TEST_F(EngineOnGeneratedModel, ServesThroughBf16AndFp8Caches) {
  const std::vector<Request> requests = greedy_requests(mixed_requests(8, 512, 41));
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    EngineConfig roomy;
    roomy.kv_cache_dtype = dtype;
    const auto expected = run_all(*transformer_, roomy, requests);
    ASSERT_EQ(expected.size(), requests.size());
    EngineConfig tight = roomy;
    tight.num_kv_blocks = 9;
    EngineStats stats;
    const auto got = run_all(*transformer_, tight, requests, &stats);
    EXPECT_GT(stats.preemptions, 0);
    for (const auto& [id, output] : expected) {
      EXPECT_EQ(got.at(id).outputs[0].token_ids, output.outputs[0].token_ids) << id << " " << dtype_name(dtype);
    }
  }
}

TEST_F(EngineOnGeneratedModel, StopTokensAndBadRequests) {
  Engine engine(*transformer_, EngineConfig{});
  Request request;
  request.id = "bad";
  request.prompt = {1, 512};
  EXPECT_NE(engine.add_request(request).message().find("prompt token 512 at index 1 is outside the vocabulary"),
            std::string::npos);
  request.prompt = {1, 2};
  request.params.top_p = 0.0f;
  EXPECT_NE(engine.add_request(request).message().find("top_p"), std::string::npos);
  request.params.top_p = 1.0f;
  request.params.max_tokens = 100000;
  EXPECT_NE(engine.add_request(request).message().find("max_position_embeddings"), std::string::npos);

  // The stop token ends generation with "stop" and is kept in the output.
  Request greedy;
  greedy.id = "g";
  greedy.prompt = {3, 4, 5};
  greedy.params.max_tokens = 8;
  const auto first = run_all(*transformer_, EngineConfig{}, {greedy});
  const std::vector<int32_t> tokens = first.at("g").outputs[0].token_ids;
  ASSERT_EQ(tokens.size(), 8u);
  greedy.params.stop_token_ids = {tokens[2]};
  const auto stopped = run_all(*transformer_, EngineConfig{}, {greedy});
  const size_t stop_at = std::find(tokens.begin(), tokens.end(), tokens[2]) - tokens.begin();
  EXPECT_EQ(stopped.at("g").outputs[0].finish_reason, "stop");
  EXPECT_EQ(stopped.at("g").outputs[0].token_ids, std::vector<int32_t>(tokens.begin(), tokens.begin() + stop_at + 1));
}

// Token text for tests: id i reads as two letters ("ab" for 1), special-free.
class LetterText final : public TokenText {
 public:
  static std::string piece(int32_t id) {
    return {static_cast<char>('a' + id % 26), static_cast<char>('a' + (id / 26) % 26)};
  }
  class Stream final : public TokenTextStream {
   public:
    std::string push(int32_t id) override { return piece(id); }
    std::string finish() override { return {}; }
  };
  std::unique_ptr<TokenTextStream> open_stream() const override { return std::make_unique<Stream>(); }
  std::string token_piece(int32_t id) const override { return piece(id); }
};

// EOS, ignore_eos, min_tokens, stop strings across tokens, penalties and log-probabilities
// (docs/generation.md), against the plain greedy run and a float64 reference loop.
TEST_F(EngineOnGeneratedModel, GenerationControls) {
  const LetterText text;
  Request greedy;
  greedy.id = "g";
  greedy.prompt = {3, 4, 5, 6};
  greedy.params.max_tokens = 12;
  const auto serve = [&](const Request& request, const EngineConfig& config = EngineConfig{}) {
    return testing::serve_all(*transformer_, config, {request}, nullptr, nullptr, &text).at("g").outputs[0];
  };
  const SampleOutput plain = serve(greedy);
  const std::vector<int32_t> tokens = plain.token_ids;
  ASSERT_EQ(tokens.size(), 12u);
  std::string plain_text;
  for (int32_t id : tokens) plain_text += LetterText::piece(id);
  EXPECT_EQ(plain.text, plain_text);

  // EOS stops with "stop" and no stop_reason; ignore_eos runs to max_tokens.
  EngineConfig with_eos;
  with_eos.eos_token_ids = {tokens[3]};
  const size_t eos_at = std::find(tokens.begin(), tokens.end(), tokens[3]) - tokens.begin();
  const SampleOutput eos = serve(greedy, with_eos);
  EXPECT_EQ(eos.finish_reason, "stop");
  EXPECT_FALSE(eos.stop_token.has_value());
  EXPECT_EQ(eos.token_ids, std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(eos_at) + 1));
  Request ignoring = greedy;
  ignoring.params.ignore_eos = true;
  EXPECT_EQ(serve(ignoring, with_eos).token_ids, tokens);
  // min_tokens masks EOS until then: no EOS among the first 6 tokens.
  Request at_least = greedy;
  at_least.params.min_tokens = 6;
  const SampleOutput masked = serve(at_least, with_eos);
  ASSERT_GE(masked.token_ids.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(masked.token_ids[i], tokens[3]) << i;

  // A stop string made of the end of token 5's text and the start of token 6's.
  Request stopping = greedy;
  const std::string stop = plain_text.substr(2 * 5 + 1, 2);
  stopping.params.stop = {"zzzz-never", stop};
  const size_t stop_position = plain_text.find(stop);
  const SampleOutput stopped = serve(stopping);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.stop_string, stop);
  EXPECT_EQ(stopped.text, plain_text.substr(0, stop_position));
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(
                                                                                        (stop_position + 2 + 1) / 2)));
  // The longest sequence: the model's context, or what the KV pool holds (4 usable blocks of 16).
  EXPECT_EQ(Engine(*transformer_, EngineConfig{}).max_sequence_length(), model_->config.max_position_embeddings);
  EngineConfig small_pool;
  small_pool.num_kv_blocks = 5;
  EXPECT_EQ(Engine(*transformer_, small_pool).max_sequence_length(), 64);
  // Without a TokenText a stop string is refused.
  Engine no_text(*transformer_, EngineConfig{});
  EXPECT_NE(no_text.add_request(stopping).message().find("'stop' strings need the checkpoint's tokenizer"),
            std::string::npos);

  // Penalties and log-probabilities against a float64 reference loop over the reference forward.
  Request penalised = greedy;
  penalised.params.repetition_penalty = 1.2f;
  penalised.params.frequency_penalty = -2.0f;  // negative: repeats are encouraged, so they happen
  penalised.params.presence_penalty = -1.0f;
  penalised.params.logprobs = 3;
  const SampleOutput got = serve(penalised);
  ReferenceForward reference(model_->config, model_->weights, cpu_);
  DenseKvCache cache = reference.new_cache();
  std::vector<int32_t> generated;
  std::vector<float> logits = reference.forward(cache, greedy.prompt).value();
  const size_t vocab = static_cast<size_t>(model_->config.vocab_size);
  std::vector<float> adjusted;
  ASSERT_EQ(got.logprobs.size(), got.token_ids.size());
  for (size_t i = 0; i < got.token_ids.size(); ++i) {
    const float* row = logits.data() + logits.size() - vocab;
    sampling::adjust_logits(row, static_cast<int>(vocab), penalised.params, greedy.prompt, generated, &adjusted);
    const int32_t expected = static_cast<int32_t>(std::max_element(adjusted.begin(), adjusted.end()) - adjusted.begin());
    ASSERT_EQ(got.token_ids[i], expected) << i;
    const sampling::TokenLogprob want = sampling::token_logprob(row, static_cast<int>(vocab), expected, 3);
    EXPECT_NEAR(got.logprobs[i].logprob, want.logprob, 1e-4) << i;
    ASSERT_EQ(got.logprobs[i].top.size(), 3u);
    EXPECT_EQ(got.logprobs[i].top[0].first, want.top[0].first) << i;
    generated.push_back(expected);
    logits = reference.forward(cache, {expected}).value();
  }
  EXPECT_NE(got.token_ids, tokens);  // the penalties changed something
}

}  // namespace
}  // namespace moert::engine
