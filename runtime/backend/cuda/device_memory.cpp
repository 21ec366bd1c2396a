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

bool is_device_pointer(const void* ptr) {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old drivers: clear the sticky error
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// Host copy of a float array that may live on the device.
std::vector<float> host_floats(const float* data, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  if (capturing()) {
    capture_fails("an op brings device data to the host");
    return host;
  }
  if (count > 0) {
    MOERT_CUDA_CHECK(cudaMemcpyAsync(host.data(), data, static_cast<size_t>(count) * sizeof(float), cudaMemcpyDefault,
                                     process_stream()));
    MOERT_CUDA_CHECK(cudaStreamSynchronize(process_stream()));
  }
  return host;
}

}  // namespace moert::MOERT_CUDA_NS::backend_detail
