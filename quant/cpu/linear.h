// Dense linear layers on the CPU: y[T, N] = x[T, K] . W[N, K]^T (+ bias[N]).
// W may be F32, BF16 or F16 (read in place, e.g. straight from an mmapped checkpoint);
// x and y are F32. Invariant: every output element is one dot product whose summation
// order depends only on K, never on T, the thread count or the other rows, so a row's
// result is bit-identical whatever batch it is computed in. The dot products are the
// shared CPU math module's (core/cpu/dot.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::quant {

// weight: [N, K] contiguous, dtype F32/BF16/F16. bias: [N] F32 or nullptr.
void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool);

// Output features [begin, end) of linear_forward (0 <= begin <= end <= N), on the calling
// thread (apply_linears, quant/cpu/apply_linear.h). Same bits as linear_forward.
void linear_forward_rows(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                         int64_t begin, int64_t end);

// The fewest output features a parallel chunk of a linear layer gets: a chunk streams at
// least ~8K weights, so waking a thread pays off.
inline int64_t linear_row_grain(int64_t k) { return std::max<int64_t>(8, 8192 / std::max<int64_t>(1, k)); }

}  // namespace moert::quant
