// FP8 E4M3 matrices with FP32 dequant scales, CPU reference quantizers and dequantizers:
// DeepSeek-V3 block scales (spec §3b) and a single per-tensor scale (ModelOpt / vLLM FP8).
//
// Shapes: N rows, K columns, row-major. Scales are DEQUANT multipliers (amax / 448) in both
// (§3a: checkpoints store the decode direction; DeepSeek calls it `weight_scale_inv`).
//   data       [N, K]                                   E4M3 bytes (F8_E4M3)
//   scale_inv  [ceil(N/block_rows), ceil(K/block_cols)] F32, block scales only
//
// Non-finite input (the rule shared with fp4.h): +-Inf is left out of every amax and
// saturates to +-448, decoding to about +-(its block's finite amax); NaN is left out of
// every amax and encodes as the NaN code 0x7F, so it decodes to NaN.
// A block (or tensor) with amax 0 stores scale 0 and +-0 codes: the formula amax / 448,
// guarded where the reference would compute 0 / 0.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace moert::quant {

// DeepSeek-V3 `"weight_block_size": [128, 128]`.
inline constexpr int64_t kFp8BlockSize = 128;

struct Fp8BlockTensor {
  int64_t rows = 0;                     // N
  int64_t cols = 0;                     // K
  int64_t block_rows = kFp8BlockSize;   // tile height (1 for DeepSeek's 1x128 activations)
  int64_t block_cols = kFp8BlockSize;   // tile width
  std::vector<uint8_t> data;            // [N, K] E4M3
  std::vector<float> scale_inv;         // [ceil(N/block_rows), ceil(K/block_cols)]
};

// Per tile (ragged edge tiles cover what is left; padding would be zeros, so it never moves
// the amax): scale_inv = amax_tile / 448, code = e4m3_encode(x / scale_inv) (RNE,
// saturating). Errors: negative sizes, block sizes < 1.
Result<Fp8BlockTensor> fp8_block_quantize(const float* x, int64_t rows, int64_t cols,
                                          int64_t block_rows = kFp8BlockSize,
                                          int64_t block_cols = kFp8BlockSize);

Status fp8_block_validate(const Fp8BlockTensor& t);

// out[i, j] = E4M3[data[i, j]] * scale_inv[i / block_rows, j / block_cols] (DeepSeek
// `weight_dequant`). Precondition: fp8_block_validate(t) is ok (checked). out: [N, K].
void fp8_block_dequantize(const Fp8BlockTensor& t, float* out);
void fp8_block_dequantize(const uint8_t* data, const float* scale_inv, int64_t rows, int64_t cols,
                          int64_t block_rows, int64_t block_cols, float* out);

struct Fp8TensorScaled {
  int64_t rows = 0;           // N
  int64_t cols = 0;           // K
  std::vector<uint8_t> data;  // [N, K] E4M3
  float scale = 0.0f;         // dequant factor amax / 448 (ModelOpt `weight_scale`)
};

// scale = amax / 448, code = e4m3_encode(x / scale). Errors: negative sizes.
Result<Fp8TensorScaled> fp8_tensor_quantize(const float* x, int64_t rows, int64_t cols);

Status fp8_tensor_validate(const Fp8TensorScaled& t);

// out[i, j] = E4M3[data[i, j]] * scale. Precondition: fp8_tensor_validate(t) is ok (checked).
void fp8_tensor_dequantize(const Fp8TensorScaled& t, float* out);

}  // namespace moert::quant
