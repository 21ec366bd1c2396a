#include "quant/cpu/linear.h"

#include <algorithm>

#include "core/check.h"
#include "core/cpu/dot.h"

namespace moert::quant {
namespace {

using cpu::WeightKind;

// Output features [begin, end) of y = x . W^T (+ bias), on the calling thread.
template <WeightKind kind>
void linear_rows(const float* x, int64_t num_rows, const void* w, int64_t n, int64_t k, int64_t elem_bytes,
                 const float* bias, float* y, int64_t begin, int64_t end) {
  // Rows of x are taken in tiles so a tile stays in cache while the weights stream past it.
  using cpu::dot_detail::kRowTile;
  constexpr int kCols = cpu::kDotBlockCols;
  constexpr int kMaxRows = cpu::kMaxDotRows;
  const bool blocked = cpu::dot_block_preferred();
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
}

void check_weight(const TensorView& weight) {
  MOERT_CHECK(weight.ndim() == 2 && weight.is_contiguous(), "linear weight must be a contiguous [N, K] matrix");
  MOERT_CHECK(weight.dtype == DType::kF32 || weight.dtype == DType::kBF16 || weight.dtype == DType::kF16,
              "linear weight dtype " << dtype_name(weight.dtype) << " is not F32/BF16/F16");
}

}  // namespace

void linear_forward_rows(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                         int64_t begin, int64_t end) {
  check_weight(weight);
  const int64_t n = weight.dim(0);
  const int64_t k = weight.dim(1);
  MOERT_CHECK(0 <= begin && begin <= end && end <= n, "rows [" << begin << ", " << end << ") of " << n);
  switch (weight.dtype) {
    case DType::kF32: return linear_rows<WeightKind::kF32>(x, num_rows, weight.data, n, k, 4, bias, y, begin, end);
    case DType::kBF16: return linear_rows<WeightKind::kBF16>(x, num_rows, weight.data, n, k, 2, bias, y, begin, end);
    case DType::kF16: return linear_rows<WeightKind::kF16>(x, num_rows, weight.data, n, k, 2, bias, y, begin, end);
    default: return;  // check_weight
  }
}

void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool) {
  check_weight(weight);
  pool.parallel_for(weight.dim(0), linear_row_grain(weight.dim(1)), [&](int64_t begin, int64_t end) {
    linear_forward_rows(x, num_rows, weight, bias, y, begin, end);
  });
}

}  // namespace moert::quant
