#include "runtime/cuda/emulation/emulated_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace moert::cuda_emulation {

ThreadContext& current() {
  thread_local ThreadContext context;
  return context;
}

// One set of threads serves the whole grid: thread t runs thread t of every block in turn.
// A block's barriers are made afresh for it (a thread that returned early dropped out of the
// previous block's), by the completion step of the end-of-block barrier, when no thread is
// inside a block.
void run_grid(dim3 grid, dim3 block, void (*body)(void* closure), void* closure) {
  const unsigned threads_per_block = block.x * block.y * block.z;
  const unsigned num_blocks = grid.x * grid.y * grid.z;
  if (threads_per_block == 0 || num_blocks == 0) return;
  struct BlockSync {
    explicit BlockSync(unsigned size) : barrier(size) {
      for (unsigned first = 0; first < size; first += 32) warps.push_back(std::make_unique<Warp>(std::min(32u, size - first)));
    }
    std::barrier<> barrier;
    std::vector<std::unique_ptr<Warp>> warps;
  };
  std::optional<BlockSync> sync;
  sync.emplace(threads_per_block);
  auto renew = [&]() noexcept { sync.emplace(threads_per_block); };
  std::barrier<decltype(renew)> end_of_block(threads_per_block, renew);
  std::vector<std::thread> threads;
  threads.reserve(threads_per_block);
  for (unsigned t = 0; t < threads_per_block; ++t) {
    threads.emplace_back([&, t] {
      ThreadContext& context = current();
      context.thread_idx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      context.block_dim = block;
      context.grid_dim = grid;
      context.lane = t % 32;
      for (unsigned b = 0; b < num_blocks; ++b) {
        context.block_idx = dim3(b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y));
        context.block_barrier = &sync->barrier;
        context.warp = sync->warps[t / 32].get();
        body(closure);
        // A finished thread no longer takes part in this block's barriers (as on the GPU).
        context.warp->barrier.arrive_and_drop();
        context.block_barrier->arrive_and_drop();
        end_of_block.arrive_and_wait();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

namespace {

// "Device" allocations: start -> size, to tell them from other host memory.
std::mutex& allocations_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<uintptr_t, size_t>& allocations() {
  static std::map<uintptr_t, size_t> map;
  return map;
}
thread_local cudaError_t last_error = cudaSuccess;

}  // namespace
}  // namespace moert::cuda_emulation

using namespace moert::cuda_emulation;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(allocations_mutex());
  allocations()[reinterpret_cast<uintptr_t>(*ptr)] = std::max<size_t>(bytes, 1);
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(allocations_mutex());
    if (allocations().erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return cudaErrorInvalidValue;
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  if (bytes > 0) std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = {};
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(allocations_mutex());
  auto it = allocations().upper_bound(address);
  if (it != allocations().begin()) {
    --it;
    if (address < it->first + it->second) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = const_cast<void*>(ptr);
    }
  }
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  }
  return "unknown error";
}
