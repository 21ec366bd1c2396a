// CUDA RMSNorm, the device twin of rms_norm_rows (runtime/model/reference_forward.h).
// Host launchers only: raw device pointers, sizes and a stream. No CUDA headers here.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace moert::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device.
int device_count();

// x: [rows, dim] device memory, normalised in place: x * rsqrt(mean(x^2) + eps) * weight.
// Returns 0 on success or the CUDA error code.
int rms_norm_rows(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps, CUstream_st* stream);

// Host-memory convenience for tests: copies in, runs, copies back, synchronises.
int rms_norm_rows_host(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps);

}  // namespace moert::cuda
