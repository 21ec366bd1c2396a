#include "quant/cpu/linear.h"

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/cpu/dot.h"
#include "quant/cpu/row_driver.h"

namespace moert::quant {
namespace {

using cpu::WeightKind;

// Output features [begin, end) of y = x . W^T (+ bias), on the calling thread, in this CPU's
// register tile (core/cpu/dot.h: AVX-512 6 x rows x 4 weight rows, AVX2 4 x 3 or 1 x 4;
// otherwise one weight row per pass).
template <WeightKind kind>
void linear_rows(const float* x, int64_t num_rows, const void* w, int64_t n, int64_t k, int64_t elem_bytes,
                 const float* bias, float* y, int64_t begin, int64_t end) {
  const auto point_at = [&](const void*& row, int64_t col) { row = static_cast<const char*>(w) + col * k * elem_bytes; };
  const cpu::DotTile tile = cpu::dot_block_tile(num_rows);
  const auto run_tile = [&](int rows, int64_t t, const void* const* w_rows, float* dots, auto cols) {
    if constexpr (decltype(cols)::value == 1) {
      for (int r = 0; r < rows; r += cpu::kMaxDotRows) {
        cpu::dot_rows(kind, x + (t + r) * k, k, std::min(cpu::kMaxDotRows, rows - r), k, w_rows[0], dots + r);
      }
    } else {
      cpu::dot_block(tile, kind, x + t * k, k, rows, k, w_rows, dots);
    }
  };
  const void* const no_row = nullptr;
  const auto drive = [&](auto rows, auto cols) {
    drive_rows<decltype(rows)::value, decltype(cols)::value>(num_rows, n, begin, end, bias, y, no_row, point_at,
                                                            run_tile);
  };
  using std::integral_constant;
  if (tile == cpu::kAvx512Tile) {
    drive(integral_constant<int, cpu::kAvx512Tile.rows>{}, integral_constant<int, cpu::kAvx512Tile.cols>{});
  } else if (tile == cpu::kAvx2Tile) {
    drive(integral_constant<int, cpu::kAvx2Tile.rows>{}, integral_constant<int, cpu::kAvx2Tile.cols>{});
  } else if (tile == cpu::kAvx2SingleRowTile) {
    drive(integral_constant<int, cpu::kAvx2SingleRowTile.rows>{}, integral_constant<int, cpu::kAvx2SingleRowTile.cols>{});
  } else {
    drive(integral_constant<int, cpu::kMaxDotRows>{}, integral_constant<int, 1>{});
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
