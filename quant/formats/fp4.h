// FP4 (E2M1) block-scaled matrices: NVFP4 (spec §1) and MXFP4 (spec §2), CPU reference
// quantizers and dequantizers.
//
// Shapes: N rows (output features of a weight, or tokens of an activation), K columns (the
// reduction dim). Blocks run along K inside one row. Row-major throughout.
//   packed        [N, K/2]   U8, two E2M1 codes per byte: element 2i in the LOW nibble,
//                            2i+1 in the high nibble (ModelOpt, PTX cvt e2m1x2, gpt-oss).
//   NVFP4 scales  [N, K/16]  E4M3 bytes, linear (unswizzled) layout as checkpoints store it.
//   MXFP4 scales  [N, K/32]  E8M0 bytes. gpt-oss `*_blocks` [N, K/32, 16] are the packed bytes.
//
// Non-finite input (one rule for every quantizer in quant/formats):
//   * +-Inf is left out of every amax and saturates to the largest E2M1 code of its block,
//     so it decodes to about +-(the block's finite amax) (+-6 * 1.0 * global_scale in NVFP4,
//     +-6 * 2^-127 in MXFP4, for a block with no finite nonzero value). ModelOpt would
//     instead produce an Inf global scale and NaN block scales (§1d says "sanitize").
//   * NaN is rejected with kInvalidArgument: E2M1 has no NaN code (§1d).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace moert::quant {

// ---- NVFP4 -----------------------------------------------------------------------------------
inline constexpr int64_t kNvfp4BlockSize = 16;
// 6 * 448: E2M1 max times E4M3 max, the divisor of the global scale.
inline constexpr float kNvfp4GlobalDivisor = 2688.0f;

struct Nvfp4Tensor {
  int64_t rows = 0;                   // N
  int64_t cols = 0;                   // K, a multiple of 16
  std::vector<uint8_t> packed;        // [N, K/2]
  std::vector<uint8_t> block_scales;  // [N, K/16] E4M3 (ModelOpt `weight_scale`)
  float global_scale = 0.0f;          // decode-direction FP32 (ModelOpt `weight_scale_2`)
};

// The ModelOpt dynamic weight quantizer (§1a), float32 arithmetic in its order:
//   global_scale = amax / 2688                       (amax over finite |x|)
//   s            = amax_blk / (6 * global_scale); s == 0 -> 1.0; clamp to [2^-9, 448];
//   scale byte   = e4m3_encode(s)                    (RNE)
//   code         = e2m1_encode(x / (e4m3_decode(byte) * global_scale))
// An all-zero tensor gets global_scale 0, scale bytes 1.0 (0x38) and +0 codes (ModelOpt
// would divide 0 by 0 there). Errors: cols % 16 != 0, negative sizes, NaN in x.
Result<Nvfp4Tensor> nvfp4_quantize(const float* x, int64_t rows, int64_t cols);  // x: [N, K]

// The same with a given global scale (ModelOpt's static path, or an activation's
// `input_scale`): block scales above 448 clamp to 448 and their elements saturate at 6.
// global_scale must be finite and > 0.
Result<Nvfp4Tensor> nvfp4_quantize_with_global_scale(const float* x, int64_t rows, int64_t cols,
                                                      float global_scale);

// Checks that the buffer sizes match rows/cols (e.g. for a tensor assembled from a file).
Status nvfp4_validate(const Nvfp4Tensor& t);

// out[n, k] = E2M1[code] * (E4M3[scale byte] * global_scale). Precondition: nvfp4_validate(t)
// is ok (checked). out: [N, K].
void nvfp4_dequantize(const Nvfp4Tensor& t, float* out);
// The same over raw buffers (e.g. mmapped checkpoint tensors). cols % 16 == 0.
void nvfp4_dequantize(const uint8_t* packed, const uint8_t* block_scales, float global_scale, int64_t rows,
                      int64_t cols, float* out);

// ---- MXFP4 (OCP MX v1.0) ------------------------------------------------------------------------
inline constexpr int64_t kMxfp4BlockSize = 32;

enum class Mxfp4ScaleRule {
  // OCP §2a: X = 2^(floor(log2 amax_blk) - 2), so amax/X is in [4, 8) and values in (6X, 8X)
  // clip to 6 (amax 0 -> 2^-127). The default; what gpt-oss checkpoints assume.
  kOcpFloor,
  // TRT-LLM: X = 2^ceil(log2(amax_blk / 6)), so nothing clips (amax 0 -> 2^-127).
  kRoundUp,
};

struct Mxfp4Tensor {
  int64_t rows = 0;             // N
  int64_t cols = 0;             // K, a multiple of 32
  std::vector<uint8_t> packed;  // [N, K/2]
  std::vector<uint8_t> scales;  // [N, K/32] E8M0
};

// code = e2m1_encode(x / X) (RNE, saturating at 6), stored E = log2(X) + 127. Errors:
// cols % 32 != 0, negative sizes, NaN in x.
Result<Mxfp4Tensor> mxfp4_quantize(const float* x, int64_t rows, int64_t cols,
                                   Mxfp4ScaleRule rule = Mxfp4ScaleRule::kOcpFloor);

Status mxfp4_validate(const Mxfp4Tensor& t);

// out[n, k] = E2M1[code] * 2^(E - 127) (exact; E = 0xFF gives NaN). Precondition:
// mxfp4_validate(t) is ok (checked). out: [N, K].
void mxfp4_dequantize(const Mxfp4Tensor& t, float* out);
void mxfp4_dequantize(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols, float* out);

// ---- FP4 activations (W4A4) ------------------------------------------------------------------
// One activation row rounded to FP4 and decoded back (docs/quant-formats.md "FP4 activations"):
// what a block-scaled FP4 tensor core multiplies when the activations are quantized per row on
// the fly. NVFP4: the row's own global scale amax(row) / 2688, then the ModelOpt block rule as
// nvfp4_quantize (so out == nvfp4_dequantize(nvfp4_quantize(row))); MXFP4: the OCP rule as
// mxfp4_quantize. Non-finite elements are left out of every amax and pass through unchanged,
// so a broken activation stays visible in the output. cols % block == 0; out may alias x.
void nvfp4_round_trip_row(const float* x, int64_t cols, float* out);
void mxfp4_round_trip_row(const float* x, int64_t cols, float* out);

// ---- Block-scale tiles of block-scaled tensor cores (spec §1c) ----------------------------------
// Blackwell's block-scaled MMA (and cuBLASLt's VEC16_UE4M3 / VEC32_UE8M0 modes) read an
// operand's scales [rows, scale_cols] in 512-byte tiles of 128 rows x 4 scale columns, tiles
// ordered by (row / 128, scale_col / 4), inside a tile row r at (r % 32) * 16 + (r % 128) / 32 * 4
// and column c at c % 4. Rows pad to a multiple of 128 and columns to a multiple of 4 with 0.
inline constexpr int64_t kScaleTileRows = 128;
inline constexpr int64_t kScaleTileCols = 4;
inline int64_t scale_tile_offset(int64_t row, int64_t scale_col, int64_t scale_cols) {
  const int64_t tiles_across = (scale_cols + kScaleTileCols - 1) / kScaleTileCols;
  return (row / kScaleTileRows * tiles_across + scale_col / kScaleTileCols) * (kScaleTileRows * kScaleTileCols) +
         row % 32 * 16 + row % kScaleTileRows / 32 * 4 + scale_col % kScaleTileCols;
}
// Bytes of the tiled copy of a [rows, scale_cols] scale matrix (padding included).
int64_t scale_tiles_bytes(int64_t rows, int64_t scale_cols);
// The tiled copy of scales [rows, scale_cols] (linear, as checkpoints store them).
std::vector<uint8_t> tile_block_scales(const uint8_t* scales, int64_t rows, int64_t scale_cols);

}  // namespace moert::quant
