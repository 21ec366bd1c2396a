// The NCCL transport on device buffers, under mpirun with the MPI transport as bootstrap.
// Its run gate (mpi_test_main.h) decides before any case runs: with fewer GPUs than ranks
// (e.g. none) only DeviceCountIsTheRuntimeCountOrZero runs and the binary reports itself
// skipped (77), or fails where MOERT_EXPECT_GPU=1 (the device check).
#include "runtime/comm/nccl_transport.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "tests/runtime/comm/comm_checks.h"
#include "tests/runtime/comm/mpi_test_main.h"

namespace moert::comm {
namespace {

using testing::encode_element;
using testing::mpi_test_transport;
using testing::num_elements;

// Device memory holding a copy of `host`.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes() == 0 ? 1 : bytes()), cudaSuccess);
    if (bytes() > 0) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() { return static_cast<T*>(data_); }
  size_t bytes() const { return size_ * sizeof(T); }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (bytes() > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }

 private:
  size_t size_;
  void* data_ = nullptr;
};

bool enough_devices(const Transport& bootstrap) {
  const int num_devices = cuda_device_count();
  return num_devices > 0 && num_devices >= bootstrap.world_size();
}

const bool gate_installed = testing::set_run_gate([](Transport& bootstrap) {
  testing::RunGate gate;
  if (enough_devices(bootstrap)) return gate;
  const char* expect = std::getenv("MOERT_EXPECT_GPU");
  gate.reason = std::to_string(cuda_device_count()) + " CUDA devices for " + std::to_string(bootstrap.world_size()) + " ranks";
  if (expect != nullptr && std::string(expect) == "1") {
    gate.decision = testing::RunGate::kFail;
    gate.reason += " with MOERT_EXPECT_GPU=1";
  } else {
    gate.decision = testing::RunGate::kSkip;
    gate.filter = "NcclTransport.DeviceCountIsTheRuntimeCountOrZero";
  }
  return gate;
});

// NVIDIA device nodes (/dev/nvidia0, /dev/nvidia1, ...): what the driver exposes to this
// machine or container, counted without the CUDA runtime or nvidia-smi.
int nvidia_device_nodes() {
  std::error_code error;
  int nodes = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      ++nodes;
    }
  }
  return nodes;
}

// cuda_device_count() is the runtime's count, or 0 (never an error code or garbage) when the
// runtime finds no driver or device; without device nodes it must be 0. Where no device
// exists only that zero can be checked, so the test then reports itself skipped.
TEST(NcclTransport, DeviceCountIsTheRuntimeCountOrZero) {
  const int count = cuda_device_count();
  int runtime_count = -1;
  const cudaError_t status = cudaGetDeviceCount(&runtime_count);
  if (status == cudaSuccess) {
    EXPECT_EQ(count, runtime_count);
  } else {
    cudaGetLastError();  // clear the sticky error for the tests that follow
    EXPECT_EQ(count, 0) << "cudaGetDeviceCount failed (" << cudaGetErrorName(status) << ")";
  }
  const int nodes = nvidia_device_nodes();
  if (nodes == 0) {
    EXPECT_EQ(count, 0) << "CUDA devices counted without any /dev/nvidiaN node";
  } else {
    EXPECT_GE(count, 1) << nodes << " /dev/nvidiaN nodes, yet no CUDA device";
  }
}

TEST(NcclTransport, CollectivesAndAllToAllOnDeviceBuffers) {
  Transport& bootstrap = mpi_test_transport();
  ASSERT_TRUE(gate_installed && enough_devices(bootstrap)) << "run only where the gate lets every case run";
  NcclTransportOptions options;
  options.device = bootstrap.rank() % cuda_device_count();  // one node: rank = local rank
  auto made = make_nccl_transport(bootstrap, options);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  Transport& nccl = **made;
  const int n = nccl.world_size();
  const int me = nccl.rank();
  EXPECT_EQ(nccl.buffer_location(), BufferLocation::kDevice);

  {
    DeviceArray<int64_t> sums(std::vector<int64_t>{me, 10 * me});
    EXPECT_TRUE(nccl.all_reduce(sums.data(), 2, ReduceOp::kSum).is_ok());
    EXPECT_EQ(sums.to_host(), (std::vector<int64_t>{n * (n - 1) / 2, 10 * n * (n - 1) / 2}));
    DeviceArray<float> maxes(std::vector<float>{static_cast<float>(me), -static_cast<float>(me)});
    EXPECT_TRUE(nccl.all_reduce(maxes.data(), 2, ReduceOp::kMax).is_ok());
    EXPECT_EQ(maxes.to_host(), (std::vector<float>{n - 1.0f, 0.0f}));
  }
  {
    std::vector<uint8_t> host(33, 0xEE);
    if (me == 0) {
      for (size_t j = 0; j < host.size(); ++j) host[j] = static_cast<uint8_t>(j * 3);
    }
    DeviceArray<uint8_t> data(host);
    EXPECT_TRUE(nccl.broadcast(data.data(), data.bytes(), 0).is_ok());
    std::vector<uint8_t> got = data.to_host();
    for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j], static_cast<uint8_t>(j * 3));
  }
  {
    DeviceArray<int64_t> send(std::vector<int64_t>{me * 7});
    DeviceArray<int64_t> recv(std::vector<int64_t>(static_cast<size_t>(n), -1));
    EXPECT_TRUE(nccl.gather(send.data(), sizeof(int64_t), recv.data(), 0).is_ok());
    if (me == 0) {
      std::vector<int64_t> got = recv.to_host();
      for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], r * 7);
    }
  }
  for (int seed = 0; seed < 5; ++seed) {
    std::vector<int64_t> send_counts(static_cast<size_t>(n)), send_bytes, recv_bytes;
    std::vector<uint64_t> send_host;
    for (int peer = 0; peer < n; ++peer) {
      send_counts[static_cast<size_t>(peer)] = num_elements(me, peer, seed);
      for (int64_t k = 0; k < num_elements(me, peer, seed); ++k) {
        send_host.push_back(encode_element(me, peer, k));
      }
      send_bytes.push_back(num_elements(me, peer, seed) * 8);
    }
    auto recv_counts = nccl.all_to_all_counts(send_counts);
    EXPECT_TRUE(recv_counts.is_ok()) << recv_counts.status().to_string();
    for (int peer = 0; peer < n; ++peer) {
      const int64_t expected = num_elements(peer, me, seed);
      if (recv_counts.is_ok()) {
        EXPECT_EQ((*recv_counts)[static_cast<size_t>(peer)], expected);
      }
      recv_bytes.push_back(expected * 8);
    }
    const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes);
    DeviceArray<uint64_t> send(send_host);
    DeviceArray<uint64_t> recv(std::vector<uint64_t>(static_cast<size_t>(cu_recv.back() / 8), 0));
    auto pending = nccl.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
    Status status = pending->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    std::vector<uint64_t> got = recv.to_host();
    int64_t num_wrong = 0;
    for (int src = 0; src < n; ++src) {
      for (int64_t k = 0; k < num_elements(src, me, seed); ++k) {
        num_wrong += got[static_cast<size_t>(cu_recv[static_cast<size_t>(src)] / 8 + k)] !=
                     encode_element(src, me, k);
      }
    }
    EXPECT_EQ(num_wrong, 0) << "seed " << seed;
  }
  EXPECT_TRUE(nccl.barrier().is_ok());
}

}  // namespace
}  // namespace moert::comm
