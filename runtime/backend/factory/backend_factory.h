// Where a model computes: `--device cpu|cuda`, chosen once here (the only place that knows
// which backends this build has; docs/cuda-backend.md).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "runtime/backend/backend.h"
#include "runtime/comm/transport.h"

namespace moert::backend {

enum class DeviceChoice { kCpu, kCuda };

// "cpu" or "cuda"; anything else is kInvalidArgument naming the value.
Result<DeviceChoice> parse_device(const std::string& name);

// The backend for `choice` on this process, never null: for kCpu the CPU backend over `pool`
// (which must outlive it); for kCuda the GPU local_rank % device count. kUnsupported, with
// one line naming the problem, when the build has no CUDA backend or no GPU is visible.
Result<std::unique_ptr<Backend>> open_device(DeviceChoice choice, int local_rank, ThreadPool& pool);

// `--ep-transport`: what moves the expert-parallel rows (docs/expert-parallel-gpu.md).
//   auto  NCCL when the model computes on a CUDA backend and the build has NCCL, else MPI;
//   nccl  NCCL (kUnsupported, one line, on the CPU backend or in a build without NCCL);
//   mpi   the job's host transport (a device backend's rows are staged through the host).
enum class RowTransportChoice { kAuto, kNccl, kMpi };
Result<RowTransportChoice> parse_row_transport(const std::string& name);
// kUnsupported, one line, when `choice` cannot serve a model computing on `device` (nccl moves
// device buffers: it needs cuda). open_row_transport checks it too; launchers call it early,
// before anything is written.
Status check_row_transport(RowTransportChoice choice, DeviceChoice device);

// The payload transport for parallel::ExpertParallelExperts: NCCL over `control` (its
// bootstrap; must outlive the result) on `backend`'s GPU, or null where `control` itself
// moves the rows. Collective over `control` when it opens NCCL: every rank calls it with the
// same choice and backend kind.
Result<std::unique_ptr<comm::Transport>> open_row_transport(RowTransportChoice choice, const Backend& backend,
                                                            comm::Transport& control);

}  // namespace moert::backend
