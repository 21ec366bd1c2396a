// The CUDA backend's device memory (docs/cuda-backend.md): the process's streams, step-graph
// capture and its arena, device allocation, the placed weights, and the per-op staging of
// host arguments. Private to runtime/backend/cuda (includes the CUDA
// runtime, or its emulation: core/cuda/cuda_api.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_api.h"
#include "runtime/backend/backend.h"

#define MOERT_CUDA_CHECK(call)                                                                      \
  do {                                                                                              \
    const cudaError_t moert_cuda_status = static_cast<cudaError_t>(call);                           \
    MOERT_CHECK(moert_cuda_status == cudaSuccess, #call << ": " << cudaGetErrorString(moert_cuda_status)); \
  } while (0)

namespace moert::MOERT_CUDA_NS::backend_detail {

// The process's stream: every backend of the process (the model, a draft model) orders its
// work on it, and Buffer's release function (a plain function pointer) frees onto it.
cudaStream_t process_stream();
// The process's copy stream: weight uploads run on it, and the compute stream waits for each
// through an event, so an upload never waits for compute queued before it.
cudaStream_t copy_stream();

// ---- Step-graph capture (docs/cuda-backend.md, Step graphs) --------------------------------
// While a capture is open on the process stream nothing runs; the ops are recorded. Memory
// the recorded ops allocate comes from the capture's arena: plain device allocations owned
// by the graph (freed with it), reused within the capture once released (the recorded ops
// run in capture order, so a block released by one op is free for every later one). Calls
// a capture forbids (reading host data, bringing data back, synchronising, stream-ordered
// allocation) are not made: the first one is recorded as the reason the capture fails.
class CaptureArena {
 public:
  CaptureArena() = default;
  CaptureArena(const CaptureArena&) = delete;
  CaptureArena& operator=(const CaptureArena&) = delete;
  ~CaptureArena() {
    for (void* block : blocks_) cudaFree(block);
  }
  void* allocate(int64_t bytes) {
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 255) / 256 * 256;
    void* block = nullptr;
    if (auto reusable = free_.find(size); reusable != free_.end()) {
      block = reusable->second;
      free_.erase(reusable);
    } else {
      MOERT_CUDA_CHECK(cudaMalloc(&block, size));  // not stream-ordered: allowed in a relaxed capture
      blocks_.push_back(block);
    }
    live_[block] = size;
    return block;
  }
  // False when `block` is not one of this arena's live blocks.
  bool release(void* block) {
    auto it = live_.find(block);
    if (it == live_.end()) return false;
    free_.emplace(it->second, block);
    live_.erase(it);
    return true;
  }
  size_t live_blocks() const { return live_.size(); }

 private:
  std::vector<void*> blocks_;
  std::multimap<size_t, void*> free_;  // released blocks by size
  std::map<void*, size_t> live_;
};

struct CaptureState {
  bool open = false;
  std::string failure;                   // the first forbidden call, empty if none
  std::unique_ptr<CaptureArena> arena;
  std::vector<void*> deferred_frees;     // memory from before the capture released during it
};
CaptureState& capture_state();
bool capturing();
// A call the open capture cannot record: remembered (the first) and not made.
void capture_fails(const std::string& reason);

// Device memory on the process stream (from the capture's arena while one is open).
void release_device(void* data);
void* device_alloc(int64_t bytes);

// The backend's placed weights: device copies of host weight regions, made when placed
// (Backend::prepare_weights, place_host_weights), found again by the host view's address.
// Nothing is uploaded on use: a weight that was not placed is staged per call (Staging).
class ResidentWeights {
 public:
  // Uploads host [data, data + bytes) now (again if it was placed smaller before).
  void place(const void* data, int64_t bytes) {
    if (data == nullptr || bytes <= 0) return;
    const auto address = reinterpret_cast<uintptr_t>(data);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto placed = copies_.find(address); placed != copies_.end() && placed->second.bytes >= static_cast<uint64_t>(bytes)) {
      return;
    }
    MOERT_CHECK(!capturing(), "a weight is placed while a step graph is recorded");
    void* device = nullptr;
    MOERT_CUDA_CHECK(cudaMalloc(&device, static_cast<size_t>(bytes)));
    MOERT_CUDA_CHECK(cudaMemcpyAsync(device, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, copy_stream()));
    cudaEvent_t uploaded = nullptr;
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
    MOERT_CUDA_CHECK(cudaEventRecord(uploaded, copy_stream()));
    MOERT_CUDA_CHECK(cudaStreamWaitEvent(process_stream(), uploaded, 0));
    MOERT_CUDA_CHECK(cudaEventDestroy(uploaded));  // released once the wait is done
    if (auto old = copies_.find(address); old != copies_.end()) cudaFree(old->second.device);
    copies_[address] = {device, static_cast<uint64_t>(bytes)};
  }
  // The device copy of host [data, data + bytes) when it lies in a placed region, else null.
  const void* find(const void* data, int64_t bytes) {
    const auto address = reinterpret_cast<uintptr_t>(data);
    std::lock_guard<std::mutex> lock(mutex_);
    auto region = copies_.upper_bound(address);
    if (region == copies_.begin()) return nullptr;
    --region;
    if (address + static_cast<uint64_t>(bytes) > region->first + region->second.bytes) return nullptr;
    return static_cast<const uint8_t*>(region->second.device) + (address - region->first);
  }
  ~ResidentWeights() {
    for (auto& [address, copy] : copies_) cudaFree(copy.device);
  }

 private:
  struct Copy {
    void* device;
    uint64_t bytes;
  };
  std::mutex mutex_;
  std::map<uintptr_t, Copy> copies_;  // by host address
};

// The device side of one op's arguments, by the device each names (core/device.h): arrays on
// this backend's device pass through, host arrays are staged for the call (outputs copied
// back, and the stream synchronised, by finish()), arrays of another device fail. Weights
// (host views by the op contract) resolve to their placed copies, or are staged. Temporaries
// are freed onto the stream, after the work that reads them.
class Staging {
 public:
  Staging(ResidentWeights& weights, Device device) : weights_(weights), device_(device) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    for (void* temporary : temporaries_) release_device(temporary);
  }

  // An input array of `count` T.
  template <typename T>
  const T* in(DevicePtr<T> data, int64_t count) {
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    if (data == nullptr || bytes <= 0) return data.get();  // nothing is read
    if (!data.on_host()) return data.on(device_, "an op's input");
    return static_cast<const T*>(upload(data.get(), bytes));
  }
  template <typename T>
  const T* in(const std::vector<T>& host, int64_t count) {
    return in(DevicePtr<const T>(host), count);
  }
  // A weight: its placed copy, else staged for this call.
  const void* weight(const void* data, int64_t bytes) {
    if (data == nullptr || bytes <= 0) return data;
    if (const void* resident = weights_.find(data, bytes)) return resident;
    all_weights_resident_ = false;
    return upload(data, bytes);
  }
  template <typename T>
  const T* weight(const T* data, int64_t count) {
    return static_cast<const T*>(weight(static_cast<const void*>(data), count * static_cast<int64_t>(sizeof(T))));
  }
  // A weight view: on this device as it is, else a host weight (above).
  const void* weight(const TensorView& view, int64_t bytes) {
    if (!(view.device == Device{})) return DevicePtr<const void>(view.data, view.device).on(device_, "a weight");
    return weight(static_cast<const void*>(view.data), bytes);
  }
  // Whether every weight() so far resolved to device memory that outlives this staging.
  bool all_weights_resident() const { return all_weights_resident_; }
  // An output (read_back_only) or an in/out array.
  template <typename T>
  T* out(DevicePtr<T> data, int64_t count, bool also_input = false) {
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    if (data == nullptr || bytes <= 0) return data.get();  // nothing is written
    if (!data.on_host()) return data.on(device_, "an op's output");
    void* device = also_input ? const_cast<void*>(upload(data.get(), bytes)) : temporary(bytes);
    pending_downloads_.push_back({data.get(), device, bytes});
    return static_cast<T*>(device);
  }
  template <typename T>
  T* inout(DevicePtr<T> data, int64_t count) {
    return out(data, count, true);
  }
  void* temporary(int64_t bytes) {
    void* device = device_alloc(bytes);
    temporaries_.push_back(device);
    return device;
  }
  // Device scratch of `count` T, freed with this staging.
  template <typename T>
  T* temporary_array(int64_t count) {
    return static_cast<T*>(temporary(count * static_cast<int64_t>(sizeof(T))));
  }
  // Checks the launch, copies host outputs back and waits for them.
  void finish(int launch_status, const char* op) {
    MOERT_CHECK(launch_status == 0, "CUDA op " << op << ": " << cudaGetErrorString(static_cast<cudaError_t>(launch_status)));
    if (capturing() && reads_host_) capture_fails(std::string("op ") + op + " reads host memory");
    if (capturing() && !pending_downloads_.empty()) {
      capture_fails(std::string("op ") + op + " writes host memory");
      pending_downloads_.clear();
    }
    for (const Download& download : pending_downloads_) {
      MOERT_CUDA_CHECK(cudaMemcpyAsync(download.host, download.device, static_cast<size_t>(download.bytes),
                                       cudaMemcpyDeviceToHost, process_stream()));
    }
    if (!pending_downloads_.empty()) MOERT_CUDA_CHECK(cudaStreamSynchronize(process_stream()));
    pending_downloads_.clear();
  }

 private:
  const void* upload(const void* data, int64_t bytes) {
    void* device = temporary(bytes);
    if (capturing()) {
      reads_host_ = true;  // reported by finish(), which knows the op
      return device;
    }
    // From pageable memory the copy has read `data` when the call returns.
    MOERT_CUDA_CHECK(cudaMemcpyAsync(device, data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                     process_stream()));
    return device;
  }
  struct Download {
    void* host;
    void* device;
    int64_t bytes;
  };
  ResidentWeights& weights_;
  Device device_;
  std::vector<void*> temporaries_;
  std::vector<Download> pending_downloads_;
  bool all_weights_resident_ = true;
  bool reads_host_ = false;
};


class CudaStepGraph : public backend::Backend::StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, std::unique_ptr<CaptureArena> arena) : exec_(exec), arena_(std::move(arena)) {}
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;
  ~CudaStepGraph() override {
    cudaStreamSynchronize(process_stream());  // a replay in flight still uses the arena
    cudaGraphExecDestroy(exec_);
  }
  void replay() override { MOERT_CUDA_CHECK(cudaGraphLaunch(exec_, process_stream())); }

 private:
  cudaGraphExec_t exec_;
  std::unique_ptr<CaptureArena> arena_;  // the memory the recorded ops use
};

// Backend::capture: records the ops `record` issues on the process stream into a graph with
// its own arena, or says why it could not (the first forbidden call), having run nothing.
Result<std::unique_ptr<backend::Backend::StepGraph>> capture_step_graph(const std::function<void()>& record);

}  // namespace moert::MOERT_CUDA_NS::backend_detail
