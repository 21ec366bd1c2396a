// Included by the .cu files and the backend glue only (never by a launcher header): the
// CUDA runtime, or its emulation on the CPU (core/cuda/emulation), and one way to launch.
//   MOERT_LAUNCH(kernel, grid, block, stream, args...)  ==  kernel<<<grid, block, 0, stream>>>(args...)
// `kernel` is one token: name a template instance through a function pointer first.
#pragma once

#include "core/cuda/namespace.h"

#if defined(MOERT_CUDA_EMULATION)
#include "core/cuda/emulation/emulated_runtime.h"
#define MOERT_LAUNCH(kernel, grid, block, stream, ...) \
  ::moert::cuda_emulation::launch(grid, block, kernel, __VA_ARGS__)
#else
#include <cuda_runtime.h>
#define MOERT_LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif
