#include "runtime/backend/factory/backend_factory.h"

#include "core/log.h"
#include "runtime/backend/cpu/cpu_backend.h"

#if defined(MOERT_HAS_CUDA_BACKEND)
#include "runtime/backend/cuda/cuda_backend.h"
#endif
#if defined(MOERT_HAS_NCCL_TRANSPORT)
#include "runtime/comm/nccl_transport.h"
#endif

namespace moert::backend {

Result<DeviceChoice> parse_device(const std::string& name) {
  if (name == "cpu") return DeviceChoice::kCpu;
  if (name == "cuda") return DeviceChoice::kCuda;
  return invalid_argument("--device '" + name + "' is not cpu or cuda");
}

Result<std::unique_ptr<Backend>> open_device(DeviceChoice choice, int local_rank, ThreadPool& pool) {
  if (choice == DeviceChoice::kCpu) return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(pool));
#if defined(MOERT_HAS_CUDA_BACKEND)
  return cuda::make_cuda_backend(local_rank);
#else
  (void)local_rank;
  return unsupported("--device cuda: this moert was built without CUDA (configure with -DMOERT_WITH_CUDA=ON and "
                     "the CUDA toolkit installed)");
#endif
}

Result<RowTransportChoice> parse_row_transport(const std::string& name) {
  if (name == "auto") return RowTransportChoice::kAuto;
  if (name == "nccl") return RowTransportChoice::kNccl;
  if (name == "mpi") return RowTransportChoice::kMpi;
  return invalid_argument("--ep-transport '" + name + "' is not auto, nccl or mpi");
}

Status check_row_transport(RowTransportChoice choice, DeviceChoice device) {
  if (choice == RowTransportChoice::kNccl && device != DeviceChoice::kCuda) {
    return unsupported("--ep-transport nccl moves device buffers: it needs --device cuda");
  }
  return Status::ok();
}

Result<std::unique_ptr<comm::Transport>> open_row_transport(RowTransportChoice choice, const Backend& backend,
                                                            comm::Transport& control) {
  const bool on_cuda = backend.device().kind == DeviceKind::kCuda;
  if (choice == RowTransportChoice::kMpi) return std::unique_ptr<comm::Transport>();
  MOERT_RETURN_IF_ERROR(check_row_transport(choice, on_cuda ? DeviceChoice::kCuda : DeviceChoice::kCpu));
#if defined(MOERT_HAS_NCCL_TRANSPORT)
  if (!on_cuda) return std::unique_ptr<comm::Transport>();
  comm::NcclTransportOptions options;
  options.device = backend.device().index;
  Result<std::unique_ptr<comm::Transport>> nccl = comm::make_nccl_transport(control, options);
  if (nccl.is_ok()) return nccl;
  // make_nccl_transport fails on every rank alike, so every rank takes the same way here.
  if (choice == RowTransportChoice::kAuto) {
    MOERT_WARN("--ep-transport auto: NCCL could not be set up (" << nccl.status().message()
                                                                 << "); the expert rows go through host memory");
    return std::unique_ptr<comm::Transport>();
  }
  return unsupported("--ep-transport nccl: NCCL could not be set up (" + nccl.status().message() +
                     "); --ep-transport mpi moves the rows through host memory");
#else
  (void)control;
  if (choice == RowTransportChoice::kNccl) {
    return unsupported("--ep-transport nccl: this moert was built without NCCL (configure with CUDA and NCCL found)");
  }
  return std::unique_ptr<comm::Transport>();
#endif
}

}  // namespace moert::backend
