// The warp matrix API (nvcuda::wmma: BF16 tensor-core tiles) for the kernels: CUDA's <mma.h>
// on the GPU (sm_80 and later), its emulation on the CPU (core/cuda/emulation/emulated_wmma.h).
// Include after core/cuda/cuda_api.h.
#pragma once

#if defined(MOERT_CUDA_EMULATION)
#include "core/cuda/emulation/emulated_wmma.h"
#else
#include <cuda_bf16.h>
#include <mma.h>
#endif
