// AVX-512 and AVX2 paths of quantized_linear_forward (x86-64 builds only: see
// quant/cpu/quantized.cmake). Call one only when active_cpu_isa() selects it; the view is
// already validated and its FP8 scales foldable.
#pragma once

#include <cstdint>

#include "quant/cpu/quantized_linear.h"

namespace moert::quant::x86 {

// Output features [begin, end) of quantized_linear_forward, on the calling thread.
void quantized_linear_rows_avx512(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                  float* y, int64_t begin, int64_t end);
void quantized_linear_rows_avx2(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                float* y, int64_t begin, int64_t end);

}  // namespace moert::quant::x86
