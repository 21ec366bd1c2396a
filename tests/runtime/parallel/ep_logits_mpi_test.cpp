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

// The shared reference model of the parameter, this rank's prompt batch, and one rank's
// logits for it with every expert local and f32 rows (no exchange at all).
class EpLogitsOverMpi : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "missing") GTEST_SKIP() << "no shared reference models";
    model_ = load_model(testing::shared_dir() + "/reference/" + GetParam() + "/hf").value();
    batch_ = batch_for_rank(transport_.rank(), model_->config.vocab_size, 4, 5);
    TransformerForward local(model_->config, model_->weights, cpu_);
    DenseKvCache local_cache(model_->config);
    f32_logits_ = local.forward(batch_, local_cache).value();
  }

  // Over every placement (contiguous slices, replicas) and micro-batch count, this rank's
  // logits with `dtypes` rows are `expected`'s bits.
  void expect_every_placement_gives(const std::vector<float>& expected, PayloadDTypes dtypes, const std::string& what) {
    const ModelConfig& config = model_->config;
    for (const bool replicas : {false, true}) {
      for (const int micro_batches : {1, 2}) {
        experts::ExpertPlacement placement =
            replicas ? placement_with_replicas(config.num_experts(), transport_.world_size())
                     : experts::contiguous_placement(config.num_experts(), transport_.world_size()).value();
        TransformerForward forward(config, model_->weights, cpu_);
        ExpertParallelExperts experts(config, std::move(placement), transport_, nullptr, dtypes);
        experts.set_micro_batches(micro_batches);
        forward.set_routed_experts(&experts);
        DenseKvCache cache(config);
        Result<std::vector<float>> got = forward.forward(batch_, cache);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        ASSERT_EQ(got->size(), expected.size());
        EXPECT_EQ(std::memcmp(got->data(), expected.data(), expected.size() * sizeof(float)), 0)
            << what << (replicas ? ", replicas" : ", contiguous") << ", " << micro_batches
            << " micro-batch(es), rank " << transport_.rank() << " of " << transport_.world_size();
        if (transport_.world_size() > 1) EXPECT_GT(experts.stats().dispatch_bytes_sent, 0) << what;
      }
    }
  }

  comm::Transport& transport_ = comm::testing::mpi_test_transport();
  std::unique_ptr<LoadedModel> model_;
  ForwardBatch batch_;
  ThreadPool pool_{1};
  backend::CpuBackend cpu_{pool_};
  std::vector<float> f32_logits_;
};

TEST_P(EpLogitsOverMpi, BitIdenticalToOneRankForContiguousAndReplicatedPlacements) {
  expect_every_placement_gives(f32_logits_, PayloadDTypes{}, GetParam());
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
  const ModelConfig& config = model_->config;
  const std::unique_ptr<comm::Transport> self = comm::make_self_transport();
  using D = PayloadDType;
  for (const PayloadDTypes dtypes : {PayloadDTypes{D::kBf16, D::kBf16}, PayloadDTypes{D::kFp8, D::kF32},
                                     PayloadDTypes{D::kFp8, D::kBf16}, PayloadDTypes{D::kF32, D::kBf16}}) {
    const std::string what = GetParam() + ", dispatch " + payload_dtype_name(dtypes.dispatch) + ", combine " +
                             payload_dtype_name(dtypes.combine);
    // One rank, every expert local, the same payloads: each row still takes the trip.
    TransformerForward one_rank(config, model_->weights, cpu_);
    ExpertParallelExperts one_rank_experts(config, experts::contiguous_placement(config.num_experts(), 1).value(), *self,
                                           nullptr, dtypes);
    one_rank.set_routed_experts(&one_rank_experts);
    DenseKvCache one_rank_cache(config);
    const std::vector<float> expected = one_rank.forward(batch_, one_rank_cache).value();
    EXPECT_NE(std::memcmp(expected.data(), f32_logits_.data(), expected.size() * sizeof(float)), 0)
        << what << ": the payload rounding changed nothing";
    // The size of the effect is a figure, not a bound: random tiny models amplify any
    // perturbation along the prompt (the codec's own error is bounded in payload_codec_test).
    if (transport_.rank() == 0 && transport_.world_size() == 1) {
      std::printf("[ figures ] %s: max logit error / max |logit| vs f32 payloads = %.2e\n", what.c_str(),
                  scaled_max_error(expected, f32_logits_));
    }
    expect_every_placement_gives(expected, dtypes, what);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EpLogitsOverMpi, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

}  // namespace
}  // namespace moert::parallel
