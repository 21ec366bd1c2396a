#include "quant/cpu/linear.h"

#include <algorithm>

#include "core/check.h"
#include "core/cpu/dot.h"

namespace moert::quant {
namespace {

using cpu::WeightKind;

template <WeightKind kind>
void linear_rows(const float* x, int64_t num_rows, const void* w, int64_t n, int64_t k, int64_t elem_bytes,
                 const float* bias, float* y, ThreadPool& pool) {
  // Rows of x are taken in tiles so a tile stays in cache while the weights stream past it.
  constexpr int64_t kRowTile = 64;
  const int64_t grain = std::max<int64_t>(8, 8192 / std::max<int64_t>(1, k));
  constexpr int kCols = cpu::kDotBlockCols;
  constexpr int kMaxRows = cpu::kMaxDotRows;
  const bool blocked = cpu::dot_block_preferred();
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    float dots[kMaxRows * kCols];
    for (int64_t t0 = 0; t0 < num_rows; t0 += kRowTile) {
      const int64_t t_end = std::min(num_rows, t0 + kRowTile);
      int64_t col = begin;
      // AVX-512: 4 weight rows x up to 4 x rows per pass (16 accumulators).
      for (; blocked && col + kCols <= end; col += kCols) {
        const void* w_rows[kCols];
        for (int c = 0; c < kCols; ++c) w_rows[c] = static_cast<const char*>(w) + (col + c) * k * elem_bytes;
        for (int64_t t = t0; t < t_end; t += kMaxRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, t_end - t));
          cpu::dot_block(kind, x + t * k, k, rows, k, w_rows, dots);
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < kCols; ++c) {
              y[(t + r) * n + col + c] = dots[r * kCols + c] + (bias != nullptr ? bias[col + c] : 0.0f);
            }
          }
        }
      }
      for (; col < end; ++col) {
        const void* w_row = static_cast<const char*>(w) + col * k * elem_bytes;
        const float b = bias != nullptr ? bias[col] : 0.0f;
        for (int64_t t = t0; t < t_end; t += kMaxRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, t_end - t));
          cpu::dot_rows(kind, x + t * k, k, rows, k, w_row, dots);
          for (int r = 0; r < rows; ++r) y[(t + r) * n + col] = dots[r] + b;
        }
      }
    }
  });
}

}  // namespace

void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool) {
  MOERT_CHECK(weight.ndim() == 2 && weight.is_contiguous(), "linear weight must be a contiguous [N, K] matrix");
  const int64_t n = weight.dim(0);
  const int64_t k = weight.dim(1);
  switch (weight.dtype) {
    case DType::kF32: return linear_rows<WeightKind::kF32>(x, num_rows, weight.data, n, k, 4, bias, y, pool);
    case DType::kBF16: return linear_rows<WeightKind::kBF16>(x, num_rows, weight.data, n, k, 2, bias, y, pool);
    case DType::kF16: return linear_rows<WeightKind::kF16>(x, num_rows, weight.data, n, k, 2, bias, y, pool);
    default:
      MOERT_CHECK(false, "linear weight dtype " << dtype_name(weight.dtype) << " is not F32/BF16/F16");
  }
}

}  // namespace moert::quant
