#include "runtime/backend/backend_factory.h"

#if defined(MOERT_HAS_CUDA_BACKEND)
#include "runtime/cuda/cuda_backend.h"
#endif

namespace moert::backend {

Result<DeviceChoice> parse_device(const std::string& name) {
  if (name == "cpu") return DeviceChoice::kCpu;
  if (name == "cuda") return DeviceChoice::kCuda;
  return invalid_argument("--device '" + name + "' is not cpu or cuda");
}

Result<std::unique_ptr<Backend>> open_device(DeviceChoice choice, int local_rank) {
  if (choice == DeviceChoice::kCpu) return std::unique_ptr<Backend>();
#if defined(MOERT_HAS_CUDA_BACKEND)
  return cuda::make_cuda_backend(local_rank);
#else
  (void)local_rank;
  return unsupported("--device cuda: this moert was built without CUDA (configure with -DMOERT_WITH_CUDA=ON and "
                     "the CUDA toolkit installed)");
#endif
}

}  // namespace moert::backend
