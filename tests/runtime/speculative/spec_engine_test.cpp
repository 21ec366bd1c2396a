// Speculative decoding through the real engine and the real paged forward: greedy outputs
// equal plain decoding (n-gram, draft model, self-draft, fixed and adaptive depth, chunked
// prefill, preemption), the verify pass equals one-token decode steps bit for bit, the
// draft proposer's drafts are its model's greedy continuation after any rollback, sampled
// outputs do not depend on the batch, and the measured tokens per pass of a draft with a
// known acceptance rate match (1 - alpha^(K+1)) / (1 - alpha).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/generator.h"
#include "runtime/model/reference_forward.h"
#include "runtime/speculative/draft_model_proposer.h"
#include "tests/runtime/engine/serve_all.h"
#include "tests/runtime/speculative/engine_spec_support.h"
#include "tests/support/test_support.h"

namespace moert::spec {
namespace {

using engine::EngineConfig;
using engine::EngineStats;
using engine::Request;
using engine::RequestOutput;
using testing::homogeneity_p_value;
using testing::mixed_requests;

std::map<std::string, RequestOutput> run_all(const TransformerForward& model, const EngineConfig& config,
                                             const std::vector<Request>& requests, Proposer* proposer,
                                             EngineStats* stats = nullptr) {
  return testing::serve_all(model, config, requests, proposer, stats);
}

std::map<std::string, std::vector<int32_t>> tokens_of(const std::map<std::string, RequestOutput>& outputs) {
  std::map<std::string, std::vector<int32_t>> tokens;
  for (const auto& [id, output] : outputs) tokens[id] = output.outputs.at(0).token_ids;
  return tokens;
}

ModelShapeOverrides small_shape(int num_layers) {
  ModelShapeOverrides shape;
  shape.vocab_size = 512;
  shape.hidden_size = 64;
  shape.num_layers = num_layers;
  shape.moe_intermediate_size = 64;
  shape.head_dim = 16;
  return shape;
}

// A draft-friendly 4-layer target and its same-seed 1-layer truncation (a faithful but
// imperfect draft: most, not all, of its greedy tokens agree).
class SpecOnGeneratedModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("spec-models");
    ThreadPool pool(2);
    const WeightShaping shaping = testing::draft_friendly_shaping();
    for (int layers : {4, 1}) {
      const ModelConfig config = preset_model_config(find_architecture("qwen3_moe"), "tiny", small_shape(layers)).value();
      const std::string dir = *scratch_ / ("layers" + std::to_string(layers));
      ASSERT_TRUE(write_random_checkpoint(config, 17, dir, 1 << 30, pool, shaping).is_ok());
      (layers == 4 ? target_ : draft_) = load_model(dir).value().release();
    }
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
    delete scratch_;
  }
  void SetUp() override {
    target_forward_ = std::make_unique<TransformerForward>(target_->config, target_->weights, cpu_);
    draft_forward_ = std::make_unique<TransformerForward>(draft_->config, draft_->weights, cpu_);
  }
  EngineConfig config(int num_draft, bool adaptive = false) const {
    return testing::spec_engine_config(64, num_draft, adaptive);
  }
  DraftModelConfig draft_config(int blocks = 512) const { return {blocks, 16, true}; }

  static testing::ScratchDir* scratch_;
  static LoadedModel* target_;
  static LoadedModel* draft_;
  ThreadPool pool_{2};
  backend::CpuBackend cpu_{pool_};
  std::unique_ptr<TransformerForward> target_forward_, draft_forward_;
};
testing::ScratchDir* SpecOnGeneratedModels::scratch_ = nullptr;
LoadedModel* SpecOnGeneratedModels::target_ = nullptr;
LoadedModel* SpecOnGeneratedModels::draft_ = nullptr;

TEST_F(SpecOnGeneratedModels, GreedyDraftModelOutputsEqualPlainDecoding) {
  const std::vector<Request> requests = mixed_requests(20, 512, 3, 60, 40);
  const auto plain = tokens_of(run_all(*target_forward_, config(4), requests, nullptr));
  for (int k : {1, 3, 8}) {
    DraftModelProposer proposer(*draft_forward_, draft_config());
    EngineStats stats;
    EXPECT_EQ(tokens_of(run_all(*target_forward_, config(k), requests, &proposer, &stats)), plain) << "K = " << k;
    // An imperfect draft: some drafts are rejected, many accepted.
    EXPECT_GT(stats.acceptance.num_passes(), 0) << "K = " << k;
    EXPECT_GT(stats.acceptance.acceptance_rate_at(0), 0.3) << "K = " << k;
    EXPECT_LT(stats.acceptance.acceptance_rate(), 1.0) << "K = " << k;
    // Every finished sequence released its draft blocks.
    EXPECT_EQ(proposer.kv().num_used_blocks(), 0) << "K = " << k;
  }
}

TEST_F(SpecOnGeneratedModels, GreedyNgramAndSelfDraftOutputsEqualPlainDecoding) {
  const std::vector<Request> requests = mixed_requests(20, 512, 4, 60, 40);
  const auto plain = tokens_of(run_all(*target_forward_, config(4), requests, nullptr));
  NgramProposer ngram({2, 4, 5});
  EngineStats ngram_stats;
  EXPECT_EQ(tokens_of(run_all(*target_forward_, config(5), requests, &ngram, &ngram_stats)), plain);
  EXPECT_GT(ngram_stats.acceptance.num_passes(), 0);
  // The target as its own draft: every draft is accepted, every pass ends with a bonus.
  DraftModelProposer self(*target_forward_, draft_config());
  EngineStats self_stats;
  EXPECT_EQ(tokens_of(run_all(*target_forward_, config(3), requests, &self, &self_stats)), plain);
  EXPECT_GT(self_stats.acceptance.num_passes(), 0);
  EXPECT_EQ(self_stats.acceptance.num_accepted_tokens(), self_stats.acceptance.num_draft_tokens());
}

TEST_F(SpecOnGeneratedModels, AdaptiveDepthAndPreemptionKeepGreedyOutputs) {
  const std::vector<Request> requests = mixed_requests(16, 512, 5, 60, 40);
  const auto plain = tokens_of(run_all(*target_forward_, config(4), requests, nullptr));
  DraftModelProposer adaptive(*draft_forward_, draft_config());
  EngineStats stats;
  EXPECT_EQ(tokens_of(run_all(*target_forward_, config(6, true), requests, &adaptive, &stats)), plain);
  EXPECT_GT(stats.acceptance.num_passes(), 0);
  // A target pool of 8 usable blocks (128 tokens) and a draft pool of 5 force preemptions
  // and drafts that do not fit; outputs stay the same.
  EngineConfig tight = config(4);
  tight.num_kv_blocks = 9;
  DraftModelProposer small_pool(*draft_forward_, draft_config(6));
  EngineStats tight_stats;
  EXPECT_EQ(tokens_of(run_all(*target_forward_, tight, requests, &small_pool, &tight_stats)), plain);
  EXPECT_GT(tight_stats.preemptions, 0);
  EXPECT_GT(tight_stats.acceptance.num_passes(), 0);
  EXPECT_EQ(small_pool.kv().num_used_blocks(), 0);
}

// Stop tokens inside an accepted run of drafts end the request there, n > 1 greedy samples
// and tight pools (preemption, dropped drafts) on every pass: outputs equal plain decoding
// with the same stops, and every draft block is released at the end.
TEST_F(SpecOnGeneratedModels, StopTokensMidPassForksAndTightPoolsMatchPlainDecoding) {
  std::vector<Request> requests = mixed_requests(18, 512, 9, 60, 40);
  const auto unstopped = tokens_of(run_all(*target_forward_, config(4), requests, nullptr));
  for (size_t r = 0; r < requests.size(); ++r) {
    const std::vector<int32_t>& out = unstopped.at(requests[r].id);
    if (r % 2 == 0 && out.size() > 4) requests[r].params.stop_token_ids = {out[out.size() / 2]};  // stops mid-output
    if (r % 5 == 1) requests[r].params.n = 3;  // greedy forks: three identical samples
  }
  EngineConfig tight = config(6);
  tight.num_kv_blocks = 12;
  const auto plain = run_all(*target_forward_, tight, requests, nullptr);
  for (int k : {2, 6}) {
    tight.spec.max_num_draft = k;
    DraftModelProposer proposer(*draft_forward_, draft_config(8));
    EngineStats stats;
    const auto got = run_all(*target_forward_, tight, requests, &proposer, &stats);
    ASSERT_EQ(got.size(), plain.size());
    for (const auto& [id, output] : plain) {
      ASSERT_EQ(got.at(id).outputs.size(), output.outputs.size()) << id;
      for (size_t s = 0; s < output.outputs.size(); ++s) {
        EXPECT_EQ(got.at(id).outputs[s].token_ids, output.outputs[s].token_ids) << id << " sample " << s << ", K " << k;
        EXPECT_EQ(got.at(id).outputs[s].finish_reason, output.outputs[s].finish_reason) << id << ", K " << k;
      }
    }
    EXPECT_GT(stats.acceptance.num_accepted_tokens(), 0);
    EXPECT_EQ(proposer.kv().num_used_blocks(), 0);
  }
  int stopped = 0;
  for (const auto& [id, output] : plain) stopped += output.outputs[0].finish_reason == "stop" ? 1 : 0;
  EXPECT_GT(stopped, 3);
}

TEST_F(SpecOnGeneratedModels, SampledOutputsDoNotDependOnTheBatch) {
  std::vector<Request> requests = mixed_requests(12, 512, 6, 60, 40, /*sampled_every_fourth=*/true);
  requests[3].params.n = 2;
  DraftModelProposer together_proposer(*draft_forward_, draft_config());
  const auto together = run_all(*target_forward_, config(4), requests, &together_proposer);
  for (size_t r : {3u, 7u, 11u}) {
    DraftModelProposer alone_proposer(*draft_forward_, draft_config());
    const auto alone = run_all(*target_forward_, config(4), {requests[r]}, &alone_proposer);
    const RequestOutput& a = alone.at(requests[r].id);
    const RequestOutput& t = together.at(requests[r].id);
    ASSERT_EQ(a.outputs.size(), t.outputs.size());
    for (size_t s = 0; s < a.outputs.size(); ++s) EXPECT_EQ(a.outputs[s].token_ids, t.outputs[s].token_ids) << requests[r].id;
    EXPECT_EQ(static_cast<int>(a.outputs[0].token_ids.size()), requests[r].params.max_tokens);
  }
}

// A dense draft: the 1-layer truncation of a GLM-4.5-style target whose layer 0 is a
// dense MLP (first_k_dense_replace = 1) has no experts at all.
TEST(SpecDenseDraft, GreedyOutputsEqualPlainDecoding) {
  testing::ScratchDir scratch("spec-dense-draft");
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  WeightShaping shaping;
  shaping.faithful_layers = 1;
  shaping.late_layer_scale = 0.3f;
  std::unique_ptr<LoadedModel> models[2];
  for (int layers : {3, 1}) {
    ModelConfig config = preset_model_config(find_architecture("glm4_moe"), "tiny", small_shape(layers)).value();
    config.layer_is_moe[0] = false;  // as the target's: same seed, same tensors, a faithful draft
    const std::string dir = scratch / ("layers" + std::to_string(layers));
    ASSERT_TRUE(write_random_checkpoint(config, 23, dir, 1 << 30, pool, shaping).is_ok());
    models[layers == 3 ? 0 : 1] = load_model(dir).value();
  }
  ASSERT_FALSE(models[1]->config.layer_is_moe[0]);  // the draft has no MoE layer
  TransformerForward target(models[0]->config, models[0]->weights, cpu);
  TransformerForward draft(models[1]->config, models[1]->weights, cpu);
  const std::vector<Request> requests = mixed_requests(12, 512, 8, 60, 40);
  EngineConfig config;
  config.num_kv_blocks = 256;
  config.scheduler.max_batched_tokens = 64;
  config.spec.max_num_draft = 3;
  const auto plain = tokens_of(run_all(target, config, requests, nullptr));
  DraftModelProposer proposer(draft, {256, 16, true});
  EngineStats stats;
  EXPECT_EQ(tokens_of(run_all(target, config, requests, &proposer, &stats)), plain);
  EXPECT_GT(stats.acceptance.num_accepted_tokens(), 0);
}

// Sampled requests through the whole engine (draft q from the 1-layer model, p from the
// target, top-k and temperature on both): the tokens at output positions 1 and 2 (decided
// by a verify pass) have the same distribution as plain sampling's, over 3000 seeds.
TEST_F(SpecOnGeneratedModels, SampledTokensHaveThePlainDistribution) {
  std::vector<Request> requests;
  for (int seed = 0; seed < 3000; ++seed) {
    Request request;
    request.id = "s" + std::to_string(seed);
    request.prompt = {17, 230, 41, 9, 311};
    request.params.temperature = 1.3f;
    request.params.top_k = 4;
    request.params.max_tokens = 3;  // token 0 sampled plainly, tokens 1-2 by one pass of K = 1 + bonus
    request.params.seed = seed;
    requests.push_back(std::move(request));
  }
  EngineConfig c = config(2);
  c.scheduler.max_seqs = 512;
  c.scheduler.max_batched_tokens = 4096;
  c.num_kv_blocks = 2048;
  const auto plain = run_all(*target_forward_, c, requests, nullptr);
  DraftModelProposer proposer(*draft_forward_, draft_config(2048));
  EngineStats stats;
  const auto speculative = run_all(*target_forward_, c, requests, &proposer, &stats);
  EXPECT_EQ(stats.acceptance.num_passes(), 3000);
  EXPECT_GT(stats.acceptance.num_accepted_tokens(), 300);   // the draft is often right...
  EXPECT_LT(stats.acceptance.num_accepted_tokens(), 2900);  // ...and often wrong
  for (int position : {1, 2}) {
    std::map<int32_t, int64_t> plain_counts, spec_counts;
    for (const auto& [id, output] : plain) ++plain_counts[output.outputs[0].token_ids.at(static_cast<size_t>(position))];
    for (const auto& [id, output] : speculative) {
      ++spec_counts[output.outputs[0].token_ids.at(static_cast<size_t>(position))];
    }
    EXPECT_GT(plain_counts.size(), 3u);
    EXPECT_GT(homogeneity_p_value(plain_counts, spec_counts), 1e-3) << "position " << position;
  }
  // A negative control: the draft model's own samples differ from the target's.
  const auto draft_only = run_all(*draft_forward_, c, requests, nullptr);
  std::map<int32_t, int64_t> plain_counts, draft_counts;
  for (const auto& [id, output] : plain) ++plain_counts[output.outputs[0].token_ids.at(1)];
  for (const auto& [id, output] : draft_only) ++draft_counts[output.outputs[0].token_ids.at(1)];
  EXPECT_LT(homogeneity_p_value(plain_counts, draft_counts), 1e-6);
}

// The verify pass of K drafts computes every row exactly as K + 1 one-token decode steps
// do (same bits), also when the chunk shares its batch with another sequence's prefill.
TEST_F(SpecOnGeneratedModels, VerifyPassEqualsOneTokenStepsBitwise) {
  const int vocab = target_->config.vocab_size;
  const std::vector<int32_t> prompt = {5, 77, 300, 12, 9, 41, 250, 3, 18, 401, 66, 90, 13, 7, 200, 31, 8, 2, 100};
  const std::vector<int32_t> next = {11, 420, 87, 5, 5, 16, 333, 60};  // "drafts" (any tokens)
  const int64_t length = static_cast<int64_t>(prompt.size());
  const int num_rows = static_cast<int>(next.size()) + 1;
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), next.begin(), next.end());
  // A runner chunk of `tokens` at `start` for `seq`, with `logit_rows` logits.
  auto chunk = [](const attention::KvCacheManager& kv, attention::SeqId seq, int64_t start,
                  std::vector<int32_t> tokens, int logit_rows) {
    runner::SequenceChunk c;
    c.start = start;
    c.block_tables = runner::chunk_block_tables(kv, seq, start + static_cast<int64_t>(tokens.size()));
    c.tokens = std::move(tokens);
    c.num_logit_rows = logit_rows;
    return c;
  };
  auto new_runner = [&] {
    return std::move(runner::PagedModelRunner::create(*target_forward_, {64, 16, DType::kF32})).value();
  };
  auto prefill = [&](attention::KvCacheManager& kv, runner::ModelRunner& runner, attention::SeqId seq) {
    kv.add_sequence(seq, prompt);
    ASSERT_TRUE(kv.reserve(seq, 0, static_cast<int64_t>(all.size())));
    ASSERT_TRUE(runner.run({{}, {chunk(kv, seq, 0, {prompt.begin(), prompt.end() - 1}, 0)}}).is_ok());
  };
  // One token at a time.
  attention::KvCacheManager kv_steps(64, 16, false);
  const std::unique_ptr<runner::PagedModelRunner> runner_steps = new_runner();
  prefill(kv_steps, *runner_steps, 1);
  std::vector<float> stepwise;
  for (int i = 0; i < num_rows; ++i) {
    const int64_t position = length - 1 + i;
    Result<std::vector<float>> row =
        runner_steps->run({{}, {chunk(kv_steps, 1, position, {all[static_cast<size_t>(position)]}, 1)}});
    ASSERT_TRUE(row.is_ok());
    stepwise.insert(stepwise.end(), row->begin(), row->end());
  }
  // One verify chunk of K + 1 rows, after another sequence's 30-token prefill chunk.
  attention::KvCacheManager kv_pass(64, 16, false);
  const std::unique_ptr<runner::PagedModelRunner> runner_pass = new_runner();
  prefill(kv_pass, *runner_pass, 1);
  std::vector<int32_t> other(30);
  for (int i = 0; i < 30; ++i) other[static_cast<size_t>(i)] = (i * 53 + 1) % vocab;
  kv_pass.add_sequence(2, other);
  ASSERT_TRUE(kv_pass.reserve(2, 0, 30));
  Result<std::vector<float>> pass = runner_pass->run(
      {{}, {chunk(kv_pass, 2, 0, other, 1), chunk(kv_pass, 1, length - 1, {all.begin() + length - 1, all.end()}, num_rows)}});
  ASSERT_TRUE(pass.is_ok());
  ASSERT_EQ(pass->size(), static_cast<size_t>(num_rows + 1) * vocab);
  ASSERT_EQ(stepwise.size(), static_cast<size_t>(num_rows) * vocab);
  EXPECT_EQ(std::memcmp(pass->data() + vocab, stepwise.data(), stepwise.size() * sizeof(float)), 0);
  double norm = 0;
  for (float x : stepwise) norm += static_cast<double>(x) * x;
  EXPECT_GT(norm, 0.0);  // not all-zero data
}

// The draft proposer's greedy drafts are its model's greedy continuation, also after the
// history diverged from what it drafted (rollback of the draft cache).
TEST_F(SpecOnGeneratedModels, DraftProposerDraftsTheDraftModelsGreedyContinuation) {
  ReferenceForward reference(draft_->config, draft_->weights, cpu_);
  DraftModelProposer proposer(*draft_forward_, draft_config(64));
  sampling::SamplingParams greedy;
  std::vector<int32_t> history = {4, 8, 15, 16, 23, 42, 108, 7, 99, 250, 1, 2, 3, 4, 5, 6, 7};
  for (int round = 0; round < 6; ++round) {
    const int k = 2 + round % 4;
    DraftRequest request;
    request.seq = 9;
    request.tokens = history;
    request.num_draft = k;
    request.params = &greedy;
    Result<std::vector<Draft>> drafts = proposer.propose(std::span<const DraftRequest>(&request, 1));
    ASSERT_TRUE(drafts.is_ok());
    Result<GreedyOutput> expected = greedy_generate(reference, history, k);
    ASSERT_TRUE(expected.is_ok());
    EXPECT_EQ((*drafts)[0].tokens, expected->gen_tokens) << "round " << round;
    EXPECT_TRUE((*drafts)[0].probs.empty());
    // The "target" accepts round % 3 drafts, then emits a token of its own.
    const int accepted = std::min(round % 3, k);
    history.insert(history.end(), (*drafts)[0].tokens.begin(), (*drafts)[0].tokens.begin() + accepted);
    history.push_back((history.back() * 31 + 5) % 512);
  }
  EXPECT_GT(proposer.kv().num_used_blocks(), 0);
  proposer.release(9);
  EXPECT_EQ(proposer.kv().num_used_blocks(), 0);
}

// A proposer whose draft for output position j is the target's greedy token with
// probability alpha (decided by a hash of (request, position), independently per position)
// and a wrong token otherwise: greedy verification accepts each draft with probability
// alpha exactly, so a pass of K drafts emits (1 - alpha^(K+1)) / (1 - alpha) tokens on
// average.
class OracleProposer : public Proposer {
 public:
  OracleProposer(const std::map<std::vector<int32_t>, std::vector<int32_t>>& continuation, double alpha, int vocab)
      : continuation_(continuation), alpha_(alpha), vocab_(vocab) {}
  Result<std::vector<Draft>> propose(std::span<const DraftRequest> requests) override {
    std::vector<Draft> drafts(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const DraftRequest& r = requests[i];
      // The prompt is the known tokens before the first output position.
      const size_t prompt_len = r.tokens.size() - r.first_position;
      const std::vector<int32_t> prompt(r.tokens.begin(), r.tokens.begin() + static_cast<std::ptrdiff_t>(prompt_len));
      const std::vector<int32_t>& truth = continuation_.at(prompt);
      for (int d = 0; d < r.num_draft; ++d) {
        const size_t position = r.first_position + static_cast<size_t>(d);
        const int32_t right = truth.at(position);
        const double u = sampling::counter_uniform(prompt_len * 7919 + static_cast<uint64_t>(prompt[0]), 1, position);
        drafts[i].tokens.push_back(u < alpha_ ? right : (right + 1) % vocab_);
      }
      passes_.push_back(r.num_draft);
    }
    return drafts;
  }
  void release(ProposalSeqId) override {}
  const char* name() const override { return "oracle"; }
  const std::vector<int>& passes() const { return passes_; }

 private:
  const std::map<std::vector<int32_t>, std::vector<int32_t>>& continuation_;
  double alpha_;
  int vocab_;
  std::vector<int> passes_;  // K of every draft handed out
};

TEST_F(SpecOnGeneratedModels, TokensPerPassMatchLeviathanFormulaForKnownAlpha) {
  // 48 requests of 200 greedy tokens each; their plain outputs are the oracle's truth.
  std::vector<Request> requests;
  for (int r = 0; r < 48; ++r) {
    Request request;
    request.id = "o" + std::to_string(r);
    for (int i = 0; i < 6; ++i) request.prompt.push_back((r * 97 + i * 13 + 1) % 512);
    request.params.max_tokens = 200;
    requests.push_back(std::move(request));
  }
  EngineConfig c = config(8);
  c.scheduler.max_seqs = 48;
  c.scheduler.max_batched_tokens = 1024;
  c.num_kv_blocks = 1024;  // 48 x 208 tokens fit: no draft is dropped for want of blocks
  std::map<std::vector<int32_t>, std::vector<int32_t>> truth;
  for (const auto& [id, output] : run_all(*target_forward_, c, requests, nullptr)) {
    truth[requests[static_cast<size_t>(std::stoi(id.substr(1)))].prompt] = output.outputs[0].token_ids;
  }
  for (double alpha : {0.6, 0.85}) {
    for (int k : {2, 4, 8}) {
      OracleProposer oracle(truth, alpha, 512);
      c.spec.max_num_draft = k;
      EngineStats stats;
      const auto outputs = run_all(*target_forward_, c, requests, &oracle, &stats);
      for (const Request& request : requests) EXPECT_EQ(outputs.at(request.id).outputs[0].token_ids, truth.at(request.prompt));
      // Passes near the end of a request have fewer drafts; the expectation follows each K.
      double expected = 0.0;
      for (int pass_k : oracle.passes()) expected += (1.0 - std::pow(alpha, pass_k + 1)) / (1.0 - alpha);
      expected /= static_cast<double>(oracle.passes().size());
      const double measured = stats.acceptance.mean_tokens_per_pass();
      EXPECT_EQ(stats.acceptance.num_passes(), static_cast<int64_t>(oracle.passes().size()));
      EXPECT_NEAR(measured / expected, 1.0, 0.05) << "alpha " << alpha << " K " << k << ": measured " << measured
                                                  << ", expected " << expected;
      std::printf("alpha %.2f K %d: %lld passes, tokens per pass measured %.3f, formula %.3f (full-K formula %.3f)\n",
                  alpha, k, static_cast<long long>(stats.acceptance.num_passes()), measured, expected,
                  (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha));
    }
  }
}

}  // namespace
}  // namespace moert::spec
