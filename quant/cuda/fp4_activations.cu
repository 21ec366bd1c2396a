#include "quant/cuda/fp4_activations.h"

#include "quant/formats/fp4.h"
#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kWarpSize = 32;
constexpr float kMinNvfp4BlockScale = 0.001953125f;  // 2^-9, E4M3's smallest subnormal

// quant::scale_tile_offset (quant/formats/fp4.h, a host function), the layout of spec §1c.
__device__ __forceinline__ int64_t scale_tile_offset(int64_t row, int64_t scale_col, int64_t scale_cols) {
  constexpr int64_t kRows = quant::kScaleTileRows, kCols = quant::kScaleTileCols;
  const int64_t tiles_across = ceil_div(scale_cols, kCols);
  return (row / kRows * tiles_across + scale_col / kCols) * (kRows * kCols) + row % 32 * 16 + row % kRows / 32 * 4 +
         scale_col % kCols;
}

// quant::e2m1_encode for a finite x: round to nearest on the grid 0, .5, 1, 1.5, 2, 3, 4, 6
// (ties to the even code), |x| > 6 saturates, sign bit when x < 0.
__device__ __forceinline__ uint8_t e2m1_code(float x) {
  const float a = fabsf(x);
  int magnitude;
  if (a < 2.0f) {
    magnitude = static_cast<int>(rintf(a * 2.0f));  // 0 .. 4: steps of 0.5 are codes 0 .. 4
  } else if (a < 4.0f) {
    magnitude = 2 + static_cast<int>(rintf(a));  // 2, 3, 4: codes 4, 5, 6
  } else {
    magnitude = a > 6.0f ? 7 : 4 + static_cast<int>(rintf(a * 0.5f));  // 4, 6: codes 6, 7
  }
  return static_cast<uint8_t>((x < 0.0f ? 8 : 0) | magnitude);
}

// quant::e4m3_encode for s in [0, 448] (RNE): subnormals in steps of 2^-9, then 3 mantissa bits.
__device__ __forceinline__ uint8_t e4m3_code(float s) {
  if (s < 0.015625f) return static_cast<uint8_t>(rintf(s * 512.0f));  // 2^-6: code 8 is the first normal
  int exponent = 0;
  frexpf(s, &exponent);
  const int unbiased = exponent - 1;  // s in [2^unbiased, 2^(unbiased + 1))
  int mantissa = static_cast<int>(rintf((ldexpf(s, -unbiased) - 1.0f) * 8.0f));
  int field = unbiased + 7;
  if (mantissa == 8) {
    mantissa = 0;
    ++field;
  }
  return static_cast<uint8_t>(field << 3 | mantissa);
}

__device__ __forceinline__ bool is_finite(float v) { return (float_to_bits(v) & 0x7f800000u) != 0x7f800000u; }

// floor(log2 a) for finite a > 0.
__device__ __forceinline__ int floor_log2(float a) {
  int exponent = 0;
  frexpf(a, &exponent);
  return exponent - 1;
}

// Max |v| over the finite values of v[0, n).
__device__ __forceinline__ float finite_amax(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (is_finite(v[i])) amax = fmaxf(amax, fabsf(v[i]));
  }
  return amax;
}

struct Fp4RowsParams {
  Fp4Activations format;
  const float* x;
  int64_t cols;
  float* out;             // rounded floats [R, K], or null
  uint8_t* packed;        // codes [R, K/2], or null
  uint8_t* tiled_scales;  // block scales in tiles, or null
  float* row_scale;       // [R], or null
};

// One warp per row: the row's amax over the lanes, then each lane takes every 32nd block,
// in the CPU's arithmetic order.
__global__ void fp4_rows_kernel(Fp4RowsParams p) {
  const int64_t row = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  const float* x = p.x + row * p.cols;
  const bool nvfp4 = p.format == Fp4Activations::kNvfp4;
  const int64_t block = nvfp4 ? 16 : 32;
  float global_scale = 1.0f;
  if (nvfp4) {
    float amax = 0.0f;
    for (int64_t i = lane; i < p.cols; i += kWarpSize) {
      if (is_finite(x[i])) amax = fmaxf(amax, fabsf(x[i]));
    }
    global_scale = warp_max(amax) / quant::kNvfp4GlobalDivisor;
  }
  if (p.row_scale != nullptr && lane == 0) p.row_scale[row] = global_scale;
  const int64_t scale_cols = p.cols / block;
  for (int64_t b = lane; b < scale_cols; b += kWarpSize) {
    const float* v = x + b * block;
    const float amax = finite_amax(v, block);
    uint8_t scale_code;
    float scale;  // nvfp4: e4m3 * global, the divisor on encoding and the factor on decoding
    int unscale = 0;
    if (nvfp4) {
      float s = amax == 0.0f ? 0.0f : (amax / 6.0f) / global_scale;
      if (s == 0.0f) s = 1.0f;
      scale_code = e4m3_code(fminf(fmaxf(s, kMinNvfp4BlockScale), 448.0f));
      scale = e4m3_to_float(scale_code) * global_scale;
    } else {
      const int shared_exp = (amax == 0.0f ? -126 : floor_log2(amax)) - 2;  // OCP rule; E2M1's emax is 2
      scale_code = static_cast<uint8_t>(shared_exp + 127 > 0 ? shared_exp + 127 : 0);
      scale = e8m0_to_float(scale_code);
      unscale = 127 - static_cast<int>(scale_code);
    }
    if (p.tiled_scales != nullptr) p.tiled_scales[scale_tile_offset(row, b, scale_cols)] = scale_code;
    for (int64_t i = 0; i < block; i += 2) {
      uint8_t codes[2];
      for (int j = 0; j < 2; ++j) {
        const float value = v[i + j];
        if (!is_finite(value)) {
          codes[j] = value < 0.0f ? 0xF : 0x7;  // saturated, as the CPU's quantizers do
        } else if (nvfp4) {
          codes[j] = scale > 0.0f ? e2m1_code(value / scale) : 0;
        } else {
          codes[j] = e2m1_code(ldexpf(value, unscale));
        }
        if (p.out != nullptr) {
          p.out[row * p.cols + b * block + i + j] = is_finite(value) ? e2m1_to_float(codes[j]) * scale : value;
        }
      }
      if (p.packed != nullptr) {
        p.packed[(row * p.cols + b * block + i) / 2] = static_cast<uint8_t>(codes[1] << 4 | codes[0]);
      }
    }
  }
}

int launch_fp4_rows(const Fp4RowsParams& params, int64_t num_rows, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  MOERT_LAUNCH(fp4_rows_kernel, static_cast<unsigned>(num_rows), kWarpSize, stream, params);
  return static_cast<int>(cudaGetLastError());
}

__global__ void tile_scales_kernel(const uint8_t* scales, int64_t rows, int64_t scale_cols, uint8_t* tiled) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * scale_cols) return;
  tiled[scale_tile_offset(i / scale_cols, i % scale_cols, scale_cols)] = scales[i];
}

__global__ void scale_rows_add_bias_kernel(float* y, const float* row_scale, const float* bias, int64_t num_rows,
                                           int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_rows * cols) return;
  float value = y[i];
  if (row_scale != nullptr) value *= row_scale[i / cols];
  if (bias != nullptr) value += bias[i % cols];
  y[i] = value;
}

constexpr int kThreads = 256;

}  // namespace

int round_fp4_activations(Fp4Activations format, const float* x, int64_t num_rows, int64_t cols, float* out,
                          CUstream_st* stream) {
  return launch_fp4_rows(Fp4RowsParams{format, x, cols, out, nullptr, nullptr, nullptr}, num_rows, stream);
}

int quantize_fp4_activations(Fp4Activations format, const float* x, int64_t num_rows, int64_t cols, uint8_t* packed,
                             uint8_t* tiled_scales, float* row_scale, CUstream_st* stream) {
  const int64_t bytes = quant::scale_tiles_bytes(num_rows, cols / fp4_activation_block(format));
  const int status = static_cast<int>(cudaMemsetAsync(tiled_scales, 0, static_cast<size_t>(bytes), stream));
  if (status != 0) return status;
  return launch_fp4_rows(Fp4RowsParams{format, x, cols, nullptr, packed, tiled_scales, row_scale}, num_rows, stream);
}

int tile_block_scales(const uint8_t* scales, int64_t rows, int64_t scale_cols, uint8_t* tiled, CUstream_st* stream) {
  const auto bytes = static_cast<size_t>(quant::scale_tiles_bytes(rows, scale_cols));
  const int status = static_cast<int>(cudaMemsetAsync(tiled, 0, bytes, stream));
  if (status != 0 || rows * scale_cols == 0) return status;
  MOERT_LAUNCH(tile_scales_kernel, static_cast<unsigned>(ceil_div(rows * scale_cols, kThreads)), kThreads, stream,
               scales, rows, scale_cols, tiled);
  return static_cast<int>(cudaGetLastError());
}

int scale_rows_add_bias(float* y, const float* row_scale, const float* bias, int64_t num_rows, int64_t cols,
                        CUstream_st* stream) {
  if (num_rows * cols == 0 || (row_scale == nullptr && bias == nullptr)) return 0;
  MOERT_LAUNCH(scale_rows_add_bias_kernel, static_cast<unsigned>(ceil_div(num_rows * cols, kThreads)), kThreads, stream,
               y, row_scale, bias, num_rows, cols);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
