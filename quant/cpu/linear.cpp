#include "quant/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "quant/bf16.h"
#include "runtime/core/check.h"

namespace moert::quant {
namespace {

constexpr int64_t kLanes = 16;  // independent partial sums; fixed, so the order depends on K only

// Rows of W converted to F32 per call; each thread converts its own rows.
void widen_row(const TensorView& weight, int64_t row, int64_t k, float* out) {
  switch (weight.dtype) {
    case DType::kBF16: {
      const uint16_t* src = weight.as<const uint16_t>() + row * k;
      for (int64_t i = 0; i < k; ++i) out[i] = bf16_to_f32(src[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* src = weight.as<const uint16_t>() + row * k;
      for (int64_t i = 0; i < k; ++i) out[i] = f16_to_f32(src[i]);
      return;
    }
    default:
      MOERT_CHECK(false, "linear weight dtype " << dtype_name(weight.dtype) << " is not F32/BF16/F16");
  }
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t k) {
  float partial[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  for (int64_t lane = 0; i < k; ++i, ++lane) partial[lane] += a[i] * b[i];
  // Pairwise reduction of the lanes, in a fixed tree.
  for (int64_t width = kLanes / 2; width >= 1; width /= 2) {
    for (int64_t lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
  }
  return partial[0];
}

void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool) {
  MOERT_CHECK(weight.ndim() == 2 && weight.is_contiguous(), "linear weight must be a contiguous [N, K] matrix");
  const int64_t n = weight.dim(0);
  const int64_t k = weight.dim(1);
  const bool widen = weight.dtype != DType::kF32;
  // Grain: enough output features per chunk to amortise the dispatch.
  const int64_t grain = std::max<int64_t>(16, 16384 / std::max<int64_t>(1, k));
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> widened(widen ? static_cast<size_t>(k) : 0);
    for (int64_t col = begin; col < end; ++col) {
      const float* w_row;
      if (widen) {
        widen_row(weight, col, k, widened.data());
        w_row = widened.data();
      } else {
        w_row = weight.as<const float>() + col * k;
      }
      const float b = bias != nullptr ? bias[col] : 0.0f;
      for (int64_t t = 0; t < num_rows; ++t) y[t * n + col] = dot_f32(x + t * k, w_row, k) + b;
    }
  });
}

}  // namespace moert::quant
