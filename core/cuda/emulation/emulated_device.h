// What tests may set or read of the emulated GPU (core/cuda/emulation), without the
// kernel-language macros of emulated_runtime.h.
#pragma once

#include <cstdint>

namespace moert::cuda_emulation {

// The compute capability cudaDeviceGetAttribute reports from now on (default 9.0, Hopper):
// 10 takes the code paths of Blackwell (block-scaled FP4 tensor cores).
void set_compute_capability(int major, int minor);

// How many emulated block-scaled GEMMs have run (quant/cuda/block_scaled_gemm.h).
int64_t block_scaled_gemm_calls();

}  // namespace moert::cuda_emulation
