// The CPU linear layer over a LinearWeight of any format: dense F32/BF16/F16 weights go to
// linear_forward, packed ones to quantized_linear_forward (both in this folder).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "quant/weight.h"

namespace moert::quant {

// y[T, N] = x[T, K] . W^T (+ bias[N]); row-invariant like both kernels behind it.
void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool);

}  // namespace moert::quant
