// 16-bit weights widened to F32 (the conversions themselves: core/half.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "core/tensor.h"

namespace moert::quant {

// The scalar conversions live in core/half.h; they are part of this namespace too.
using moert::bf16_to_f32;
using moert::f16_to_f32;
using moert::f32_to_bf16;
using moert::f32_to_f16;

// Writes the contiguous view's values as F32 into out[numel]; false (nothing written) for
// dtypes other than F32, BF16 and F16.
bool widen_into_f32(const TensorView& view, float* out);

}  // namespace moert::quant
