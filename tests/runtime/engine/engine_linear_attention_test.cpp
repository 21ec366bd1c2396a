// The paged engine on models with Gated DeltaNet layers (Qwen3.5-MoE and Qwen3-Next of other
// shapes than the shared ones; docs/gated-deltanet.md): greedy outputs equal the reference
// forward under chunked prefill and preemption by recompute, prefix hits resume only from a
// kept state, n > 1 samples fork the state, speculative verifies roll it back, and the KV
// report counts only the full-attention layers' rows, the state apart.
#include <gtest/gtest.h>

#include <map>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/generator.h"
#include "runtime/model/kv_cache_groups.h"
#include "runtime/model/reference_forward.h"
#include "runtime/speculative/draft_model_proposer.h"
#include "runtime/speculative/proposer.h"
#include "tests/runtime/engine/serve_all.h"
#include "tests/support/test_support.h"

namespace moert::engine {
namespace {

// A prompt of `length` tokens from a seed; a `period` > 0 repeats its first `period` tokens
// (prompt-lookup drafting then finds matches).
std::vector<int32_t> prompt_of(int length, int vocab, uint64_t seed, int period = 0) {
  std::vector<int32_t> prompt;
  uint64_t state = seed * 2654435761u + 7;
  for (int i = 0; i < length; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    prompt.push_back(period > 0 && i >= period ? prompt[static_cast<size_t>(i - period)]
                                               : static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab)));
  }
  return prompt;
}

Request greedy(const std::string& id, std::vector<int32_t> prompt, int max_tokens, int n = 1) {
  Request request;
  request.id = id;
  request.prompt = std::move(prompt);
  request.params.max_tokens = max_tokens;
  request.params.n = n;
  return request;
}

class LinearAttentionEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    scratch_ = std::make_unique<testing::ScratchDir>("engine-linear-" + GetParam());
    ModelShapeOverrides shape;  // 5 layers: linear, linear, linear, full, full
    shape.vocab_size = 300;
    shape.hidden_size = 96;
    shape.num_layers = 5;
    shape.num_heads = 4;
    shape.num_kv_heads = 2;
    shape.head_dim = 32;
    shape.num_experts = 6;
    shape.top_k = 2;
    shape.moe_intermediate_size = 48;
    const ModelConfig config = preset_model_config(find_architecture(GetParam()), "tiny", shape).value();
    ASSERT_EQ(config.layer_is_linear_attention, (std::vector<bool>{true, true, true, false, false}));
    ASSERT_TRUE(write_random_checkpoint(config, 41, scratch_->path(), 1 << 30, pool_).is_ok());
    model_ = load_model(scratch_->path()).value();
    forward_ = std::make_unique<TransformerForward>(model_->config, model_->weights, cpu_);
    reference_ = std::make_unique<ReferenceForward>(model_->config, model_->weights, cpu_);
  }

  std::vector<int32_t> reference_tokens(const std::vector<int32_t>& prompt, int max_tokens) const {
    return greedy_generate(*reference_, prompt, max_tokens).value().gen_tokens;
  }
  // Every request's first output against the reference forward.
  void expect_reference_outputs(const std::map<std::string, RequestOutput>& outputs,
                                const std::vector<Request>& requests, const std::string& what) const {
    ASSERT_EQ(outputs.size(), requests.size()) << what;
    for (const Request& request : requests) {
      const std::vector<int32_t> expected = reference_tokens(request.prompt, request.params.max_tokens);
      for (const SampleOutput& sample : outputs.at(request.id).outputs) {
        EXPECT_EQ(sample.token_ids, expected) << what << ": request " << request.id;
      }
    }
  }

  std::unique_ptr<testing::ScratchDir> scratch_;
  ThreadPool pool_{2};
  backend::CpuBackend cpu_{pool_};
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<TransformerForward> forward_;
  std::unique_ptr<ReferenceForward> reference_;
};

TEST_P(LinearAttentionEngine, ChunkedPrefillAndPreemptionEqualTheReferenceForward) {
  std::vector<Request> requests;
  for (int r = 0; r < 8; ++r) requests.push_back(greedy("r" + std::to_string(r), prompt_of(5 + 11 * r, 300, r), 6 + r));
  for (const int blocks : {1024, 18}) {
    for (const bool caching : {true, false}) {
      EngineConfig config;
      config.block_size = 8;
      config.num_kv_blocks = blocks;
      config.enable_prefix_caching = caching;
      config.scheduler.max_batched_tokens = 23;  // prompts split into chunks across steps
      EngineStats stats;
      const auto outputs = testing::serve_all(*forward_, config, requests, nullptr, &stats);
      const std::string what = std::to_string(blocks) + " blocks, caching " + (caching ? "on" : "off");
      expect_reference_outputs(outputs, requests, what);
      if (blocks == 18) EXPECT_GT(stats.preemptions, 0) << what;
    }
  }
}

// Requests sharing a 32-token prefix (four 8-token blocks): the first computes it in chunks
// ending on block boundaries, the others wait for it and resume from the state kept there.
// Two samples of one greedy request fork one state.
TEST_P(LinearAttentionEngine, PrefixHitsResumeFromAKeptStateAndSamplesForkIt) {
  const std::vector<int32_t> shared = prompt_of(32, 300, 99);
  std::vector<Request> requests;
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> prompt = shared;
    const std::vector<int32_t> tail = prompt_of(3 + 4 * r, 300, 100 + r);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    requests.push_back(greedy("p" + std::to_string(r), prompt, 7, r == 3 ? 2 : 1));
  }
  requests.push_back(greedy("again", requests[0].prompt, 7));
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = 256;
  config.scheduler.max_batched_tokens = 64;
  EngineStats stats;
  const auto outputs = testing::serve_all(*forward_, config, requests, nullptr, &stats);
  expect_reference_outputs(outputs, requests, "prefix sharing");
  ASSERT_EQ(outputs.at("p3").outputs.size(), 2u);
  // Every later request resumed from a kept state at a block boundary >= the shared prefix.
  int64_t cached = 0;
  for (int r = 1; r < 4; ++r) {
    const int64_t hit = outputs.at("p" + std::to_string(r)).cached_prompt_tokens;
    EXPECT_EQ(hit % 8, 0);
    EXPECT_GE(hit, 32) << "request p" << r;
    cached += hit;
  }
  EXPECT_GE(stats.prefix_hit_tokens, cached);
}

// Prompt-lookup drafts on repetitive prompts: some accepted, some rejected; each rejection
// restores the state after the last accepted token, so the outputs are plain greedy decoding's.
TEST_P(LinearAttentionEngine, SpeculativeVerifiesRollTheStateBack) {
  std::vector<Request> requests;
  for (int r = 0; r < 6; ++r) requests.push_back(greedy("s" + std::to_string(r), prompt_of(24 + 5 * r, 300, r, 6), 24));
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = 512;
  config.spec.max_num_draft = 4;
  config.spec.probe_num_draft = 4;
  spec::NgramProposer ngram({1, 3, 4});
  EngineStats stats;
  const auto outputs = testing::serve_all(*forward_, config, requests, &ngram, &stats);
  expect_reference_outputs(outputs, requests, "ngram drafts");
  EXPECT_GT(stats.acceptance.num_passes(), 0);
  EXPECT_GT(stats.acceptance.num_accepted_tokens(), 0);
  EXPECT_LT(stats.acceptance.num_accepted_tokens(), stats.acceptance.num_draft_tokens()) << "no draft was rejected";
}

// A full-attention draft model (a generated Qwen3-MoE of the same vocabulary) drafting for the
// linear-attention target: its drafts are mostly rejected (unrelated weights), each rejection
// rolls the target's state back, and the outputs are plain greedy decoding's.
TEST_P(LinearAttentionEngine, DraftModelDraftsForTheTarget) {
  testing::ScratchDir draft_dir("engine-linear-draft");
  ModelShapeOverrides shape;
  shape.vocab_size = 300;
  shape.hidden_size = 64;
  shape.num_layers = 2;
  shape.moe_intermediate_size = 32;
  const ModelConfig draft_config = preset_model_config(find_architecture("qwen3_moe"), "tiny", shape).value();
  ASSERT_TRUE(write_random_checkpoint(draft_config, 5, draft_dir.path(), 1 << 30, pool_).is_ok());
  const std::unique_ptr<LoadedModel> draft = load_model(draft_dir.path()).value();
  const TransformerForward draft_forward(draft->config, draft->weights, cpu_);
  spec::DraftModelProposer proposer(draft_forward, {256, 8, true});
  std::vector<Request> requests;
  for (int r = 0; r < 4; ++r) requests.push_back(greedy("d" + std::to_string(r), prompt_of(9 + 7 * r, 300, 50 + r), 12));
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = 512;
  config.spec.max_num_draft = 3;
  config.spec.probe_num_draft = 3;
  EngineStats stats;
  const auto outputs = testing::serve_all(*forward_, config, requests, &proposer, &stats);
  expect_reference_outputs(outputs, requests, "draft model");
  EXPECT_GT(stats.acceptance.num_passes(), 0);
  EXPECT_LT(stats.acceptance.num_accepted_tokens(), stats.acceptance.num_draft_tokens());
}

// The paged cache holds the two full-attention layers' K/V only; the recurrent state is its own
// per-sequence slot (F32 at every KV dtype).
TEST_P(LinearAttentionEngine, KvCacheHoldsOnlyTheFullAttentionLayers) {
  const ModelConfig& c = model_->config;
  const std::vector<attention::KvCacheSpec> groups = kv_cache_groups(c, DType::kBF16).value();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].layers, (std::vector<int>{3, 4}));
  EXPECT_EQ(runner::kv_cache_bytes_per_token(c, DType::kBF16).value(), 2 * 2 * c.num_kv_heads * c.head_dim * 2);
  const runner::RecurrentStateLayout layout = runner::recurrent_state_layout(c);
  EXPECT_EQ(layout.layers, (std::vector<int>{0, 1, 2}));
  const attention::GatedDeltaShape shape = c.linear_attention.shape();
  EXPECT_EQ(layout.bytes_per_slot(), 3 * (shape.conv_state_size() + shape.recurrent_state_size()) * 4);
}

INSTANTIATE_TEST_SUITE_P(Architectures, LinearAttentionEngine, ::testing::Values("qwen3_5_moe", "qwen3_next"));

}  // namespace
}  // namespace moert::engine
