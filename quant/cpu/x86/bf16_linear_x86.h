// AVX-512 BF16 and AVX2 paths of bf16_linear_rows (x86-64 builds only). Call one only when the
// CPU has it (quant/cpu/bf16_linear.cpp decides); the weight is validated and admitted
// (bf16_activations_admitted).
#pragma once

#include <cstdint>

#include "quant/cpu/bf16_linear.h"

namespace moert::quant::x86 {

void bf16_linear_rows_avx512_bf16(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                  int64_t begin, int64_t end);
void bf16_linear_rows_avx2(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end);
// Dense BF16 weights w [n, x.cols] (bf16_dense_linear_rows; admitted by the caller).
void bf16_dense_linear_rows_avx512_bf16(const Bf16RowsView& x, const uint16_t* w, int64_t n, const float* bias,
                                        float* y, int64_t begin, int64_t end);
void bf16_dense_linear_rows_avx2(const Bf16RowsView& x, const uint16_t* w, int64_t n, const float* bias, float* y,
                                 int64_t begin, int64_t end);

}  // namespace moert::quant::x86
