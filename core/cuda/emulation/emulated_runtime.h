// The CUDA kernels of runtime/cuda run on the CPU through this emulation, so the kernels and
// the CudaBackend glue are tested here (no GPU) by the same conformance harness as the CPU
// backend (docs/cuda-backend.md §Emulation). It provides, for host compilers only:
//  * the kernel language subset the kernels use: __global__/__device__/__shared__,
//    threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_xor_sync / __shfl_sync;
//  * launch(): a grid's blocks run one after another; a block's threads are fibers on the
//    calling thread (ucontext), each running until it reaches a barrier (__syncthreads, a warp
//    shuffle) or returns, and a barrier opens once every live thread of its block or warp is
//    there (a __shared__ variable is a function-local static: shared by the threads of the
//    one block running). A thread that returns leaves the barriers, as on a GPU. Threads that
//    wait at different barriers forever are reported and abort (a GPU would hang);
//  * the runtime API calls the backend glue uses, over host memory: "device" allocations are
//    recorded so cudaPointerGetAttributes tells them from other host memory, streams are
//    synchronous;
//  * stream capture and graphs (CUDA graphs): while a capture is open, launches, async
//    copies and memsets are recorded instead of run (every stream is one here), and a graph
//    launch runs them again in order. What a capture forbids on a GPU is an error here too,
//    and ends the capture as invalidated: synchronising, a synchronous copy, a copy with a
//    host side, stream-ordered allocation (the backend keeps to these rules:
//    docs/cuda-backend.md, Step graphs).
// Invariants the kernels must keep to run here: warp-level calls are made by every thread
// of the warp, __syncthreads by every live thread of the block, and no kernel relies on
// __shared__ memory being initialised.
#pragma once

#if defined(__CUDACC__)
#error "emulated_runtime.h is for host compilers; nvcc uses the real CUDA runtime"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/cuda/emulation/emulated_device.h"

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

struct ThreadContext {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned lane = 0;
  uint64_t* warp_slots = nullptr;  // [2, 32] the shuffle slots of this thread's warp
  unsigned exchange_parity = 0;    // which half of warp_slots the next shuffle uses
};
// The emulated GPU thread running now.
ThreadContext& current();
// Waits until every live thread of the block (sync_block) or of the warp (sync_warp) is here.
void sync_block();
void sync_warp();

// Runs every block of the grid, in order; returns when all have finished.
void run_grid(dim3 grid, dim3 block, void (*body)(void* closure), void* closure);

// Whether a stream capture is open; record() appends work to it.
bool capturing();
void record(std::function<void()> work);

template <typename... Params, typename... Args>
void launch(dim3 grid, dim3 block, void (*kernel)(Params...), Args&&... args) {
  if (capturing()) {  // the arguments are copied now, as a GPU graph node copies them
    record([grid, block, kernel, params = std::tuple<std::decay_t<Params>...>(static_cast<Params>(args)...)] {
      std::apply([&](const auto&... values) { launch(grid, block, kernel, values...); }, params);
    });
    return;
  }
  auto call = [&] { kernel(static_cast<Params>(args)...); };
  run_grid(grid, block, [](void* closure) { (*static_cast<decltype(call)*>(closure))(); }, &call);
}

// A shuffle: every lane publishes its value, one barrier, then reads its source's. The slots
// alternate between two halves per exchange, so no second barrier is needed: a lane writes
// the half of exchange k + 2 only after every lane passed exchange k + 1's barrier, hence
// read exchange k's value.
template <typename T>
T exchange_in_warp(T value, unsigned source_lane) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  ThreadContext& self = current();
  uint64_t* slots = self.warp_slots + 32 * self.exchange_parity;
  self.exchange_parity ^= 1u;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  slots[self.lane] = bits;
  sync_warp();
  const uint64_t other = slots[source_lane % 32];
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

inline void __syncthreads() { ::moert::cuda_emulation::sync_block(); }
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
                   cudaErrorNoDevice = 100, cudaErrorStreamCaptureUnsupported = 900,
                   cudaErrorStreamCaptureInvalidated = 901 };
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
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDisableTiming = 2;

enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
// The emulated device reports compute capability 9.0 (Hopper) unless a test sets another
// (moert::cuda_emulation::set_compute_capability) to take the code paths of newer GPUs.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
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
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
constexpr unsigned cudaStreamNonBlocking = 1;

enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
// Returns cudaErrorStreamCaptureInvalidated (and no graph) when a forbidden call happened.
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
