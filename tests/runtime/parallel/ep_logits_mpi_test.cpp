// Expert-parallel forward over real MPI (mpirun -np 1, 2, 4): every rank's logits for its
// own prompt are bit-identical to the single-rank forward with all experts local, on every
// shared reference model, for contiguous slices and for a placement with replicas; with
// narrower payloads (bf16, fp8 dispatch; bf16 combine), bit-identical to one rank with the
// same payloads (and printing their distance to f32, the figures docs/ep-exchange.md quotes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/backend/cpu/cpu_backend.h"
#include "experts/placement/placement.h"
#include "runtime/model/reference_forward.h"
#include "runtime/comm/self_transport.h"
#include "runtime/parallel/expert_parallel.h"
#include "tests/runtime/parallel/ep_test_support.h"
#include "tests/runtime/comm/mpi_test_main.h"
#include "tests/support/test_support.h"

namespace moert::parallel {
namespace {

class EpLogitsOverMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(EpLogitsOverMpi, BitIdenticalToOneRankForContiguousAndReplicatedPlacements) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  comm::Transport& transport = comm::testing::mpi_test_transport();
  std::unique_ptr<LoadedModel> model = load_model(testing::shared_dir() + "/reference/" + GetParam() + "/hf").value();
  const ModelConfig& config = model->config;
  const ForwardBatch batch = batch_for_rank(transport.rank(), config.vocab_size, 4, 5);
  ThreadPool pool(1);
  backend::CpuBackend cpu(pool);
  TransformerForward local(config, model->weights, cpu);
  DenseKvCache local_cache(config);
  const std::vector<float> expected = local.forward(batch, local_cache).value();
  for (const bool replicas : {false, true}) {
    for (const int micro_batches : {1, 2}) {
      experts::ExpertPlacement placement = replicas
                                               ? placement_with_replicas(config.num_experts(), transport.world_size())
                                               : experts::contiguous_placement(config.num_experts(), transport.world_size()).value();
      TransformerForward forward(config, model->weights, cpu);
      ExpertParallelExperts experts(config, std::move(placement), transport);
      experts.set_micro_batches(micro_batches);
      forward.set_routed_experts(&experts);
      DenseKvCache cache(config);
      Result<std::vector<float>> got = forward.forward(batch, cache);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      ASSERT_EQ(got->size(), expected.size());
      EXPECT_EQ(std::memcmp(got->data(), expected.data(), expected.size() * sizeof(float)), 0)
          << GetParam() << (replicas ? ", replicas" : ", contiguous") << ", " << micro_batches
          << " micro-batch(es), rank " << transport.rank() << " of " << transport.world_size();
      if (transport.world_size() > 1) {
        EXPECT_GT(experts.stats().dispatch_bytes_sent, 0);
      }
    }
  }
}

// max |a - b| / max |b| over all logits: the error relative to the logits' scale.
double scaled_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double error = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    error = std::max(error, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return error / scale;
}

TEST_P(EpLogitsOverMpi, NarrowPayloadsGiveOneRanksLogitsOnAnyRankCount) {
  if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
  comm::Transport& transport = comm::testing::mpi_test_transport();
  std::unique_ptr<LoadedModel> model = load_model(testing::shared_dir() + "/reference/" + GetParam() + "/hf").value();
  const ModelConfig& config = model->config;
  const ForwardBatch batch = batch_for_rank(transport.rank(), config.vocab_size, 4, 5);
  ThreadPool pool(1);
  backend::CpuBackend cpu(pool);
  TransformerForward f32_forward(config, model->weights, cpu);
  DenseKvCache f32_cache(config);
  const std::vector<float> f32_logits = f32_forward.forward(batch, f32_cache).value();
  const std::unique_ptr<comm::Transport> self = comm::make_self_transport();
  using D = PayloadDType;
  for (const PayloadDTypes dtypes : {PayloadDTypes{D::kBf16, D::kBf16}, PayloadDTypes{D::kFp8, D::kF32},
                                     PayloadDTypes{D::kFp8, D::kBf16}, PayloadDTypes{D::kF32, D::kBf16}}) {
    const std::string what = GetParam() + ", dispatch " + payload_dtype_name(dtypes.dispatch) + ", combine " +
                             payload_dtype_name(dtypes.combine) + ", rank " + std::to_string(transport.rank()) + " of " +
                             std::to_string(transport.world_size());
    // One rank, every expert local, the same payloads: each row still takes the trip.
    TransformerForward one_rank(config, model->weights, cpu);
    ExpertParallelExperts one_rank_experts(config, experts::contiguous_placement(config.num_experts(), 1).value(), *self,
                                           nullptr, dtypes);
    one_rank.set_routed_experts(&one_rank_experts);
    DenseKvCache one_rank_cache(config);
    const std::vector<float> expected = one_rank.forward(batch, one_rank_cache).value();
    EXPECT_NE(std::memcmp(expected.data(), f32_logits.data(), expected.size() * sizeof(float)), 0)
        << what << ": the payload rounding changed nothing";
    // The size of the effect is a figure, not a bound: random tiny models amplify any
    // perturbation along the prompt (the codec's own error is bounded in payload_codec_test).
    if (transport.rank() == 0 && transport.world_size() == 1) {
      std::printf("[ figures ] %s: max logit error / max |logit| vs f32 payloads = %.2e\n", what.c_str(),
                  scaled_max_error(expected, f32_logits));
    }
    for (const bool replicas : {false, true}) {
      for (const int micro_batches : {1, 2}) {
        experts::ExpertPlacement placement =
            replicas ? placement_with_replicas(config.num_experts(), transport.world_size())
                     : experts::contiguous_placement(config.num_experts(), transport.world_size()).value();
        TransformerForward forward(config, model->weights, cpu);
        ExpertParallelExperts experts(config, std::move(placement), transport, nullptr, dtypes);
        experts.set_micro_batches(micro_batches);
        forward.set_routed_experts(&experts);
        DenseKvCache cache(config);
        Result<std::vector<float>> got = forward.forward(batch, cache);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        ASSERT_EQ(got->size(), expected.size());
        EXPECT_EQ(std::memcmp(got->data(), expected.data(), expected.size() * sizeof(float)), 0)
            << what << (replicas ? ", replicas" : ", contiguous") << ", " << micro_batches << " micro-batch(es)";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EpLogitsOverMpi, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

}  // namespace
}  // namespace moert::parallel
