// Dense linear layers on the CPU: y[T, N] = x[T, K] . W[N, K]^T (+ bias[N]).
// W may be F32, BF16 or F16 (read in place, e.g. straight from an mmapped checkpoint);
// x and y are F32. Invariant: every output element is one dot product whose summation
// order depends only on K, never on T, the thread count or the other rows, so a row's
// result is bit-identical whatever batch it is computed in. The dot products are the
// shared CPU math module's (core/cpu/dot.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::quant {

// weight: [N, K] contiguous, dtype F32/BF16/F16. bias: [N] F32 or nullptr.
void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool);

}  // namespace moert::quant
