// NEON paths of int8_linear_rows (AArch64 builds only): with the Armv8.2 dot-product
// instructions (sdot) or without (smull + pairwise adds); the same bits. Call only when
// active_cpu_isa() is kNeon (and, for the first, cpu_has_neon_dotprod()).
#pragma once

#include <cstdint>

#include "quant/cpu/int8_linear.h"

namespace moert::quant::arm {

void int8_linear_rows_neon_dotprod(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                   int64_t begin, int64_t end);
void int8_linear_rows_neon(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end);

}  // namespace moert::quant::arm
