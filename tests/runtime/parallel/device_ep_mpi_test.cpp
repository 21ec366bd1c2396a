// Expert parallelism on a device backend over real MPI (mpirun -np 1, 2, 4), with the CUDA
// backend emulated on the CPU: every rank's logits for its own prompt are bit-identical to one
// rank's forward on the same backend with all experts local, for both ways the rows travel:
//   * staged: the payload transport moves host memory (MPI), so rows come to the host;
//   * device: the payload transport moves device buffers (what NCCL does on a GPU). Here the
//     emulated device memory is host memory, so MPI itself can move it; the test transport
//     below only reports device buffers and checks that every row buffer it is handed is an
//     emulated device allocation (no row went through the host).
// Small generated models (Qwen3 with NVFP4 experts, DeepSeek-V3 with shared experts, MLA and
// FP8 weights), with one and two micro-batches per MoE layer: the emulation runs every GPU
// thread as a real thread.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "runtime/backend/cpu/cpu_backend.h"
#include "experts/placement/placement.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "core/cuda/emulation/emulated_runtime.h"
#include "runtime/model/reference_forward.h"
#include "runtime/model/weights.h"
#include "runtime/parallel/expert_parallel.h"
#include "tests/runtime/parallel/ep_test_support.h"
#include "tests/runtime/comm/mpi_test_main.h"
#include "tests/support/test_support.h"

namespace moert::parallel {
namespace {

bool is_emulated_device_memory(const void* ptr) {
  cudaPointerAttributes attributes;
  return cudaPointerGetAttributes(&attributes, ptr) == cudaSuccess && attributes.type == cudaMemoryTypeDevice;
}

// The MPI transport, reporting device buffers: the rows of the expert-parallel step stay in
// (emulated) device memory. Counts every row exchange and every buffer that was not device
// memory.
class EmulatedDeviceRowsTransport : public comm::Transport {
 public:
  explicit EmulatedDeviceRowsTransport(comm::Transport& host) : host_(host) {}
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  comm::BufferLocation buffer_location() const override { return comm::BufferLocation::kDevice; }
  Status barrier() override { return host_.barrier(); }
  Status all_reduce(int64_t* data, size_t count, comm::ReduceOp op) override { return host_.all_reduce(data, count, op); }
  Status all_reduce(double* data, size_t count, comm::ReduceOp op) override { return host_.all_reduce(data, count, op); }
  Status all_reduce(float* data, size_t count, comm::ReduceOp op) override { return host_.all_reduce(data, count, op); }
  Status broadcast(void* data, size_t bytes, int root) override { return host_.broadcast(data, bytes, root); }
  Status gather(const void* send, size_t bytes, void* recv, int root) override {
    return host_.gather(send, bytes, recv, root);
  }
  Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes, int root) override {
    return host_.gatherv(send, bytes, root);
  }
  std::unique_ptr<comm::PendingExchange> start_all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes,
                                                            void* recv,
                                                            const std::vector<int64_t>& recv_bytes) override {
    ++row_exchanges;
    if (!is_emulated_device_memory(send) || !is_emulated_device_memory(recv)) ++host_buffers;
    return host_.start_all_to_all_v(send, send_bytes, recv, recv_bytes);
  }
  [[noreturn]] void abort(int code, const std::string& message) override { host_.abort(code, message); }

  int row_exchanges = 0;
  int host_buffers = 0;

 private:
  comm::Transport& host_;
};

struct DeviceEpCase {
  std::string arch;
  std::string format;
};

class DeviceEpOverMpi : public ::testing::TestWithParam<DeviceEpCase> {};

TEST_P(DeviceEpOverMpi, StagedAndDeviceRowsAreBitIdenticalToOneRank) {
  comm::Transport& transport = comm::testing::mpi_test_transport();
  testing::ScratchDir scratch("device-ep-" + GetParam().arch + "-r" + std::to_string(transport.rank()));
  ModelShapeOverrides shape;
  shape.vocab_size = 96;
  shape.hidden_size = 64;
  shape.num_layers = 2;
  shape.num_experts = 8;
  shape.top_k = 2;
  shape.moe_intermediate_size = 32;
  ThreadPool pool(1);
  const std::string dir = testing::write_generated_model(scratch.path(), GetParam().arch, GetParam().format, shape, 29);
  std::unique_ptr<LoadedModel> model = load_model(dir).value();
  const ModelConfig& config = model->config;
  std::unique_ptr<backend::Backend> device = cuda_emulated::make_cuda_backend(0).value();
  ASSERT_TRUE(device->prepare_weights(model->weights, *model->checkpoint, {}).is_ok());  // every expert: `local` runs them all
  const ForwardBatch batch = batch_for_rank(transport.rank(), config.vocab_size, 3, 2);

  TransformerForward local(config, model->weights, *device);
  DenseKvCache local_cache(config);
  const std::vector<float> expected = local.forward(batch, local_cache).value();

  // (device rows, replicas, micro-batches): staged and device rows over contiguous slices,
  // device rows with replicas (EPLB's placements), and device rows in two micro-batches (the
  // staged rows' two micro-batches are ep_logits_mpi_test's; the emulation is slow).
  struct Case {
    bool device_rows, replicas;
    int micro_batches;
  };
  for (const auto& [device_rows, replicas, micro_batches] :
       {Case{false, false, 1}, Case{true, false, 1}, Case{true, true, 1}, Case{true, false, 2}}) {
    EmulatedDeviceRowsTransport device_transport(transport);
    TransformerForward forward(config, model->weights, *device);
    ExpertParallelExperts experts(config,
                                  replicas ? placement_with_replicas(config.num_experts(), transport.world_size())
                                           : experts::contiguous_placement(config.num_experts(), transport.world_size()).value(),
                                  transport, device_rows ? &device_transport : nullptr);
    experts.set_micro_batches(micro_batches);
    forward.set_routed_experts(&experts);
    DenseKvCache cache(config);
    Result<std::vector<float>> got = forward.forward(batch, cache);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), expected.size());
    const std::string what = GetParam().arch + (device_rows ? ", device rows" : ", staged rows") +
                             (replicas ? ", replicas" : "") + ", " + std::to_string(micro_batches) +
                             " micro-batch(es), rank " +
                             std::to_string(transport.rank()) + " of " + std::to_string(transport.world_size());
    EXPECT_EQ(std::memcmp(got->data(), expected.data(), expected.size() * sizeof(float)), 0) << what;
    if (device_rows) {
      // One rank computes every expert without an exchange (the routing stays on the device).
      if (transport.world_size() > 1) {
        EXPECT_GT(device_transport.row_exchanges, 0) << what;
      } else {
        EXPECT_EQ(device_transport.row_exchanges, 0) << what;
      }
      EXPECT_EQ(device_transport.host_buffers, 0) << what;
    }
    if (transport.world_size() > 1) EXPECT_GT(experts.stats().dispatch_bytes_sent, 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, DeviceEpOverMpi,
                         ::testing::Values(DeviceEpCase{"qwen3_moe", "nvfp4"}, DeviceEpCase{"deepseek_v3", "fp8"}),
                         [](const auto& info) { return info.param.arch; });

}  // namespace
}  // namespace moert::parallel
