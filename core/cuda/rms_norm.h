// CUDA RMSNorm, the device twin of backend::reference_rms_norm: host launcher only (device
// pointers, sizes, a stream; no CUDA headers).
#pragma once

#include <cstdint>

#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// x: [R, dim], normalised in place: x * rsqrt(mean(x^2) + eps) * weight[dim]. The sum of
// squares is reduced in float64, like the CPU. Returns 0 or the CUDA error code.
int rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
