// NEON path of quantized_linear_forward (AArch64 builds only: see quant/cpu/quantized.cmake).
// Call only when active_cpu_isa() is kNeon; the view is validated, its FP4 codes in the
// checkpoint order and its FP8 scales foldable (quant/cpu/quantized_linear_tiles.h).
#pragma once

#include <cstdint>

#include "quant/cpu/quantized_linear.h"

namespace moert::quant::arm {

// Output features [begin, end) of quantized_linear_forward, on the calling thread.
void quantized_linear_rows_neon(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                float* y, int64_t begin, int64_t end);

}  // namespace moert::quant::arm
