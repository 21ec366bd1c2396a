// The whole serving path on the CUDA backend, emulated on the CPU (core/cuda/emulation):
// weights registered and uploaded on first use, the KV pool in "device" memory, every layer's
// ops and the draws made on the backend. On small generated models of three kinds (DeepSeek-V3
// MLA with FP8 weights, gpt-oss with sinks, sliding windows and MXFP4 experts, Qwen3 with
// NVFP4 experts): the paged runner's logits agree with the CPU backend's within 1e-5 over a
// prefill and a decode step, and the engine's greedy and sampled (temperature, top-k, top-p)
// requests give the CPU's tokens. Shapes stay small: the emulation runs every GPU thread as a
// real thread.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "tests/support/laid_out_model.h"
#include "experts/placement/placement.h"
#include "runtime/comm/self_transport.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/speculative/draft_model_proposer.h"
#include "runtime/model/weights.h"
#include "tests/runtime/engine/serve_all.h"
#include "tests/support/test_support.h"

namespace moert::engine {
namespace {

struct EmulatedCase {
  std::string arch;
  std::string format;  // weight format of the quantized checkpoint
};

class EmulatedCudaEngine : public ::testing::TestWithParam<EmulatedCase> {};

// Small: the emulation runs every GPU thread as a real thread.
ModelShapeOverrides small_moe_shape(int vocab_size) {
  ModelShapeOverrides shape;
  shape.vocab_size = vocab_size;
  shape.hidden_size = 64;
  shape.num_layers = 2;
  shape.num_experts = 4;
  shape.top_k = 2;
  shape.moe_intermediate_size = 32;
  return shape;
}

// A small paged pool with F32 KV blocks (so the CPU twin's logits compare exactly).
EngineConfig small_f32_engine() {
  EngineConfig engine;
  engine.block_size = 4;
  engine.num_kv_blocks = 64;
  engine.kv_cache_dtype = DType::kF32;
  return engine;
}

// The logits of one prefill chunk of `prompt` (its last `prefill_logit_rows` rows) and one
// decode step through the paged runner, on the emulated device and on the CPU: within 1e-5.
void expect_runner_logits_match(const TransformerForward& on_cuda, const TransformerForward& on_cpu,
                                const EngineConfig& engine, const std::vector<int32_t>& prompt,
                                int prefill_logit_rows, const std::vector<int32_t>& blocks) {
  std::vector<std::vector<float>> logits;
  for (const TransformerForward* forward : {&on_cuda, &on_cpu}) {
    std::unique_ptr<runner::PagedModelRunner> runner =
        runner::PagedModelRunner::create(*forward, {engine.num_kv_blocks, engine.block_size, DType::kF32}).value();
    runner::SequenceChunk chunk;
    chunk.tokens = prompt;
    chunk.num_logit_rows = prefill_logit_rows;
    chunk.block_tables.assign(runner->kv_cache_groups().size(), blocks);
    Result<std::vector<float>> rows = runner->run({{}, {chunk}});
    ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
    runner::SequenceChunk next;
    next.start = static_cast<int64_t>(prompt.size());
    next.tokens = {5};
    next.num_logit_rows = 1;
    next.block_tables = chunk.block_tables;
    Result<std::vector<float>> decoded = runner->run({{}, {next}});
    ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
    rows->insert(rows->end(), decoded->begin(), decoded->end());
    logits.push_back(std::move(*rows));
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  std::vector<double> cpu_logits(logits[1].begin(), logits[1].end());
  EXPECT_LT(testing::relative_l2_error(logits[0].data(), cpu_logits.data(), static_cast<int64_t>(cpu_logits.size())), 1e-5);
}

TEST_P(EmulatedCudaEngine, ServesTheCpuTokensAndLogits) {
  testing::ScratchDir scratch("emulated-cuda-" + GetParam().arch);
  const ModelShapeOverrides shape = small_moe_shape(128);
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::string dir = testing::write_generated_model(scratch.path(), GetParam().arch, GetParam().format, shape, 17);
  // The device reads the checkpoint's FP4 code order; the CPU twin the repacked CPU order.
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  Result<std::unique_ptr<LoadedModel>> cpu_model = testing::load_laid_out(dir, cpu);
  ASSERT_TRUE(*cpu_model != nullptr);
  const ModelConfig& config = (*model)->config;
  std::unique_ptr<backend::Backend> cuda = cuda_emulated::make_cuda_backend(0).value();
  ASSERT_TRUE(cuda->prepare_weights((*model)->weights, *(*model)->checkpoint, {}).is_ok());  // as moert run does
  const TransformerForward on_cuda(config, (*model)->weights, *cuda);
  const TransformerForward on_cpu(config, (*cpu_model)->weights, cpu);

  // Logits of one prefill chunk and one decode step, through the paged runner.
  const EngineConfig engine = small_f32_engine();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 7; ++i) prompt.push_back((37 * i + 11) % config.vocab_size);
  expect_runner_logits_match(on_cuda, on_cpu, engine, prompt, 2, {1, 2, 3});

  // Greedy and sampled requests through the engine (draws on the backend).
  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    Request request;
    request.id = "r" + std::to_string(r);
    request.prompt.assign(prompt.begin() + r, prompt.end());
    request.params.max_tokens = 4;  // decode steps of 2: eager, recorded, replayed
    request.params.ignore_eos = true;
    if (r > 0) {
      request.params.temperature = 0.8f;
      request.params.top_k = 20;
      request.params.top_p = 0.9f;
      request.params.seed = 7 + r;
    }
    requests.push_back(std::move(request));
  }
  // On the device with step graphs (the engine's sampling path: draws on the device from a
  // replay's logits), on the CPU without.
  EngineConfig with_graphs = engine;
  with_graphs.step_graph_max_batch = 4;
  EngineStats stats;
  const auto served = testing::serve_all(on_cuda, with_graphs, requests, nullptr, &stats);
  const auto expected = testing::serve_all(on_cpu, engine, requests);
  EXPECT_EQ(stats.step_graphs.captured, 1);
  EXPECT_GE(stats.step_graphs.replayed, 1);
  EXPECT_EQ(stats.step_graphs.failed, 0);
  ASSERT_EQ(served.size(), requests.size());
  for (const Request& request : requests) {
    EXPECT_EQ(served.at(request.id).outputs.at(0).token_ids, expected.at(request.id).outputs.at(0).token_ids)
        << request.id;
  }
}

// Decode steps as step graphs (docs/cuda-backend.md, Step graphs): two sequences prefilled,
// then three decode steps of 2 and two of 1, across KV block boundaries. With graphs each batch
// size's first decode step runs eagerly, the second is recorded and replayed, later ones
// replay; every logit is bit-identical to the eager runner's. The CPU backend records
// nothing: the capture fails once, its steps run eagerly with the same logits.
TEST_P(EmulatedCudaEngine, StepGraphsGiveTheEagerStepsBits) {
  testing::ScratchDir scratch("emulated-cuda-graphs-" + GetParam().arch);
  const ModelShapeOverrides shape = small_moe_shape(96);
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::string dir = testing::write_generated_model(scratch.path(), GetParam().arch, GetParam().format, shape, 23);
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& config = (*model)->config;
  std::unique_ptr<backend::Backend> cuda = cuda_emulated::make_cuda_backend(0).value();
  ASSERT_TRUE(cuda->prepare_weights((*model)->weights, *(*model)->checkpoint, {}).is_ok());  // as moert run does
  const TransformerForward on_cuda(config, (*model)->weights, *cuda);
  const TransformerForward on_cpu(config, (*model)->weights, cpu);

  // Runs the steps; returns every logit row and the graph statistics.
  auto run_steps = [&](const TransformerForward& forward, bool graphs) {
    std::unique_ptr<runner::PagedModelRunner> runner = runner::PagedModelRunner::create(forward, {32, 4, DType::kF32}).value();
    if (graphs) runner->enable_step_graphs(4);
    const size_t groups = runner->kv_cache_groups().size();
    const std::vector<std::vector<int32_t>> tables{{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
    std::vector<float> logits;
    auto run = [&](const runner::RunnerBatch& batch) {
      Result<std::vector<float>> rows = runner->run(batch);
      EXPECT_TRUE(rows.is_ok()) << rows.status().to_string();
      if (rows.is_ok()) logits.insert(logits.end(), rows->begin(), rows->end());
    };
    runner::RunnerBatch prefill;
    for (int s = 0; s < 2; ++s) {
      runner::SequenceChunk chunk;
      for (int i = 0; i < 6 + s; ++i) chunk.tokens.push_back((29 * i + 7 * s + 3) % config.vocab_size);
      chunk.num_logit_rows = 1;
      chunk.block_tables.assign(groups, tables[static_cast<size_t>(s)]);
      prefill.chunks.push_back(chunk);
    }
    run(prefill);
    std::vector<int64_t> length{6, 7};
    for (int step = 0; step < 5; ++step) {
      const int batch_size = step < 3 ? 2 : 1;
      runner::RunnerBatch decode;
      for (int s = 0; s < batch_size; ++s) {
        runner::SequenceChunk chunk;
        chunk.start = length[static_cast<size_t>(s)]++;
        chunk.tokens = {static_cast<int32_t>((11 * step + 5 * s + 1) % config.vocab_size)};
        chunk.num_logit_rows = 1;
        chunk.block_tables.assign(groups, tables[static_cast<size_t>(s)]);
        decode.chunks.push_back(chunk);
      }
      run(decode);
    }
    return std::make_pair(logits, runner->step_graph_stats());
  };
  const auto [eager, no_graphs] = run_steps(on_cuda, false);
  const auto [graphed, stats] = run_steps(on_cuda, true);
  ASSERT_EQ(graphed.size(), eager.size());
  EXPECT_EQ(graphed, eager);
  EXPECT_EQ(no_graphs.captured, 0);
  EXPECT_EQ(stats.captured, 2);  // batch sizes 2 and 1
  EXPECT_EQ(stats.replayed, 2 + 1);
  EXPECT_EQ(stats.failed, 0);
  const auto [on_host, host_stats] = run_steps(on_cpu, true);
  const auto [on_host_eager, unused] = run_steps(on_cpu, false);
  EXPECT_EQ(on_host, on_host_eager);
  EXPECT_EQ(host_stats.captured, 0);
  EXPECT_EQ(host_stats.failed, 2);

  // What `moert run` on one rank builds: the expert-parallel experts over a one-rank
  // transport keep the routing on the device and count the loads there, so the steps are
  // recorded too; the counted loads are those of the eager steps. (One architecture: the
  // experts' side does not depend on it, and the emulation is slow.)
  if (GetParam().arch != "qwen3_moe") return;
  const std::unique_ptr<comm::Transport> self = comm::make_self_transport();
  std::vector<std::vector<int64_t>> loads;
  for (const bool graphs : {false, true}) {
    TransformerForward forward(config, (*model)->weights, *cuda);
    parallel::ExpertParallelExperts experts(config, experts::contiguous_placement(config.num_experts(), 1).value(),
                                            *self);
    forward.set_routed_experts(&experts);
    const auto [one_rank, one_rank_stats] = run_steps(forward, graphs);
    EXPECT_EQ(one_rank, eager) << "graphs " << graphs;
    EXPECT_EQ(one_rank_stats.captured, graphs ? 2 : 0);
    loads.push_back(experts.take_routed_loads());
    const std::vector<int64_t> computed = experts.take_computed_loads();
    int64_t routed_total = 0, computed_total = 0;
    for (int64_t n : loads.back()) routed_total += n;
    for (int64_t n : computed) computed_total += n;
    // (6 + 7 prompt tokens + 3 x 2 + 2 x 1 decode tokens) x K per MoE layer.
    EXPECT_GT(routed_total, 0);
    EXPECT_EQ(computed_total, routed_total);
    EXPECT_EQ(routed_total % ((6 + 7 + 3 * 2 + 2) * config.top_k()), 0) << routed_total;
  }
  EXPECT_EQ(loads[0], loads[1]);
}

// Speculative decoding with the draft on the device beside the target (the model as its own
// draft, K = 3): the draft's decode rounds are recorded and replayed as step graphs, and the
// greedy tokens are those of plain decoding on the CPU.
TEST(EmulatedCudaSpeculation, DraftOnTheDeviceReplaysItsRoundsAndKeepsTheGreedyTokens) {
  testing::ScratchDir scratch("emulated-cuda-spec");
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::string dir = testing::write_generated_model(scratch.path(), "qwen3_moe", "nvfp4", small_moe_shape(96), 31);
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelConfig& config = (*model)->config;
  std::unique_ptr<backend::Backend> cuda = cuda_emulated::make_cuda_backend(0).value();
  ASSERT_TRUE(cuda->prepare_weights((*model)->weights, *(*model)->checkpoint, {}).is_ok());  // as moert run does
  const TransformerForward target(config, (*model)->weights, *cuda);
  const TransformerForward draft(config, (*model)->weights, *cuda);
  const TransformerForward on_cpu(config, (*model)->weights, cpu);
  const EngineConfig engine = small_f32_engine();
  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    Request request;
    request.id = "r" + std::to_string(r);
    for (int i = 0; i < 5 + r; ++i) request.prompt.push_back((13 * i + 7 * r + 2) % config.vocab_size);
    request.params.max_tokens = 7;
    request.params.ignore_eos = true;
    requests.push_back(std::move(request));
  }
  const auto expected = testing::serve_all(on_cpu, engine, requests);
  EngineConfig speculative = engine;
  speculative.step_graph_max_batch = 4;
  speculative.spec.max_num_draft = 3;
  speculative.spec.probe_num_draft = 3;
  spec::DraftModelProposer proposer(draft, {engine.num_kv_blocks, engine.block_size, true, DType::kF32, 4});
  EngineStats stats;
  const auto served = testing::serve_all(target, speculative, requests, &proposer, &stats);
  for (const Request& request : requests) {
    EXPECT_EQ(served.at(request.id).outputs.at(0).token_ids, expected.at(request.id).outputs.at(0).token_ids)
        << request.id;
  }
  EXPECT_GT(stats.acceptance.acceptance_rate(), 0.5);  // its own draft
  EXPECT_GE(proposer.step_graph_stats().captured, 1);
  EXPECT_GE(proposer.step_graph_stats().replayed, 1);
  EXPECT_EQ(proposer.step_graph_stats().failed, 0);
}

// DeepSeek Sparse Attention (docs/sparse-attention.md) on the CUDA backend's host-side path:
// a DeepSeek-V3.2 checkpoint in the FP8 release layout (the indexer's wq_b / wk FP8), prompts
// of 2.5 to 3 times index_topk through the paged runner (a prefill chunk and a decode step)
// give the CPU's logits within 1e-5, and the engine the CPU's greedy tokens; step graphs are
// asked for but never recorded (a DSA model names itself a blocker).
TEST(EmulatedCudaSparseAttention, ServesTheCpuTokensAndLogitsWithoutStepGraphs) {
  testing::ScratchDir scratch("emulated-cuda-dsa");
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::string dir = testing::write_generated_model(scratch.path(), "deepseek_v32", "fp8", small_moe_shape(128), 19);
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  Result<std::unique_ptr<LoadedModel>> cpu_model = testing::load_laid_out(dir, cpu);
  ASSERT_TRUE(*cpu_model != nullptr);
  const ModelConfig& config = (*model)->config;
  ASSERT_TRUE(config.dsa.enabled());
  std::unique_ptr<backend::Backend> cuda = cuda_emulated::make_cuda_backend(0).value();
  ASSERT_TRUE(cuda->prepare_weights((*model)->weights, *(*model)->checkpoint, {}).is_ok());  // as moert run does
  const TransformerForward on_cuda(config, (*model)->weights, *cuda);
  const TransformerForward on_cpu(config, (*cpu_model)->weights, cpu);
  EXPECT_FALSE(on_cuda.step_graph_blocker().empty());
  const EngineConfig engine = small_f32_engine();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((37 * i + 11) % config.vocab_size);
  expect_runner_logits_match(on_cuda, on_cpu, engine, prompt, 3, {1, 2, 3, 4, 5, 6});

  std::vector<Request> requests;
  for (int r = 0; r < 2; ++r) {
    Request request;
    request.id = "r" + std::to_string(r);
    request.prompt.assign(prompt.begin() + r, prompt.end());
    request.params.max_tokens = 5;
    request.params.ignore_eos = true;
    requests.push_back(std::move(request));
  }
  EngineConfig with_graphs = engine;
  with_graphs.step_graph_max_batch = 4;
  EngineStats stats;
  const auto served = testing::serve_all(on_cuda, with_graphs, requests, nullptr, &stats);
  const auto expected = testing::serve_all(on_cpu, engine, requests);
  EXPECT_EQ(stats.step_graphs.captured, 0);
  ASSERT_EQ(served.size(), requests.size());
  for (const Request& request : requests) {
    EXPECT_EQ(served.at(request.id).outputs.at(0).token_ids, expected.at(request.id).outputs.at(0).token_ids)
        << request.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, EmulatedCudaEngine,
                         ::testing::Values(EmulatedCase{"deepseek_v3", "fp8"}, EmulatedCase{"gpt_oss", "mxfp4"},
                                           EmulatedCase{"qwen3_moe", "nvfp4"}),
                         [](const auto& info) { return info.param.arch; });

}  // namespace
}  // namespace moert::engine
