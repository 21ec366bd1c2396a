// Simple, exact references for the backend ops that have no kernel module of their own:
// plain scalar C++ (no ISA code), used by CpuBackend as its implementation and by the
// conformance harness as the baseline for other backends.
#pragma once

#include <cstdint>

namespace moert::backend {

// x: [R, dim] normalised in place: x * rsqrt(mean(x^2) + eps) * weight (sum of squares in
// float64, rounded once).
void reference_rms_norm(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps);

// Index of the largest value; the lowest index wins ties.
int32_t reference_argmax(const float* values, int64_t count);

}  // namespace moert::backend
