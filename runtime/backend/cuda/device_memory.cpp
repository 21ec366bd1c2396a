#include "runtime/backend/cuda/device_memory.h"

#include <algorithm>

namespace moert::MOERT_CUDA_NS::backend_detail {

namespace {

cudaStream_t new_stream() {
  cudaStream_t created = nullptr;
  MOERT_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  return created;
}

}  // namespace

cudaStream_t process_stream() {
  static const cudaStream_t stream = new_stream();
  return stream;
}

cudaStream_t copy_stream() {
  static const cudaStream_t stream = new_stream();
  return stream;
}

CaptureState& capture_state() {
  static CaptureState state;
  return state;
}
bool capturing() { return capture_state().open; }
void capture_fails(const std::string& reason) {
  CaptureState& c = capture_state();
  if (c.failure.empty()) c.failure = reason;
}

void release_device(void* data) {
  CaptureState& c = capture_state();
  if (c.open) {
    if (!c.arena->release(data)) c.deferred_frees.push_back(data);
    return;
  }
  cudaFreeAsync(data, process_stream());
}

void* device_alloc(int64_t bytes) {
  if (capturing()) return capture_state().arena->allocate(bytes);
  void* data = nullptr;
  MOERT_CUDA_CHECK(cudaMallocAsync(&data, static_cast<size_t>(std::max<int64_t>(bytes, 1)), process_stream()));
  return data;
}

Result<std::unique_ptr<backend::Backend::StepGraph>> capture_step_graph(const std::function<void()>& record) {
  MOERT_CUDA_CHECK(cudaStreamSynchronize(copy_stream()));  // weight uploads in flight land first
  MOERT_CUDA_CHECK(cudaStreamSynchronize(process_stream()));
  CaptureState& c = capture_state();
  MOERT_CHECK(!c.open, "a step graph capture is already open");
  c = CaptureState{};
  c.arena = std::make_unique<CaptureArena>();
  MOERT_CUDA_CHECK(cudaStreamBeginCapture(process_stream(), cudaStreamCaptureModeRelaxed));
  c.open = true;
  record();
  c.open = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(process_stream(), &graph);
  std::string failure = c.failure;
  if (failure.empty() && ended != cudaSuccess) failure = std::string("capture ended with: ") + cudaGetErrorString(ended);
  if (failure.empty() && c.arena->live_blocks() != 0) failure = "a buffer allocated during the capture outlived it";
  for (void* data : c.deferred_frees) cudaFreeAsync(data, process_stream());
  std::unique_ptr<CaptureArena> arena = std::move(c.arena);
  c = CaptureState{};
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) failure = std::string("graph instantiation: ") + cudaGetErrorString(made);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!failure.empty()) {
    cudaGetLastError();  // a failed capture leaves its error sticky on some drivers
    return unsupported("step graph: " + failure);
  }
  return std::unique_ptr<backend::Backend::StepGraph>(new CudaStepGraph(exec, std::move(arena)));
}

}  // namespace moert::MOERT_CUDA_NS::backend_detail
