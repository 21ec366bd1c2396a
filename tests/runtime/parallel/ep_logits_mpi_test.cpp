// Expert-parallel forward over real MPI (mpirun -np 1, 2, 4): every rank's logits for its
// own prompt are bit-identical to the single-rank forward with all experts local, on every
// shared reference model, for contiguous slices and for a placement with replicas.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/backend/cpu/cpu_backend.h"
#include "experts/placement/placement.h"
#include "runtime/model/reference_forward.h"
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
    experts::ExpertPlacement placement = replicas
                                             ? placement_with_replicas(config.num_experts(), transport.world_size())
                                             : experts::contiguous_placement(config.num_experts(), transport.world_size()).value();
    TransformerForward forward(config, model->weights, cpu);
    ExpertParallelExperts experts(config, std::move(placement), transport);
    forward.set_routed_experts(&experts);
    DenseKvCache cache(config);
    Result<std::vector<float>> got = forward.forward(batch, cache);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), expected.size());
    EXPECT_EQ(std::memcmp(got->data(), expected.data(), expected.size() * sizeof(float)), 0)
        << GetParam() << (replicas ? ", replicas" : ", contiguous") << ", rank " << transport.rank() << " of "
        << transport.world_size();
    if (transport.world_size() > 1) EXPECT_GT(experts.stats().dispatch_bytes_sent, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EpLogitsOverMpi, ::testing::ValuesIn(testing::reference_model_params()),
                         [](const auto& info) { return testing::test_param_name(info.param); });

}  // namespace
}  // namespace moert::parallel
