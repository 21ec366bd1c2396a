// Expert parallelism and the lock-step batch job over the loopback transport (N ranks on
// threads): logits and greedy outputs of the shared reference models are bit-identical to
// one rank for every rank count and for placements with replicas.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <mutex>

#include "runtime/backend/cpu/cpu_backend.h"
#include "experts/placement/placement.h"
#include "runtime/comm/loopback.h"
#include "launch/serving/request_io.h"
#include "runtime/model/reference_forward.h"
#include "runtime/parallel/batch_job.h"
#include "tests/support/test_support.h"

namespace moert::parallel {
namespace {

std::vector<int32_t> prompt_of(int index, int length, int vocab) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back((index * 131 + i * 17 + 3) % vocab);
  return prompt;
}

// A placement with replicas of every other expert, spread so that ranks differ in size.
experts::ExpertPlacement replica_placement(int num_experts, int num_ranks) {
  std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
  for (int e = 0; e < num_experts; ++e) rank_experts[static_cast<size_t>(e % num_ranks)].push_back(e);
  for (int e = 0; e < num_experts; e += 2) rank_experts[static_cast<size_t>((e + 1) % num_ranks)].push_back(e);
  std::vector<experts::LayerPlacement> layers{experts::LayerPlacement::create(num_experts, rank_experts).value()};
  return experts::ExpertPlacement::create(std::move(layers)).value();
}

experts::ExpertPlacement placement_for(const std::string& kind, int num_experts, int num_ranks) {
  if (kind == "replicas") return replica_placement(num_experts, num_ranks);
  return experts::contiguous_placement(num_experts, num_ranks).value();
}

class LockstepOnReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
    Result<std::unique_ptr<LoadedModel>> model = load_model(testing::shared_dir() + "/reference/" + GetParam() + "/hf");
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    model_ = std::move(model).value();
  }
  const ModelConfig& config() const { return model_->config; }

  std::unique_ptr<LoadedModel> model_;
};

TEST_P(LockstepOnReference, LogitsAreBitIdenticalForAnyRankCountAndPlacement) {
  const int vocab = config().vocab_size;
  // One rank, all experts local: rank r's prompt gives these logits.
  ThreadPool pool(1);
  backend::CpuBackend cpu(pool);
  TransformerForward local(config(), model_->weights, cpu);
  auto batch_of = [&](int r) {
    ForwardBatch batch;
    batch.tokens = prompt_of(r, 5 + 3 * r, vocab);
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
      batch.positions.push_back(static_cast<int64_t>(i));
      batch.logit_rows.push_back(static_cast<int64_t>(i));
    }
    return batch;
  };
  std::vector<std::vector<float>> expected;
  for (int r = 0; r < 4; ++r) {
    DenseKvCache cache(config());
    expected.push_back(local.forward(batch_of(r), cache).value());
  }
  for (const std::string kind : {"contiguous", "replicas"}) {
    for (int ranks : {1, 2, 3, 4}) {
      std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
      const Status status = comm::run_loopback(ranks, [&](comm::Transport& transport) {
        ThreadPool rank_pool(1);
        backend::CpuBackend rank_cpu(rank_pool);
        TransformerForward forward(config(), model_->weights, rank_cpu);
        ExpertParallelExperts experts(config(), placement_for(kind, config().num_experts(), ranks), transport);
        forward.set_routed_experts(&experts);
        DenseKvCache cache(config());
        got[static_cast<size_t>(transport.rank())] = forward.forward(batch_of(transport.rank()), cache).value();
      });
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(got[static_cast<size_t>(r)].size(), expected[static_cast<size_t>(r)].size());
        EXPECT_EQ(0, std::memcmp(got[static_cast<size_t>(r)].data(), expected[static_cast<size_t>(r)].data(),
                                 expected[static_cast<size_t>(r)].size() * sizeof(float)))
            << kind << ", " << ranks << " ranks, rank " << r;
      }
    }
  }
}

// Serves `requests` lines on `ranks` loopback ranks; returns the result lines by id.
std::map<std::string, nlohmann::json> serve(const LoadedModel& model, int ranks, const std::string& placement_kind,
                                            const std::vector<std::string>& lines, const BatchJobConfig& job,
                                            BatchJobReport* report_out = nullptr) {
  std::map<std::string, nlohmann::json> results;
  const Status status = comm::run_loopback(ranks, [&](comm::Transport& transport) {
    ThreadPool pool(1);
    backend::CpuBackend cpu(pool);
    TransformerForward forward(model.config, model.weights, cpu);
    ExpertParallelExperts experts(model.config, placement_for(placement_kind, model.config.num_experts(), ranks),
                                  transport);
    forward.set_routed_experts(&experts);
    engine::EngineConfig config;
    config.num_kv_blocks = 256;
    config.scheduler.max_batched_tokens = 48;  // chunked prefill
    config.forward_when_idle = true;
    engine::Engine engine(forward, config);
    std::vector<int64_t> blocks;
    for (const std::string& line : lines) {
      blocks.push_back(request_block_estimate(serving::parse_request_line(line).value(), config.block_size));
    }
    const bool root = transport.rank() == 0;
    Result<std::vector<std::string>> mine = distribute_request_lines(
        transport, root ? lines : std::vector<std::string>{}, root ? blocks : std::vector<int64_t>{}, {},
        config.num_kv_blocks - 1, nullptr);
    ASSERT_TRUE(mine.is_ok()) << mine.status().to_string();
    for (const std::string& line : *mine) ASSERT_TRUE(engine.add_request(serving::parse_request_line(line).value()).is_ok());
    CoordinatorEvents events;
    events.on_output = [&](const engine::RequestOutput& output) {
      nlohmann::json parsed = nlohmann::json::parse(serving::format_output_line(output));
      results[parsed["id"].get<std::string>()] = parsed;
      return Status::ok();
    };
    Result<BatchJobReport> report = serve_in_lockstep(transport, engine, forward, experts, job, events);
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    if (root && report_out != nullptr) *report_out = *report;
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  return results;
}

std::vector<std::string> request_lines(int count, int vocab, bool sampled) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    nlohmann::json request = {{"id", "q" + std::to_string(i)},
                              {"prompt_token_ids", prompt_of(i, 1 + (i * 7) % 40, vocab)},
                              {"max_tokens", 1 + (i * 5) % 12}};
    if (sampled && i % 3 == 0) {
      request["temperature"] = 0.8;
      request["seed"] = i;
      request["n"] = 2;
    }
    lines.push_back(request.dump());
  }
  return lines;
}

TEST_P(LockstepOnReference, GreedyOutputsEqualTheReferenceOnEveryRankCount) {
  const std::vector<std::string> lines = request_lines(11, config().vocab_size, /*sampled=*/false);
  ThreadPool pool(1);
  backend::CpuBackend cpu(pool);
  ReferenceForward reference(config(), model_->weights, cpu);
  for (const std::string kind : {"contiguous", "replicas"}) {
    for (int ranks : {1, 2, 4}) {
      const std::map<std::string, nlohmann::json> results = serve(*model_, ranks, kind, lines, BatchJobConfig{});
      ASSERT_EQ(results.size(), lines.size()) << kind << ", " << ranks << " ranks";
      for (const std::string& line : lines) {
        const engine::Request request = serving::parse_request_line(line).value();
        const GreedyOutput greedy =
            greedy_generate(reference, request.prompt, request.params.max_tokens).value();
        EXPECT_EQ(results.at(request.id)["outputs"][0]["token_ids"].get<std::vector<int32_t>>(), greedy.gen_tokens)
            << request.id << ", " << kind << ", " << ranks << " ranks";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LockstepOnReference, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

TEST(Lockstep, SampledOutputsAndRequestSpreadDoNotDependOnTheRankCount) {
  testing::ScratchDir scratch("lockstep");
  // A generated model with a shared expert (Qwen2-MoE) covers the overlapped path.
  const testing::CommandResult made = testing::run_command(
      testing::moert_binary() + " make-model --arch qwen2_moe --preset tiny --num-layers 2 --out " + (scratch / "m"));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::unique_ptr<LoadedModel> model = load_model(scratch / "m").value();
  const std::vector<std::string> lines = request_lines(9, model->config.vocab_size, /*sampled=*/true);
  std::map<std::string, nlohmann::json> one = serve(*model, 1, "contiguous", lines, BatchJobConfig{});
  BatchJobReport report;
  std::map<std::string, nlohmann::json> three = serve(*model, 3, "replicas", lines, BatchJobConfig{}, &report);
  ASSERT_EQ(one.size(), lines.size());
  for (auto& [id, result] : one) {
    EXPECT_EQ(result["outputs"], three.at(id)["outputs"]) << id;
  }
  // Every rank served some requests and sent rows to its peers.
  ASSERT_EQ(report.rank_totals.size(), 3u);
  for (const StepMetrics& m : report.rank_totals) {
    EXPECT_GT(m.finished_requests, 0);
    EXPECT_GT(m.dispatch_bytes, 0);
    EXPECT_GT(m.combine_bytes, 0);
    EXPECT_GT(m.shared_s, 0.0);
  }
}

// Balancing on a deliberately skewed router, 2 ranks: the bias rule lowers the expert
// MaxVio (and changes outputs: it moves expert choices), replicas lower the per-rank
// compute MaxVio and change nothing in the outputs; MaxVio is reported per layer. Also on
// DeepSeek-V3, whose group-limited router adds the balancing bias to its own correction
// bias for selection only.
class LockstepBalance : public ::testing::TestWithParam<std::string> {};

TEST_P(LockstepBalance, BiasLowersExpertMaxVioReplicasLowerRankMaxVio) {
  testing::ScratchDir scratch("lockstep-balance-" + GetParam());
  const testing::CommandResult made = testing::run_command(
      testing::moert_binary() + " make-model --arch " + GetParam() +
      " --preset tiny --num-layers 2 --seed 5 --router-skew 1 --out " + (scratch / "m"));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::unique_ptr<LoadedModel> model = load_model(scratch / "m").value();
  std::vector<std::string> lines;
  for (int i = 0; i < 24; ++i) {
    lines.push_back(nlohmann::json{{"id", "b" + std::to_string(i)},
                                   {"prompt_token_ids", prompt_of(i, 12, model->config.vocab_size)},
                                   {"max_tokens", 24}}.dump());
  }
  BatchJobReport none_report, bias_report, replicate_report;
  const auto none = serve(*model, 2, "contiguous", lines, BatchJobConfig{}, &none_report);
  BatchJobConfig bias;
  bias.balance = BalanceMode::kBias;
  bias.balance_gamma = 0.01f;
  const auto biased = serve(*model, 2, "contiguous", lines, bias, &bias_report);
  BatchJobConfig replicate;
  replicate.balance = BalanceMode::kReplicate;
  replicate.balance_interval = 4;
  const auto replicated = serve(*model, 2, "contiguous", lines, replicate, &replicate_report);
  ASSERT_EQ(none.size(), lines.size());
  ASSERT_EQ(none_report.expert_run_max_violation_per_layer.size(), 2u);
  for (size_t layer = 0; layer < 2; ++layer) {  // the MoE layers are skewed (DeepSeek's layer 0 is dense)
    if (model->config.layer_is_moe[layer]) EXPECT_GT(none_report.expert_run_max_violation_per_layer[layer], 0.5);
  }
  EXPECT_LT(bias_report.expert_run_max_violation, 0.8 * none_report.expert_run_max_violation);
  EXPECT_GT(replicate_report.rebalances, 0);
  EXPECT_LT(replicate_report.rank_run_max_violation, none_report.rank_run_max_violation);
  EXPECT_DOUBLE_EQ(replicate_report.expert_run_max_violation, none_report.expert_run_max_violation);
  int changed = 0;
  for (const auto& [id, result] : none) {
    EXPECT_EQ(result["outputs"], replicated.at(id)["outputs"]) << id;
    changed += result["outputs"] != biased.at(id)["outputs"] ? 1 : 0;
  }
  EXPECT_GT(changed, 0);
}

INSTANTIATE_TEST_SUITE_P(Routers, LockstepBalance, ::testing::Values("qwen3_moe", "deepseek_v3"));

TEST(Lockstep, AutoMicroBatchesNeedSeveralRanksAndEnoughRowsPerExpertInEachHalf) {
  // 16 experts, top-4: 8 rows per expert and half from 64 tokens on.
  EXPECT_EQ(auto_micro_batches(2, 64, 4, 16), 2);
  EXPECT_EQ(auto_micro_batches(2, 63, 4, 16), 1);
  EXPECT_EQ(auto_micro_batches(2, 32, 4, 16), 1);  // batch-32 decode: 4 rows per expert and half
  EXPECT_EQ(auto_micro_batches(4, 2048, 4, 16), 2);
  EXPECT_EQ(auto_micro_batches(1, 2048, 4, 16), 1);  // one rank: no exchange to hide
  // 128 experts, top-8 (Qwen3-30B-A3B): 256 tokens.
  EXPECT_EQ(auto_micro_batches(8, 256, 8, 128), 2);
  EXPECT_EQ(auto_micro_batches(8, 255, 8, 128), 1);
  EXPECT_EQ(auto_micro_batches(2, 0, 4, 16), 1);
}

TEST(Lockstep, AssignmentGoesToTheRankWithTheMostFreeBlocks) {
  // Pools 10 and 6: 4 -> r0 (10), 4 -> r0 (6 vs 6: lowest), 3 -> r1 (2 vs 6), 1 -> r1 (2 vs 3).
  EXPECT_EQ(assign_by_free_blocks({4, 4, 3, 1}, {10, 6}), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(assign_by_free_blocks({}, {5}), (std::vector<int>{}));
  // Cache-aware: requests of one prefix key follow its first request's rank while that rank
  // is not overloaded; key 0 uses the free-block rule. 8 requests of 2 blocks, keys
  // A A A A B B B B, 2 ranks: A starts on 0 and stays while 0 leads by <= max(2, 16 / 8) = 2
  // blocks (its third request overflows to 1), B starts on the freer 1 and stays.
  EXPECT_EQ(assign_requests({2, 2, 2, 2, 2, 2, 2, 2}, {7, 7, 7, 7, 9, 9, 9, 9}, {100, 100}),
            (std::vector<int>{0, 0, 1, 0, 1, 1, 1, 1}));
  // Interleaved keys stay home: A A B B ... balanced on their own.
  EXPECT_EQ(assign_requests({2, 2, 2, 2, 2, 2}, {7, 9, 7, 9, 7, 9}, {100, 100}), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  // A home without room for the request: the freest rank instead.
  EXPECT_EQ(assign_requests({5, 5}, {7, 7}, {8, 7}), (std::vector<int>{0, 1}));
  EXPECT_EQ(assign_requests({1, 1}, {0, 0}, {10, 10}), assign_by_free_blocks({1, 1}, {10, 10}));
  EXPECT_EQ(assign_requests({1, 1}, {}, {10, 10}), assign_by_free_blocks({1, 1}, {10, 10}));
  EXPECT_EQ(prefix_key({1, 2, 3}, 3), 0u);  // not longer than one block: no hit possible
  EXPECT_NE(prefix_key({1, 2, 3, 4}, 3), 0u);
  EXPECT_EQ(prefix_key({1, 2, 3, 4}, 3), prefix_key({1, 2, 3, 9, 9}, 3));
  EXPECT_NE(prefix_key({1, 2, 3, 4}, 3), prefix_key({1, 2, 4, 4}, 3));
  engine::Request request;
  request.prompt.assign(20, 1);
  request.params.max_tokens = 13;  // 33 tokens: 3 blocks of 16
  request.params.n = 2;
  EXPECT_EQ(request_block_estimate(request, 16), 6);
}

}  // namespace
}  // namespace moert::parallel
