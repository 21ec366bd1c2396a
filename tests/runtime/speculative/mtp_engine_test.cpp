// The DeepSeek MTP proposer (docs/mtp.md) through the real engine and paged forward, on a
// generated DeepSeek-V3 model whose MTP layer is faithful (built from layer 0): greedy
// outputs equal plain decoding (K = 1..3 and adaptive, chunked prefill, preemption, prefix
// caching, stops, n > 1), the proposer's first draft is the teacher-forced MTP row's argmax
// after any rollback, and sampled tokens keep the plain distribution.
#include <gtest/gtest.h>

#include <map>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/generator.h"
#include "runtime/model/reference_forward.h"
#include "runtime/speculative/mtp_proposer.h"
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

std::map<std::string, std::vector<std::vector<int32_t>>> tokens_of(const std::map<std::string, RequestOutput>& outputs) {
  std::map<std::string, std::vector<std::vector<int32_t>>> tokens;
  for (const auto& [id, output] : outputs) {
    for (const auto& sample : output.outputs) tokens[id].push_back(sample.token_ids);
  }
  return tokens;
}

// A 3-layer DeepSeek-V3 model (layer 0 dense, later layers damped) with a faithful MTP layer.
class MtpOnGeneratedModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("mtp-engine");
    ThreadPool pool(2);
    const WeightShaping shaping = testing::draft_friendly_shaping();
    ModelShapeOverrides shape;
    shape.vocab_size = 512;
    shape.hidden_size = 64;
    shape.num_layers = 3;
    shape.moe_intermediate_size = 32;
    shape.head_dim = 16;
    shape.num_mtp_layers = 1;
    const ModelConfig config = preset_model_config(find_architecture("deepseek_v3"), "tiny", shape).value();
    const std::string dir = *scratch_ / "m";
    ASSERT_TRUE(write_random_checkpoint(config, 31, dir, 1 << 30, pool, shaping).is_ok());
    model_ = load_model(dir, LoadOptions{.mtp = true}).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete scratch_;
  }
  EngineConfig config(int num_draft, bool adaptive = false) const {
    return testing::spec_engine_config(48, num_draft, adaptive);
  }

  // The target's final hidden states [L, D] at every position of `sequence` (one prefill).
  std::vector<float> target_hidden_states(const std::vector<int32_t>& sequence) {
    ForwardBatch all;
    all.tokens = sequence;
    for (size_t t = 0; t < sequence.size(); ++t) all.positions.push_back(static_cast<int64_t>(t));
    all.logit_rows = {0};
    DenseKvCache cache(model_->config);
    std::vector<float> hidden;
    EXPECT_TRUE(target_.forward_with_hidden(all, cache, &hidden).is_ok());
    return hidden;
  }
  static inline const std::vector<int32_t> kSequence = {17, 230, 41, 9, 311, 5, 77, 140, 2, 99, 401, 12};

  static testing::ScratchDir* scratch_;
  static LoadedModel* model_;
  ThreadPool pool_{2};
  backend::CpuBackend cpu_{pool_};
  TransformerForward target_{model_->config, model_->weights, cpu_};
  TransformerForward mtp_{model_->config, model_->weights, cpu_};
};
testing::ScratchDir* MtpOnGeneratedModel::scratch_ = nullptr;
LoadedModel* MtpOnGeneratedModel::model_ = nullptr;

TEST_F(MtpOnGeneratedModel, GreedyOutputsEqualPlainDecoding) {
  const std::vector<Request> requests = mixed_requests(16, 512, 5, 40, 30);
  const auto plain = tokens_of(testing::serve_all(target_, config(1), requests, nullptr));
  for (int k : {1, 2, 3}) {
    MtpProposer proposer(mtp_);
    EngineStats stats;
    EXPECT_EQ(tokens_of(testing::serve_all(target_, config(k), requests, &proposer, &stats)), plain) << "K " << k;
    EXPECT_GT(stats.acceptance.num_passes(), 0);
    EXPECT_GT(stats.acceptance.num_accepted_tokens(), 0) << "K " << k;  // the accept path runs too
    EXPECT_LT(stats.acceptance.num_accepted_tokens(), stats.acceptance.num_draft_tokens()) << "K " << k;
    std::printf("K = %d: acceptance %.3f, %.3f tokens per pass\n", k, stats.acceptance.acceptance_rate(),
                stats.acceptance.mean_tokens_per_pass());
  }
  MtpProposer adaptive(mtp_);
  EXPECT_EQ(tokens_of(testing::serve_all(target_, config(4, true), requests, &adaptive)), plain);
}

// A pool of 8 usable blocks forces preemptions; shared prompt prefixes hit the prefix cache
// (those sequences draft from rows that start after the hit); stops inside accepted
// drafts and n = 3 greedy forks. Outputs equal plain decoding's.
TEST_F(MtpOnGeneratedModel, PreemptionPrefixCachingStopsAndForksKeepGreedyOutputs) {
  std::vector<Request> requests = mixed_requests(14, 512, 9, 40, 30);
  for (size_t r = 1; r < requests.size(); r += 4) requests[r].prompt = requests[r - 1].prompt;  // prefix hits
  EngineConfig tight = config(3);
  tight.num_kv_blocks = 9;
  const auto unstopped = tokens_of(testing::serve_all(target_, tight, requests, nullptr));
  for (size_t r = 0; r < requests.size(); ++r) {
    const std::vector<int32_t>& out = unstopped.at(requests[r].id)[0];
    if (r % 2 == 0 && out.size() > 4) requests[r].params.stop_token_ids = {out[out.size() / 2]};
    if (r % 5 == 2) requests[r].params.n = 3;
  }
  EngineStats plain_stats;
  const auto plain = tokens_of(testing::serve_all(target_, tight, requests, nullptr, &plain_stats));
  MtpProposer proposer(mtp_);
  EngineStats stats;
  EXPECT_EQ(tokens_of(testing::serve_all(target_, tight, requests, &proposer, &stats)), plain);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.prefix_hit_tokens, 0);
  EXPECT_GT(stats.acceptance.num_accepted_tokens(), 0);
}

// The proposer's first draft is the argmax of teacher-forced MTP row L - 2 (docs/mtp.md §2),
// with g fed in pieces, asked twice for one length (row L - 2 recomputed, the chained rows of
// the first call dropped) and as the known tokens grow by several at once.
TEST_F(MtpOnGeneratedModel, FirstDraftIsTheTeacherForcedRowsArgmax) {
  const std::vector<int32_t>& sequence = kSequence;
  ReferenceForward reference(model_->config, model_->weights, cpu_);
  const std::vector<float> logits = mtp_teacher_forced_logits(reference, sequence).value();
  const std::vector<float> hidden = target_hidden_states(sequence);
  const int64_t dim = model_->config.hidden_size, vocab = model_->config.vocab_size;
  MtpProposer proposer(mtp_);
  proposer.observe_hidden(7, 0, std::span(sequence).first(5), hidden.data());
  proposer.observe_hidden(7, 5, std::span(sequence).subspan(5), hidden.data() + 5 * dim);
  sampling::SamplingParams greedy;
  for (int64_t length : {6, 6, 7, 11, 12}) {
    DraftRequest request;
    request.seq = 7;
    request.tokens = std::span(sequence).first(static_cast<size_t>(length));
    request.num_draft = 3;
    request.params = &greedy;
    const std::vector<Draft> drafts = proposer.propose(std::span(&request, 1)).value();
    ASSERT_EQ(drafts[0].tokens.size(), 3u) << length;
    EXPECT_EQ(drafts[0].tokens[0], argmax_lowest_index(logits.data() + (length - 2) * vocab, vocab)) << length;
  }
  // g fed with another token at position 9 (a rejected draft): no drafts until the right one comes.
  MtpProposer stale(mtp_);
  std::vector<int32_t> wrong = sequence;
  wrong[9] = 3;
  stale.observe_hidden(8, 0, wrong, hidden.data());
  DraftRequest request;
  request.seq = 8;
  request.tokens = std::span(sequence).first(11);
  request.num_draft = 2;
  request.params = &greedy;
  EXPECT_TRUE(stale.propose(std::span(&request, 1)).value()[0].tokens.empty());
  stale.observe_hidden(8, 9, std::span(sequence).subspan(9), hidden.data() + 9 * dim);
  const std::vector<Draft> fixed = stale.propose(std::span(&request, 1)).value();
  ASSERT_EQ(fixed[0].tokens.size(), 2u);
  EXPECT_EQ(fixed[0].tokens[0], argmax_lowest_index(logits.data() + 9 * vocab, vocab));
}

// g that starts at position 5 (a prefix-cache hit, a fork): the module's rows restart there,
// so the first draft is the argmax of row L - 2 of the module run over rows 5 .. L - 2 alone.
TEST_F(MtpOnGeneratedModel, MissingEarlyHiddenStatesRestartTheRowsWhereTheyBegin) {
  const std::vector<int32_t>& sequence = kSequence;
  const std::vector<float> hidden = target_hidden_states(sequence);
  const int64_t dim = model_->config.hidden_size, vocab = model_->config.vocab_size;
  MtpProposer proposer(mtp_);
  proposer.observe_hidden(3, 5, std::span(sequence).subspan(5), hidden.data() + 5 * dim);
  sampling::SamplingParams greedy;
  for (int64_t length : {9, 12}) {
    ForwardBatch rows;  // rows 5 .. L - 2: token t_{p+1} at position p
    for (int64_t p = 5; p <= length - 2; ++p) {
      rows.tokens.push_back(sequence[static_cast<size_t>(p + 1)]);
      rows.positions.push_back(p);
    }
    rows.logit_rows = {static_cast<int64_t>(rows.tokens.size()) - 1};
    DenseKvCache fresh(model_->config);
    const std::vector<float> logits = mtp_.mtp_forward(0, rows, host_ptr(hidden.data() + 5 * dim), fresh, nullptr).value();
    DraftRequest request;
    request.seq = 3;
    request.tokens = std::span(sequence).first(static_cast<size_t>(length));
    request.num_draft = 2;
    request.params = &greedy;
    const std::vector<Draft> drafts = proposer.propose(std::span(&request, 1)).value();
    ASSERT_EQ(drafts[0].tokens.size(), 2u) << length;
    EXPECT_EQ(drafts[0].tokens[0], argmax_lowest_index(logits.data(), vocab)) << length;
  }
}

// Sampled requests (temperature, top-k): the tokens at output positions 1 and 2 (decided by
// a verify pass of the MTP's draft) have plain sampling's distribution, over 3000 seeds.
TEST_F(MtpOnGeneratedModel, SampledTokensHaveThePlainDistribution) {
  std::vector<Request> requests;
  for (int seed = 0; seed < 3000; ++seed) {
    Request request;
    request.id = "s" + std::to_string(seed);
    request.prompt = {17, 230, 41, 9, 311};
    request.params.temperature = 1.3f;
    request.params.top_k = 4;
    request.params.max_tokens = 3;
    request.params.seed = seed;
    requests.push_back(std::move(request));
  }
  EngineConfig c = config(2);
  c.scheduler.max_seqs = 512;
  c.scheduler.max_batched_tokens = 4096;
  c.num_kv_blocks = 2048;
  const auto plain = testing::serve_all(target_, c, requests, nullptr);
  MtpProposer proposer(mtp_);
  EngineStats stats;
  const auto speculative = testing::serve_all(target_, c, requests, &proposer, &stats);
  EXPECT_EQ(stats.acceptance.num_passes(), 3000);
  EXPECT_GT(stats.acceptance.num_accepted_tokens(), 300);
  EXPECT_LT(stats.acceptance.num_accepted_tokens(), 2900);
  for (int position : {1, 2}) {
    std::map<int32_t, int64_t> plain_counts, spec_counts;
    for (const auto& [id, output] : plain) ++plain_counts[output.outputs[0].token_ids.at(static_cast<size_t>(position))];
    for (const auto& [id, output] : speculative) {
      ++spec_counts[output.outputs[0].token_ids.at(static_cast<size_t>(position))];
    }
    EXPECT_GT(plain_counts.size(), 3u);
    EXPECT_GT(homogeneity_p_value(plain_counts, spec_counts), 1e-3) << "position " << position;
  }
}

}  // namespace
}  // namespace moert::spec
