// The CUDA kernels of runtime/cuda run on the CPU through this emulation, so the kernels and
// the CudaBackend glue are tested here (no GPU) by the same conformance harness as the CPU
// backend (docs/cuda-backend.md §Emulation). It provides, for host compilers only:
//  * the kernel language subset the kernels use: __global__/__device__/__shared__,
//    threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_xor_sync / __shfl_sync;
//  * launch(): a grid's blocks run one after another on one set of real threads (thread t of
//    every block), which meet at barriers (a __shared__ variable is a function-local static:
//    shared by the threads of the one block running). A thread that returns leaves the
//    block's barriers, as on a GPU;
//  * the runtime API calls the backend glue uses, over host memory: "device" allocations are
//    recorded so cudaPointerGetAttributes tells them from other host memory, streams are
//    synchronous.
// Invariants the kernels must keep to run here: warp-level calls are made by every thread
// of the warp, __syncthreads by every live thread of the block, and no kernel relies on
// __shared__ memory being initialised.
#pragma once

#if defined(__CUDACC__)
#error "emulated_runtime.h is for host compilers; nvcc uses the real CUDA runtime"
#endif

#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

namespace moert::cuda_emulation {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct Warp {
  explicit Warp(std::ptrdiff_t size) : barrier(size) {}
  std::barrier<> barrier;
  uint64_t slots[32] = {};
};

struct ThreadContext {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
  std::barrier<>* block_barrier = nullptr;
  Warp* warp = nullptr;
  unsigned lane = 0;
};
ThreadContext& current();

// Runs every block of the grid, in order, on block_dim real threads; returns when all have
// finished.
void run_grid(dim3 grid, dim3 block, void (*body)(void* closure), void* closure);

template <typename... Params, typename... Args>
void launch(dim3 grid, dim3 block, void (*kernel)(Params...), Args&&... args) {
  auto call = [&] { kernel(static_cast<Params>(args)...); };
  run_grid(grid, block, [](void* closure) { (*static_cast<decltype(call)*>(closure))(); }, &call);
}

template <typename T>
T exchange_in_warp(T value, unsigned source_lane) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  Warp& warp = *current().warp;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  warp.slots[current().lane] = bits;
  warp.barrier.arrive_and_wait();
  const uint64_t other = warp.slots[source_lane % 32];
  warp.barrier.arrive_and_wait();
  T result;
  std::memcpy(&result, &other, sizeof(T));
  return result;
}

}  // namespace moert::cuda_emulation

using moert::cuda_emulation::dim3;
#define threadIdx (::moert::cuda_emulation::current().thread_idx)
#define blockIdx (::moert::cuda_emulation::current().block_idx)
#define blockDim (::moert::cuda_emulation::current().block_dim)
#define gridDim (::moert::cuda_emulation::current().grid_dim)

inline void __syncthreads() { ::moert::cuda_emulation::current().block_barrier->arrive_and_wait(); }
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask, int /*width*/ = 32) {
  return ::moert::cuda_emulation::exchange_in_warp(value, ::moert::cuda_emulation::current().lane ^
                                                              static_cast<unsigned>(lane_mask));
}
template <typename T>
T __shfl_sync(unsigned /*mask*/, T value, int source_lane, int /*width*/ = 32) {
  return ::moert::cuda_emulation::exchange_in_warp(value, static_cast<unsigned>(source_lane));
}

// ---- The runtime API subset (host memory; streams are synchronous) ----------------------
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                   cudaErrorNoDevice = 100 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
constexpr unsigned cudaStreamNonBlocking = 1;
