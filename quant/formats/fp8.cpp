#include "quant/formats/fp8.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "quant/formats/format_args.h"
#include "quant/formats/minifloat.h"
#include "core/check.h"

namespace moert::quant {
namespace {

using formats_detail::check_matrix_args;
using formats_detail::check_matrix_shape;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void accumulate_finite_amax(float v, float& amax) {
  if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
}

// e4m3 code of v / scale, rounded once (nearest, ties to even) from the float64 quotient:
// a float32 quotient can itself round onto a tie between two E4M3 values (168.0000070 ->
// 168.0, halfway between 160 and 176) and then go the wrong way. scale == 0 only when the
// block has no finite nonzero value; its finite elements are then +-0 (sign kept), Inf
// saturates and NaN stays NaN.
uint8_t e4m3_scaled(float v, float scale) {
  if (!(scale > 0.0f)) return e4m3_encode(std::isfinite(v) ? 0.0f * v : v);
  if (!std::isfinite(v)) return e4m3_encode(v / scale);
  // Saturate first (satfinite), then round on the E4M3 grid of the magnitude's binade:
  // 3 fraction bits, subnormal below 2^-6 (docs/quant-formats.md §3a).
  const double magnitude = std::min(std::fabs(static_cast<double>(v) / scale), static_cast<double>(kE4m3Max));
  if (magnitude == 0.0) return e4m3_encode(0.0f * v);
  const double quantum = std::ldexp(1.0, std::max(std::ilogb(magnitude), -6) - 3);
  const double rounded = std::nearbyint(magnitude / quantum) * quantum;  // exact on the grid
  return e4m3_encode(std::copysign(static_cast<float>(rounded), v));
}

Status check_blocks(const char* fn, int64_t block_rows, int64_t block_cols) {
  if (block_rows < 1 || block_cols < 1) {
    return invalid_argument(std::string(fn) + ": block " + std::to_string(block_rows) + "x" +
                            std::to_string(block_cols) + " must be at least 1x1");
  }
  return Status::ok();
}

}  // namespace

Result<Fp8BlockTensor> fp8_block_quantize(const float* x, int64_t rows, int64_t cols, int64_t block_rows,
                                          int64_t block_cols) {
  const char* fn = "fp8_block_quantize";
  MOERT_RETURN_IF_ERROR(check_matrix_args(fn, x, rows, cols, 1));
  MOERT_RETURN_IF_ERROR(check_blocks(fn, block_rows, block_cols));
  Fp8BlockTensor t;
  t.rows = rows;
  t.cols = cols;
  t.block_rows = block_rows;
  t.block_cols = block_cols;
  t.data.resize(static_cast<size_t>(rows * cols));
  const int64_t num_row_blocks = ceil_div(rows, block_rows);
  const int64_t num_col_blocks = ceil_div(cols, block_cols);
  t.scale_inv.assign(static_cast<size_t>(num_row_blocks * num_col_blocks), 0.0f);
  for (int64_t rb = 0; rb < num_row_blocks; ++rb) {
    const int64_t r0 = rb * block_rows;
    const int64_t r1 = std::min(rows, r0 + block_rows);
    for (int64_t cb = 0; cb < num_col_blocks; ++cb) {
      const int64_t c0 = cb * block_cols;
      const int64_t c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) accumulate_finite_amax(x[r * cols + c], amax);
      }
      // §3b: s = amax / 448, fp8(x / s).
      const float scale = amax / kE4m3Max;
      t.scale_inv[static_cast<size_t>(rb * num_col_blocks + cb)] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) t.data[static_cast<size_t>(r * cols + c)] = e4m3_scaled(x[r * cols + c], scale);
      }
    }
  }
  return t;
}

Status fp8_block_validate(const Fp8BlockTensor& t) {
  const char* fn = "fp8_block_validate";
  MOERT_RETURN_IF_ERROR(check_matrix_shape(fn, t.rows, t.cols, 1));
  MOERT_RETURN_IF_ERROR(check_blocks(fn, t.block_rows, t.block_cols));
  if (static_cast<int64_t>(t.data.size()) != t.rows * t.cols) {
    return invalid_argument(std::string(fn) + ": data.size() = " + std::to_string(t.data.size()) +
                            " must be rows * cols = " + std::to_string(t.rows * t.cols));
  }
  const int64_t num_scales = ceil_div(t.rows, t.block_rows) * ceil_div(t.cols, t.block_cols);
  if (static_cast<int64_t>(t.scale_inv.size()) != num_scales) {
    return invalid_argument(std::string(fn) + ": scale_inv.size() = " + std::to_string(t.scale_inv.size()) +
                            " must be ceil(rows / block_rows) * ceil(cols / block_cols) = " +
                            std::to_string(num_scales));
  }
  return Status::ok();
}

void fp8_block_dequantize(const Fp8BlockTensor& t, float* out) {
  const Status status = fp8_block_validate(t);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  fp8_block_dequantize(t.data.data(), t.scale_inv.data(), t.rows, t.cols, t.block_rows, t.block_cols, out);
}

void fp8_block_dequantize(const uint8_t* data, const float* scale_inv, int64_t rows, int64_t cols,
                          int64_t block_rows, int64_t block_cols, float* out) {
  MOERT_CHECK(rows >= 0 && cols >= 0 && block_rows >= 1 && block_cols >= 1,
              "rows = " << rows << ", cols = " << cols << ", block " << block_rows << "x" << block_cols);
  const int64_t num_col_blocks = ceil_div(cols, block_cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* scale_row = scale_inv + (r / block_rows) * num_col_blocks;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = e4m3_decode(data[r * cols + c]) * scale_row[c / block_cols];
    }
  }
}

Result<Fp8TensorScaled> fp8_tensor_quantize(const float* x, int64_t rows, int64_t cols) {
  MOERT_RETURN_IF_ERROR(check_matrix_args("fp8_tensor_quantize", x, rows, cols, 1));
  const int64_t n = rows * cols;
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) accumulate_finite_amax(x[i], amax);
  Fp8TensorScaled t;
  t.rows = rows;
  t.cols = cols;
  t.scale = amax / kE4m3Max;
  t.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t.data[static_cast<size_t>(i)] = e4m3_scaled(x[i], t.scale);
  return t;
}

Status fp8_tensor_validate(const Fp8TensorScaled& t) {
  MOERT_RETURN_IF_ERROR(check_matrix_shape("fp8_tensor_validate", t.rows, t.cols, 1));
  if (static_cast<int64_t>(t.data.size()) != t.rows * t.cols) {
    return invalid_argument("fp8_tensor_validate: data.size() = " + std::to_string(t.data.size()) +
                            " must be rows * cols = " + std::to_string(t.rows * t.cols));
  }
  return Status::ok();
}

void fp8_tensor_dequantize(const Fp8TensorScaled& t, float* out) {
  const Status status = fp8_tensor_validate(t);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  for (size_t i = 0; i < t.data.size(); ++i) out[i] = e4m3_decode(t.data[i]) * t.scale;
}

}  // namespace moert::quant
