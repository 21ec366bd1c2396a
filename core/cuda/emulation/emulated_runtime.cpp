#include "core/cuda/emulation/emulated_runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <ucontext.h>

#include <array>
#include <cstdio>
#include <memory>
#include <vector>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace moert::cuda_emulation {

namespace {

// Fibers: one per thread of the block running. A fiber runs until it waits at a barrier or
// returns; the scheduler (the launching thread) then runs the next runnable one, and when
// none is left opens every barrier whose live threads all wait there.
constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr int kBlockGroup = -1;  // waiting at __syncthreads; >= 0: at warp w's barrier

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;  // kFiberStackBytes from fiber_stacks()
  ThreadContext thread;
  enum class State { kRunnable, kWaiting, kDone } state = State::kRunnable;
  int group = kBlockGroup;
};

struct Scheduler {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<std::array<uint64_t, 64>> warp_slots;
  Fiber* running = nullptr;
  void (*body)(void*) = nullptr;
  void* closure = nullptr;
#if defined(__SANITIZE_ADDRESS__)
  void* main_fake_stack = nullptr;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif
};
thread_local Scheduler* active = nullptr;

// Fiber stacks, kept for the next launch (allocating and faulting in fresh ones per launch
// cost more than the kernels).
std::vector<std::unique_ptr<char[]>>& fiber_stacks() {
  thread_local std::vector<std::unique_ptr<char[]>> stacks;
  return stacks;
}

// AddressSanitizer must be told when the stack changes (its fiber annotations).
// Not inlined: swapcontext returns twice, which must not clobber the caller's locals.
[[gnu::noinline]] void enter_fiber(Scheduler& s, Fiber& fiber) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&s.main_fake_stack, fiber.stack, kFiberStackBytes);
#endif
  s.running = &fiber;
  swapcontext(&s.main, &fiber.context);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(s.main_fake_stack, nullptr, nullptr);
#endif
}

[[gnu::noinline]] void leave_fiber(Scheduler& s, bool finished) {
  Fiber& fiber = *s.running;
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack, s.main_stack_bottom, s.main_stack_size);
#endif
  swapcontext(&fiber.context, &s.main);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, &s.main_stack_bottom, &s.main_stack_size);
#endif
}

void fiber_entry() {
  Scheduler& s = *active;
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &s.main_stack_bottom, &s.main_stack_size);
#endif
  s.body(s.closure);
  s.running->state = Fiber::State::kDone;
  leave_fiber(s, true);
}

// Not inlined for the same reason as enter_fiber (getcontext returns twice).
[[gnu::noinline]] void prepare_fiber(Fiber& fiber) {
  getcontext(&fiber.context);
  fiber.context.uc_stack.ss_sp = fiber.stack;
  fiber.context.uc_stack.ss_size = kFiberStackBytes;
  fiber.context.uc_link = nullptr;
  makecontext(&fiber.context, fiber_entry, 0);
}

void wait_at(int group) {
  Scheduler& s = *active;
  s.running->state = Fiber::State::kWaiting;
  s.running->group = group;
  leave_fiber(s, false);
}

// Opens the barriers whose live threads all wait at them; false when none could open.
bool open_barriers(Scheduler& s) {
  bool opened = false;
  const size_t num_warps = s.warp_slots.size();
  for (int group = 0; group < static_cast<int>(num_warps); ++group) {
    bool all_here = true, any = false;
    for (size_t t = static_cast<size_t>(group) * 32; t < std::min(s.fibers.size(), static_cast<size_t>(group + 1) * 32); ++t) {
      const Fiber& f = s.fibers[t];
      if (f.state == Fiber::State::kDone) continue;
      any = true;
      all_here = all_here && f.state == Fiber::State::kWaiting && f.group == group;
    }
    if (any && all_here) {
      for (size_t t = static_cast<size_t>(group) * 32; t < std::min(s.fibers.size(), static_cast<size_t>(group + 1) * 32); ++t) {
        if (s.fibers[t].state == Fiber::State::kWaiting) s.fibers[t].state = Fiber::State::kRunnable;
      }
      opened = true;
    }
  }
  if (opened) return true;
  bool all_at_block = true, any = false;
  for (const Fiber& f : s.fibers) {
    if (f.state == Fiber::State::kDone) continue;
    any = true;
    all_at_block = all_at_block && f.state == Fiber::State::kWaiting && f.group == kBlockGroup;
  }
  if (!any || !all_at_block) return false;
  for (Fiber& f : s.fibers) {
    if (f.state == Fiber::State::kWaiting) f.state = Fiber::State::kRunnable;
  }
  return true;
}

}  // namespace

ThreadContext& current() {
  thread_local ThreadContext outside_a_kernel;
  return active != nullptr && active->running != nullptr ? active->running->thread : outside_a_kernel;
}

void sync_block() { wait_at(kBlockGroup); }
void sync_warp() { wait_at(static_cast<int>(current().thread_idx.x + current().block_dim.x *
                                            (current().thread_idx.y + current().block_dim.y * current().thread_idx.z)) /
                           32); }

void run_grid(dim3 grid, dim3 block, void (*body)(void* closure), void* closure) {
  const unsigned threads_per_block = block.x * block.y * block.z;
  const unsigned num_blocks = grid.x * grid.y * grid.z;
  if (threads_per_block == 0 || num_blocks == 0) return;
  Scheduler s;
  s.body = body;
  s.closure = closure;
  s.fibers.resize(threads_per_block);
  s.warp_slots.resize((threads_per_block + 31) / 32);
  std::vector<std::unique_ptr<char[]>> stacks = std::move(fiber_stacks());  // a nested launch gets its own
  while (stacks.size() < threads_per_block) stacks.push_back(std::make_unique_for_overwrite<char[]>(kFiberStackBytes));
  for (unsigned t = 0; t < threads_per_block; ++t) s.fibers[t].stack = stacks[t].get();
  Scheduler* outer = active;
  active = &s;
  for (unsigned b = 0; b < num_blocks; ++b) {
    for (unsigned t = 0; t < threads_per_block; ++t) {
      Fiber& fiber = s.fibers[t];
      fiber.state = Fiber::State::kRunnable;
      fiber.thread.thread_idx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      fiber.thread.block_idx = dim3(b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y));
      fiber.thread.block_dim = block;
      fiber.thread.grid_dim = grid;
      fiber.thread.lane = t % 32;
      fiber.thread.warp_slots = s.warp_slots[t / 32].data();
      fiber.thread.exchange_parity = 0;
      prepare_fiber(fiber);
    }
    for (;;) {
      bool ran = false;
      for (Fiber& fiber : s.fibers) {
        if (fiber.state != Fiber::State::kRunnable) continue;
        enter_fiber(s, fiber);
        ran = true;
      }
      if (ran) continue;
      if (std::all_of(s.fibers.begin(), s.fibers.end(), [](const Fiber& f) { return f.state == Fiber::State::kDone; })) {
        break;
      }
      if (!open_barriers(s)) {
        std::fprintf(stderr, "emulated kernel: the threads of block %u wait at different barriers (a GPU would hang)\n", b);
        std::abort();
      }
    }
  }
  s.running = nullptr;
  active = outer;
  fiber_stacks() = std::move(stacks);
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

bool is_device_memory(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(allocations_mutex());
  auto it = allocations().upper_bound(address);
  if (it == allocations().begin()) return false;
  --it;
  return address < it->first + it->second;
}

// The open stream capture (one at a time: every emulated stream is the same stream).
struct Capture {
  bool open = false;
  bool invalidated = false;
  std::vector<std::function<void()>> work;
};
Capture& capture() {
  static Capture state;
  return state;
}
// A call a capture forbids: the capture can only end invalidated.
cudaError_t invalidate_capture() {
  capture().invalidated = true;
  return cudaErrorStreamCaptureUnsupported;
}

}  // namespace

static std::atomic<int> compute_capability_major{9}, compute_capability_minor{0};
void set_compute_capability(int major, int minor) {
  compute_capability_major = major;
  compute_capability_minor = minor;
}

bool capturing() { return capture().open; }
void record(std::function<void()> work) {
  Capture& c = capture();
  if (!c.invalidated) c.work.push_back(std::move(work));
}

}  // namespace moert::cuda_emulation

using namespace moert::cuda_emulation;

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  if (attribute == cudaDevAttrComputeCapabilityMajor) *value = compute_capability_major;
  else if (attribute == cudaDevAttrComputeCapabilityMinor) *value = compute_capability_minor;
  else return cudaErrorInvalidValue;
  return cudaSuccess;
}
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
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
  if (capturing()) return invalidate_capture();
  return cudaMalloc(ptr, bytes);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) {
  if (capturing()) return invalidate_capture();
  return cudaFree(ptr);
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (capturing()) return invalidate_capture();
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  if (capturing()) {
    // A graph copies between device buffers only (host memory would be read at replay).
    if (!is_device_memory(dst) || !is_device_memory(src)) return invalidate_capture();
    record([=] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  if (capturing()) {
    record([=] { std::memset(dst, value, bytes); });
    return cudaSuccess;
  }
  if (bytes > 0) std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return capturing() ? invalidate_capture() : cudaSuccess; }
// Streams are synchronous here: events order nothing.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = nullptr;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = {};
  if (is_device_memory(ptr)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(ptr);
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
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  }
  return "unknown error";
}

struct CUgraph_st {
  std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> work;
};

cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  Capture& c = capture();
  if (c.open) return cudaErrorInvalidValue;
  c = Capture{};
  c.open = true;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  Capture& c = capture();
  *graph = nullptr;
  if (!c.open) return cudaErrorInvalidValue;
  c.open = false;
  if (c.invalidated) return cudaErrorStreamCaptureInvalidated;
  *graph = new CUgraph_st{std::move(c.work)};
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->work};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  if (exec == nullptr || capturing()) return cudaErrorInvalidValue;
  for (const std::function<void()>& work : exec->work) work();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
