// AVX-512 (with or without VNNI) and AVX2 paths of int8_linear_rows (x86-64 builds only).
// Call one only when the CPU has it (quant/cpu/int8_linear.cpp decides); the weight is
// validated, NVFP4 / MXFP4 in either code order, its global scale times 256 finite.
#pragma once

#include <cstdint>

#include "quant/cpu/int8_linear.h"

namespace moert::quant::x86 {

// Int8Rows::quantize's work (quant/cpu/int8_linear_tiles.h, quantize_rows) with a SIMD block.
void quantize_int8_rows_avx512(const float* x, int64_t rows, int64_t cols, int8_t* codes, float* lane_scales,
                               int32_t* lane_offsets);
void quantize_int8_rows_avx2(const float* x, int64_t rows, int64_t cols, int8_t* codes, float* lane_scales,
                             int32_t* lane_offsets);

void int8_linear_rows_avx512_vnni(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                  int64_t begin, int64_t end);
void int8_linear_rows_avx512(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                             int64_t begin, int64_t end);
void int8_linear_rows_avx2(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end);

}  // namespace moert::quant::x86
