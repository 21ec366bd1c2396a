#include "quant/formats/fp4.h"

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
using formats_detail::index_name;

// E4M3's smallest subnormal, ModelOpt's lower clamp for block scales (§1a, §1d).
constexpr float kMinBlockScale = 0.001953125f;  // 2^-9

Status reject_nan(const char* fn, const float* x, int64_t count, int64_t cols) {
  for (int64_t i = 0; i < count; ++i) {
    if (std::isnan(x[i])) {
      return invalid_argument(std::string(fn) + ": " + index_name(i, cols) + " is NaN; E2M1 has no NaN code");
    }
  }
  return Status::ok();
}

// Max |v| over the finite values of v[0, n); 0 when there are none (§1d: Inf is sanitized).
float finite_amax(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(v[i])) amax = std::max(amax, std::fabs(v[i]));
  }
  return amax;
}

// Encodes y = v / denom for one element. denom == 0 only when the block holds no finite
// nonzero value; its elements are then +-0 or +-Inf and keep their sign and saturation.
uint8_t e2m1_scaled(float v, float denom) {
  if (denom > 0.0f) return e2m1_encode(v / denom);
  return e2m1_encode(std::isinf(v) ? v : 0.0f * v);
}

// Packs one row's codes: element 2i low nibble, 2i+1 high nibble (§1a packing).
void pack_pair(uint8_t* dst, uint8_t even, uint8_t odd) { *dst = static_cast<uint8_t>((odd << 4) | even); }

// The E4M3 scale byte of a block whose finite amax is amax_blk.
uint8_t nvfp4_block_scale_code(float amax_blk, float global_scale) {
  // docs/quant-formats.md: s = (amax_blk / 6) / weight_scale_2, two float32 divisions in
  // ModelOpt's order (6 * weight_scale_2 as one divisor rounds differently for ~0.07% of
  // blocks); the zero test comes after the division (a ratio that underflows also becomes
  // 1.0), then the clamp at 2^-9 (and 448: ModelOpt's static path; on the dynamic path
  // s <= 448 up to rounding, which e4m3 RNE absorbs anyway). amax_blk == 0 is tested first
  // so an all-zero tensor does not divide 0 by 0.
  float s = amax_blk == 0.0f ? 0.0f : (amax_blk / 6.0f) / global_scale;
  if (s == 0.0f) s = 1.0f;
  return e4m3_encode(std::clamp(s, kMinBlockScale, kE4m3Max));
}

// The E8M0 scale byte of a block whose finite amax is amax_blk (the OCP rule, §2a).
uint8_t mxfp4_ocp_scale_code(float amax) {
  constexpr int kEmaxElem = 2;  // E2M1's largest exponent: 6 = 1.5 * 2^2
  // microxcaling `_quantize_mx`: shared_exp = floor(log2 amax) - emax_elem with amax 0 read as
  // FLT_MIN (2^-126); clamped to -127 below, > 127 impossible for finite amax.
  return e8m0_from_exponent((amax == 0.0f ? -126 : floor_log2(amax)) - kEmaxElem);
}

Result<Nvfp4Tensor> nvfp4_quantize_impl(const float* x, int64_t rows, int64_t cols, float global_scale) {
  Nvfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.global_scale = global_scale;
  t.packed.resize(static_cast<size_t>(rows * cols / 2));
  t.block_scales.resize(static_cast<size_t>(rows * cols / kNvfp4BlockSize));
  for (int64_t b = 0; b < rows * cols / kNvfp4BlockSize; ++b) {
    const float* blk = x + b * kNvfp4BlockSize;
    const float amax_blk = finite_amax(blk, kNvfp4BlockSize);
    const uint8_t scale_code = nvfp4_block_scale_code(amax_blk, global_scale);
    t.block_scales[static_cast<size_t>(b)] = scale_code;
    const float denom = e4m3_decode(scale_code) * global_scale;
    uint8_t* dst = t.packed.data() + b * (kNvfp4BlockSize / 2);
    for (int64_t i = 0; i < kNvfp4BlockSize; i += 2) {
      pack_pair(dst + i / 2, e2m1_scaled(blk[i], denom), e2m1_scaled(blk[i + 1], denom));
    }
  }
  return t;
}

}  // namespace

Result<Nvfp4Tensor> nvfp4_quantize(const float* x, int64_t rows, int64_t cols) {
  MOERT_RETURN_IF_ERROR(check_matrix_args("nvfp4_quantize", x, rows, cols, kNvfp4BlockSize));
  MOERT_RETURN_IF_ERROR(reject_nan("nvfp4_quantize", x, rows * cols, cols));
  // Float32 division, as ModelOpt's `amax.float() / (6.0 * 448.0)`.
  const float global_scale = finite_amax(x, rows * cols) / kNvfp4GlobalDivisor;
  return nvfp4_quantize_impl(x, rows, cols, global_scale);
}

Result<Nvfp4Tensor> nvfp4_quantize_with_global_scale(const float* x, int64_t rows, int64_t cols,
                                                      float global_scale) {
  const char* fn = "nvfp4_quantize_with_global_scale";
  MOERT_RETURN_IF_ERROR(check_matrix_args(fn, x, rows, cols, kNvfp4BlockSize));
  if (!(std::isfinite(global_scale) && global_scale > 0.0f)) {
    return invalid_argument(std::string(fn) + ": global_scale = " + std::to_string(global_scale) +
                            " must be finite and > 0");
  }
  MOERT_RETURN_IF_ERROR(reject_nan(fn, x, rows * cols, cols));
  return nvfp4_quantize_impl(x, rows, cols, global_scale);
}

Status nvfp4_validate(const Nvfp4Tensor& t) {
  MOERT_RETURN_IF_ERROR(check_matrix_shape("nvfp4_validate", t.rows, t.cols, kNvfp4BlockSize));
  const int64_t n = t.rows * t.cols;
  if (static_cast<int64_t>(t.packed.size()) != n / 2) {
    return invalid_argument("nvfp4_validate: packed.size() = " + std::to_string(t.packed.size()) +
                            " must be rows * cols / 2 = " + std::to_string(n / 2));
  }
  if (static_cast<int64_t>(t.block_scales.size()) != n / kNvfp4BlockSize) {
    return invalid_argument("nvfp4_validate: block_scales.size() = " + std::to_string(t.block_scales.size()) +
                            " must be rows * cols / 16 = " + std::to_string(n / kNvfp4BlockSize));
  }
  return Status::ok();
}

void nvfp4_dequantize(const Nvfp4Tensor& t, float* out) {
  const Status status = nvfp4_validate(t);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  nvfp4_dequantize(t.packed.data(), t.block_scales.data(), t.global_scale, t.rows, t.cols, out);
}

void nvfp4_dequantize(const uint8_t* packed, const uint8_t* block_scales, float global_scale, int64_t rows,
                      int64_t cols, float* out) {
  MOERT_CHECK(rows >= 0 && cols >= 0 && cols % kNvfp4BlockSize == 0, "rows = " << rows << ", cols = " << cols);
  for (int64_t b = 0; b < rows * cols / kNvfp4BlockSize; ++b) {
    // ModelOpt order: per_block_scale = float(s) * weight_scale_2, then times the E2M1 value.
    const float scale = e4m3_decode(block_scales[b]) * global_scale;
    const uint8_t* src = packed + b * (kNvfp4BlockSize / 2);
    float* dst = out + b * kNvfp4BlockSize;
    for (int64_t i = 0; i < kNvfp4BlockSize / 2; ++i) {
      dst[2 * i] = e2m1_decode(src[i] & 0xF) * scale;
      dst[2 * i + 1] = e2m1_decode(src[i] >> 4) * scale;
    }
  }
}

// ---- MXFP4 ----------------------------------------------------------------------------------------

Result<Mxfp4Tensor> mxfp4_quantize(const float* x, int64_t rows, int64_t cols, Mxfp4ScaleRule rule) {
  MOERT_RETURN_IF_ERROR(check_matrix_args("mxfp4_quantize", x, rows, cols, kMxfp4BlockSize));
  MOERT_RETURN_IF_ERROR(reject_nan("mxfp4_quantize", x, rows * cols, cols));
  Mxfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.packed.resize(static_cast<size_t>(rows * cols / 2));
  t.scales.resize(static_cast<size_t>(rows * cols / kMxfp4BlockSize));
  for (int64_t b = 0; b < rows * cols / kMxfp4BlockSize; ++b) {
    const float* blk = x + b * kMxfp4BlockSize;
    const float amax = finite_amax(blk, kMxfp4BlockSize);
    // TRT-LLM's rule: e8m0(amax / 6, round toward +Inf); amax 0 -> 2^-127 (smallest code).
    const uint8_t scale_code = rule == Mxfp4ScaleRule::kOcpFloor ? mxfp4_ocp_scale_code(amax)
                                                                 : e8m0_encode(amax / kE2m1Max, E8m0Rounding::kCeil);
    t.scales[static_cast<size_t>(b)] = scale_code;
    const int unscale = kE8m0Bias - static_cast<int>(scale_code);  // x / X == ldexp(x, -log2 X), exact
    uint8_t* dst = t.packed.data() + b * (kMxfp4BlockSize / 2);
    for (int64_t i = 0; i < kMxfp4BlockSize; i += 2) {
      pack_pair(dst + i / 2, e2m1_encode(std::ldexp(blk[i], unscale)),
                e2m1_encode(std::ldexp(blk[i + 1], unscale)));
    }
  }
  return t;
}

Status mxfp4_validate(const Mxfp4Tensor& t) {
  MOERT_RETURN_IF_ERROR(check_matrix_shape("mxfp4_validate", t.rows, t.cols, kMxfp4BlockSize));
  const int64_t n = t.rows * t.cols;
  if (static_cast<int64_t>(t.packed.size()) != n / 2) {
    return invalid_argument("mxfp4_validate: packed.size() = " + std::to_string(t.packed.size()) +
                            " must be rows * cols / 2 = " + std::to_string(n / 2));
  }
  if (static_cast<int64_t>(t.scales.size()) != n / kMxfp4BlockSize) {
    return invalid_argument("mxfp4_validate: scales.size() = " + std::to_string(t.scales.size()) +
                            " must be rows * cols / 32 = " + std::to_string(n / kMxfp4BlockSize));
  }
  return Status::ok();
}

void mxfp4_dequantize(const Mxfp4Tensor& t, float* out) {
  const Status status = mxfp4_validate(t);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  mxfp4_dequantize(t.packed.data(), t.scales.data(), t.rows, t.cols, out);
}

void mxfp4_dequantize(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, float* out) {
  MOERT_CHECK(rows >= 0 && cols >= 0 && cols % kMxfp4BlockSize == 0, "rows = " << rows << ", cols = " << cols);
  for (int64_t b = 0; b < rows * cols / kMxfp4BlockSize; ++b) {
    // gpt-oss `convert_moe_packed_tensors` (§2b): ldexp(LUT[nibble], E - 127); a power-of-two
    // product, so exact even where it lands in float subnormals.
    const float scale = e8m0_decode(scales[b]);
    const uint8_t* src = packed + b * (kMxfp4BlockSize / 2);
    float* dst = out + b * kMxfp4BlockSize;
    for (int64_t i = 0; i < kMxfp4BlockSize / 2; ++i) {
      dst[2 * i] = e2m1_decode(src[i] & 0xF) * scale;
      dst[2 * i + 1] = e2m1_decode(src[i] >> 4) * scale;
    }
  }
}

// ---- FP4 activations ---------------------------------------------------------------------------

void nvfp4_round_trip_row(const float* x, int64_t cols, float* out) {
  MOERT_CHECK(cols >= 0 && cols % kNvfp4BlockSize == 0, "cols = " << cols);
  const float global_scale = finite_amax(x, cols) / kNvfp4GlobalDivisor;
  for (int64_t b = 0; b < cols; b += kNvfp4BlockSize) {
    const uint8_t scale_code = nvfp4_block_scale_code(finite_amax(x + b, kNvfp4BlockSize), global_scale);
    // The same float divides on encoding (x / (s * g)) and multiplies on decoding (nvfp4_dequantize).
    const float scale = e4m3_decode(scale_code) * global_scale;
    for (int64_t i = b; i < b + kNvfp4BlockSize; ++i) {
      out[i] = std::isfinite(x[i]) ? e2m1_decode(e2m1_scaled(x[i], scale)) * scale : x[i];
    }
  }
}

void mxfp4_round_trip_row(const float* x, int64_t cols, float* out) {
  MOERT_CHECK(cols >= 0 && cols % kMxfp4BlockSize == 0, "cols = " << cols);
  for (int64_t b = 0; b < cols; b += kMxfp4BlockSize) {
    const uint8_t scale_code = mxfp4_ocp_scale_code(finite_amax(x + b, kMxfp4BlockSize));
    const int unscale = kE8m0Bias - static_cast<int>(scale_code);
    const float scale = e8m0_decode(scale_code);
    for (int64_t i = b; i < b + kMxfp4BlockSize; ++i) {
      out[i] = std::isfinite(x[i]) ? e2m1_decode(e2m1_encode(std::ldexp(x[i], unscale))) * scale : x[i];
    }
  }
}

// ---- Block-scale tiles ---------------------------------------------------------------------------

int64_t scale_tiles_bytes(int64_t rows, int64_t scale_cols) {
  const int64_t tile_rows = (rows + kScaleTileRows - 1) / kScaleTileRows;
  const int64_t tile_cols = (scale_cols + kScaleTileCols - 1) / kScaleTileCols;
  return tile_rows * tile_cols * kScaleTileRows * kScaleTileCols;
}

std::vector<uint8_t> tile_block_scales(const uint8_t* scales, int64_t rows, int64_t scale_cols) {
  MOERT_CHECK(rows >= 0 && scale_cols >= 0, "rows = " << rows << ", scale_cols = " << scale_cols);
  std::vector<uint8_t> tiled(static_cast<size_t>(scale_tiles_bytes(rows, scale_cols)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < scale_cols; ++c) tiled[static_cast<size_t>(scale_tile_offset(r, c, scale_cols))] = scales[r * scale_cols + c];
  }
  return tiled;
}

}  // namespace moert::quant
