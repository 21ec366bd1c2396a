// Structured output in the engine (docs/structured-output.md) over a generated model whose 512 ids
// carry a small hand-made byte vocabulary: constrained samples (n > 1, penalties, logprobs) stay
// valid and unchanged under preemption and with or without prefix caching; logprobs report the
// masked distribution before penalties; EOS only in accepting states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/generator.h"
#include "runtime/speculative/proposer.h"
#include "tests/support/test_support.h"
#include "text/grammar/token_mask.h"

namespace moert::engine {
namespace {

constexpr int32_t kVocab = 512;
constexpr int32_t kEos = 511;

// ids 0..94: the printable ASCII bytes; then some multi-byte tokens; the rest (EOS included)
// have no bytes and never pass a grammar.
std::vector<std::string> token_bytes() {
  std::vector<std::string> bytes(kVocab);
  for (int c = 32; c < 127; ++c) bytes[static_cast<size_t>(c - 32)] = std::string(1, static_cast<char>(c));
  const std::vector<std::string> multi = {"\"a\"", "\"b\"", "true", "false", ": ", ", ", "{\"", "\"}", "12", "ab", "re", "green", "blu"};
  for (size_t i = 0; i < multi.size(); ++i) bytes[95 + i] = multi[i];
  return bytes;
}

std::string text_of(const SampleOutput& sample) {
  const std::vector<std::string> bytes = token_bytes();
  std::string text;
  for (int32_t id : sample.token_ids) text += bytes[static_cast<size_t>(id)];
  return text;
}

class GuidedEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("guided-engine-model");
    ModelShapeOverrides shape;
    shape.vocab_size = kVocab;
    shape.hidden_size = 64;
    shape.num_layers = 2;
    shape.moe_intermediate_size = 64;
    shape.head_dim = 16;
    ThreadPool pool(2);
    const ModelConfig config = preset_model_config(find_architecture("glm4_moe"), "tiny", shape).value();
    ASSERT_TRUE(write_random_checkpoint(config, 5, scratch_->path(), 1 << 30, pool).is_ok());
    model_ = load_model(scratch_->path()).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete scratch_;
  }
  void SetUp() override { transformer_ = std::make_unique<TransformerForward>(model_->config, model_->weights, cpu_); }

  std::map<std::string, RequestOutput> serve(EngineConfig config, const std::vector<Request>& requests, EngineStats* stats,
                                             spec::Proposer* proposer = nullptr) {
    config.eos_token_ids = {kEos};
    Engine engine(*transformer_, config);
    engine.set_proposer(proposer);
    engine.set_token_vocabulary([]() -> Result<std::shared_ptr<const grammar::TokenTrie>> {
      return std::make_shared<const grammar::TokenTrie>(token_bytes());
    });
    for (const Request& request : requests) {
      const Status added = engine.add_request(request);
      EXPECT_TRUE(added.is_ok()) << added.to_string();
    }
    std::map<std::string, RequestOutput> outputs;
    while (engine.has_unfinished()) {
      Result<std::vector<RequestOutput>> finished = engine.step();
      EXPECT_TRUE(finished.is_ok()) << finished.status().to_string();
      if (!finished.is_ok()) break;
      for (RequestOutput& output : *finished) outputs[output.id] = std::move(output);
    }
    *stats = engine.stats();
    return outputs;
  }

  static testing::ScratchDir* scratch_;
  static LoadedModel* model_;
  ThreadPool pool_{2};
  backend::CpuBackend cpu_{pool_};
  std::unique_ptr<TransformerForward> transformer_;
};
testing::ScratchDir* GuidedEngine::scratch_ = nullptr;
LoadedModel* GuidedEngine::model_ = nullptr;

struct Constraint {
  std::string kind, spec;
  std::string full_match;  // what a finished ("stop") output must fully match
};

const std::vector<Constraint>& constraints() {
  static const std::vector<Constraint> all = {
      {"json_schema",
       R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"],"additionalProperties":false})",
       R"(\{[ \t\n]{0,4}"a"[ \t\n]{0,4}:[ \t\n]{0,4}(true|false)[ \t\n]{0,4},[ \t\n]{0,4}"b"[ \t\n]{0,4}:[ \t\n]{0,4}(0|[1-9][0-9]?)[ \t\n]{0,4}\})"},
      {"choice", R"(["red","green","blue"])", "red|green|blue"},
      {"regex", "[a-c]{3,6}", "[a-c]{3,6}"},
      {"json_object", "", R"(\{[\s\S]*\})"},
  };
  return all;
}

// 8 requests sharing a 40-token prefix, n = 3 at temperature 1, half with penalties, logprobs 3.
std::vector<Request> constrained_requests() {
  std::vector<Request> requests;
  for (int r = 0; r < 8; ++r) {
    Request request;
    request.id = "g" + std::to_string(r);
    for (int i = 0; i < 40; ++i) request.prompt.push_back((i * 37) % 95);
    for (int i = 0; i <= r % 3; ++i) request.prompt.push_back((r * 11 + i) % 95);
    const Constraint& c = constraints()[static_cast<size_t>(r) % constraints().size()];
    request.params.guided_kind = c.kind;
    request.params.guided_spec = c.spec;
    request.params.n = 3;
    request.params.temperature = 1.0f;
    request.params.seed = r;
    request.params.max_tokens = 40;
    request.params.logprobs = 3;
    if (r % 2 == 1) {
      request.params.presence_penalty = 0.5f;
      request.params.repetition_penalty = 1.3f;
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

TEST_F(GuidedEngine, SamplesStayValidAndUnchangedUnderPreemptionAndWithoutPrefixCaching) {
  const std::vector<Request> requests = constrained_requests();
  EngineConfig roomy;
  roomy.num_kv_blocks = 1024;
  EngineStats roomy_stats;
  const auto expected = serve(roomy, requests, &roomy_stats);
  ASSERT_EQ(expected.size(), requests.size());
  EXPECT_GT(roomy_stats.prefix_hit_tokens, 0);
  int finished = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const RequestOutput& output = expected.at(requests[r].id);
    ASSERT_EQ(output.outputs.size(), 3u);
    const Constraint& c = constraints()[r % constraints().size()];
    for (const SampleOutput& sample : output.outputs) {
      ASSERT_EQ(sample.logprobs.size(), sample.token_ids.size());
      if (sample.finish_reason == "length") {
        EXPECT_EQ(sample.token_ids.size(), 40u) << requests[r].id;
        continue;
      }
      ++finished;
      EXPECT_EQ(sample.finish_reason, "stop");
      // EOS only where the text is complete; the text itself matches.
      std::vector<int32_t> ids = sample.token_ids;
      if (!ids.empty() && ids.back() == kEos) ids.pop_back();
      for (int32_t id : ids) EXPECT_NE(id, kEos);
      EXPECT_TRUE(std::regex_match(text_of({ids}), std::regex(c.full_match))) << requests[r].id << ": " << text_of({ids});
      if (c.kind == "json_schema" || c.kind == "json_object") {
        EXPECT_TRUE(nlohmann::json::accept(text_of({ids}))) << text_of({ids});
      }
    }
  }
  EXPECT_GE(finished, 12);
  EngineConfig tight = roomy;
  tight.num_kv_blocks = 14;  // 13 usable blocks: one request's 3 samples fit, all 24 do not
  EngineStats tight_stats;
  const auto preempted = serve(tight, requests, &tight_stats);
  EXPECT_GT(tight_stats.preemptions, 0);
  EngineConfig uncached = roomy;
  uncached.enable_prefix_caching = false;
  EngineStats uncached_stats;
  const auto fresh = serve(uncached, requests, &uncached_stats);
  EXPECT_EQ(uncached_stats.prefix_hit_tokens, 0);
  for (const auto& [id, output] : expected) {
    for (const auto* other : {&preempted, &fresh}) {
      ASSERT_EQ(other->at(id).outputs.size(), output.outputs.size());
      for (size_t s = 0; s < output.outputs.size(); ++s) {
        EXPECT_EQ(other->at(id).outputs[s].token_ids, output.outputs[s].token_ids) << id << " sample " << s;
        EXPECT_EQ(other->at(id).outputs[s].finish_reason, output.outputs[s].finish_reason) << id << " sample " << s;
      }
    }
  }
}

// A test double that knows each request's greedy output (by its prompt) and proposes its next
// K tokens, replacing one draft in every other pass by a token the grammar rejects ('#' or an id
// without bytes): the engine must cut those drafts, accept the rest, and give the same output.
class ReplayProposer : public spec::Proposer {
 public:
  explicit ReplayProposer(std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> known) : known_(std::move(known)) {}
  Result<std::vector<spec::Draft>> propose(std::span<const spec::DraftRequest> requests) override {
    std::vector<spec::Draft> drafts;
    for (const spec::DraftRequest& r : requests) {
      spec::Draft draft;
      for (const auto& [prompt, output] : known_) {
        if (r.tokens.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), r.tokens.begin())) continue;
        for (size_t i = r.tokens.size() - prompt.size(); i < output.size() && static_cast<int>(draft.tokens.size()) < r.num_draft; ++i) {
          draft.tokens.push_back(output[i]);
        }
        break;
      }
      num_proposed_ += static_cast<int64_t>(draft.tokens.size());
      if (++num_calls_ % 2 == 0 && draft.tokens.size() >= 2) draft.tokens[1] = num_calls_ % 4 == 0 ? '#' - 32 : 300;
      drafts.push_back(std::move(draft));
    }
    return drafts;
  }
  void release(spec::ProposalSeqId) override {}
  const char* name() const override { return "replay"; }
  int64_t num_proposed() const { return num_proposed_; }

 private:
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> known_;
  int num_calls_ = 0;
  int64_t num_proposed_ = 0;
};

// Greedy constrained decoding with drafts checked against the grammar and verified on masked
// rows equals greedy decoding without speculation, token for token.
TEST_F(GuidedEngine, SpeculationWithDraftsTheGrammarRejectsEqualsPlainDecoding) {
  std::vector<Request> requests = constrained_requests();
  for (Request& r : requests) {
    r.params.n = 1;
    r.params.temperature = 0.0f;
    r.params.logprobs = -1;
    r.params.presence_penalty = 0.0f;  // the engine does not speculate for requests with penalties
    r.params.repetition_penalty = 1.0f;
  }
  EngineConfig config;
  config.num_kv_blocks = 1024;
  EngineStats plain_stats;
  const auto plain = serve(config, requests, &plain_stats);
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> known;
  for (const Request& r : requests) known.emplace_back(r.prompt, plain.at(r.id).outputs[0].token_ids);
  ReplayProposer proposer(known);
  config.spec.max_num_draft = 4;
  EngineStats spec_stats;
  const auto speculated = serve(config, requests, &spec_stats, &proposer);
  ASSERT_EQ(speculated.size(), plain.size());
  for (const auto& [id, output] : plain) {
    EXPECT_EQ(speculated.at(id).outputs[0].token_ids, output.outputs[0].token_ids) << id;
    EXPECT_EQ(speculated.at(id).outputs[0].finish_reason, output.outputs[0].finish_reason) << id;
  }
  EXPECT_GT(spec_stats.acceptance.num_accepted_tokens(), 0);
  EXPECT_LT(spec_stats.steps, plain_stats.steps);
  // The corrupted drafts were cut before verification.
  EXPECT_LT(spec_stats.acceptance.num_draft_tokens(), proposer.num_proposed());
}

// Logprobs are those of the masked row before penalties: the alternatives are allowed tokens
// only, their probabilities sum to 1 where the grammar allows fewer than `logprobs` tokens, and a
// repetition penalty (which scales the prompt's tokens) leaves the first position's figures as
// they were.
TEST_F(GuidedEngine, LogprobsReportTheMaskedDistributionBeforePenalties) {
  Request request;
  request.id = "c";
  for (int i = 0; i < 20; ++i) request.prompt.push_back(static_cast<int32_t>("redgreenblue"[i % 12]) - 32);
  request.params.guided_kind = "choice";
  request.params.guided_spec = R"(["red","green","blue"])";
  request.params.temperature = 0.0f;
  request.params.max_tokens = 8;
  request.params.logprobs = 20;
  EngineConfig config;
  config.num_kv_blocks = 256;
  EngineStats stats;
  const SampleOutput plain = serve(config, {request}, &stats).at("c").outputs[0];
  request.params.repetition_penalty = 2.0f;
  const SampleOutput penalized = serve(config, {request}, &stats).at("c").outputs[0];
  ASSERT_FALSE(plain.logprobs.empty());
  ASSERT_FALSE(penalized.logprobs.empty());
  // Position 0: "r", "re", "g", "green", "b", "blu" are the allowed tokens.
  const std::vector<std::string> bytes = token_bytes();
  double sum = 0.0;
  int num_finite = 0;
  for (const auto& [id, logprob] : plain.logprobs[0].top) {
    if (!std::isfinite(logprob)) continue;
    ++num_finite;
    sum += std::exp(logprob);
    const std::string& b = bytes[static_cast<size_t>(id)];
    EXPECT_TRUE(b == "r" || b == "re" || b == "g" || b == "green" || b == "b" || b == "blu") << "id " << id << " '" << b << "'";
  }
  EXPECT_EQ(num_finite, 6);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  ASSERT_EQ(penalized.logprobs[0].top.size(), plain.logprobs[0].top.size());
  for (size_t k = 0; k < plain.logprobs[0].top.size(); ++k) {
    EXPECT_EQ(penalized.logprobs[0].top[k].first, plain.logprobs[0].top[k].first);
    if (std::isfinite(plain.logprobs[0].top[k].second)) {
      EXPECT_DOUBLE_EQ(penalized.logprobs[0].top[k].second, plain.logprobs[0].top[k].second);
    }
  }
  EXPECT_EQ(plain.finish_reason, "stop");
  EXPECT_TRUE(std::regex_match(text_of(plain), std::regex("red|green|blue"))) << text_of(plain);
}

}  // namespace
}  // namespace moert::engine
