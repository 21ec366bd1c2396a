// FP4 activations on the device (W4A4, `--fp4-activations fp4`): the twins of
// quant::nvfp4_round_trip_row / mxfp4_round_trip_row (quant/formats/fp4.h; definition in
// docs/quant-formats.md "FP4 activations"), and what the block-scaled FP4 tensor cores of
// sm_100 read (codes, scales in their tiles, one scale per row). Host launchers only.
#pragma once

#include <cstdint>

#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// Which FP4 format activations are rounded to: none, or the FP4 weight's own.
enum class Fp4Activations : int32_t { kNone, kNvfp4, kMxfp4 };

// Elements per block scale: 16 (NVFP4) or 32 (MXFP4).
inline int64_t fp4_activation_block(Fp4Activations format) { return format == Fp4Activations::kNvfp4 ? 16 : 32; }

// out[R, K] = x[R, K] rounded row by row through `format` and back, bit for bit the CPU's
// rounding (out may alias x). K a multiple of the block. Returns 0 or the CUDA error code.
int round_fp4_activations(Fp4Activations format, const float* x, int64_t num_rows, int64_t cols, float* out,
                          CUstream_st* stream);

// x[R, K] quantized as round_fp4_activations rounds it, for a block-scaled GEMM: packed codes
// [R, K/2] (element 2i in the low nibble), the block scales in the tiled layout of
// quant::scale_tile_offset (tiled_scales: quant::scale_tiles_bytes(R, K / block) bytes, the
// padding zeroed here), and row_scale[R]: NVFP4 the row's global scale, MXFP4 1. Then
// row r of x decodes as e2m1 * scale * row_scale[r].
int quantize_fp4_activations(Fp4Activations format, const float* x, int64_t num_rows, int64_t cols, uint8_t* packed,
                             uint8_t* tiled_scales, float* row_scale, CUstream_st* stream);

// tiled = scales [rows, scale_cols] (linear) in the tiled layout, padding zeroed
// (quant::tile_block_scales on the device: a weight's scales for the block-scaled GEMM).
int tile_block_scales(const uint8_t* scales, int64_t rows, int64_t scale_cols, uint8_t* tiled, CUstream_st* stream);

// y[r, n] = y[r, n] * row_scale[r] + bias[n] for y [R, N] (the end of a block-scaled GEMM);
// row_scale and bias may be null (then 1 and 0).
int scale_rows_add_bias(float* y, const float* row_scale, const float* bias, int64_t num_rows, int64_t cols,
                        CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
