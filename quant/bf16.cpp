#include "quant/bf16.h"

#include <cmath>

namespace moert::quant {

bool widen_into_f32(const TensorView& view, float* out) {
  const int64_t n = view.numel();
  switch (view.dtype) {
    case DType::kF32: std::memcpy(out, view.data, static_cast<size_t>(n) * sizeof(float)); return true;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(view.as<const uint16_t>()[i]);
      return true;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(view.as<const uint16_t>()[i]);
      return true;
    default: return false;
  }
}

}  // namespace moert::quant
