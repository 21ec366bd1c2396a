// Where a model computes: `--device cpu|cuda`, chosen once here (the only place that knows
// which backends this build has; docs/cuda-backend.md).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/backend/backend.h"

namespace moert::backend {

enum class DeviceChoice { kCpu, kCuda };

// "cpu" or "cuda"; anything else is kInvalidArgument naming the value.
Result<DeviceChoice> parse_device(const std::string& name);

// The backend for `choice` on this process: null for kCpu (the model makes a CpuBackend over
// its thread pool); for kCuda the GPU local_rank % device count. kUnsupported, with one line
// naming the problem, when the build has no CUDA backend or no GPU is visible.
Result<std::unique_ptr<Backend>> open_device(DeviceChoice choice, int local_rank);

}  // namespace moert::backend
