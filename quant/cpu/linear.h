// Dense linear layers on the CPU: y[T, N] = x[T, K] . W[N, K]^T (+ bias[N]).
// W may be F32, BF16 or F16 (read in place, e.g. straight from an mmapped checkpoint);
// x and y are F32. Invariant: every output element is one dot product whose summation
// order depends only on K, never on T, the thread count or the other rows, so a row's
// result is bit-identical whatever batch it is computed in.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::quant {

// weight: [N, K] contiguous, dtype F32/BF16/F16. bias: [N] F32 or nullptr.
void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool);

// The dot product used by linear_forward for one F32 weight row (exposed for tests and
// for kernels that must agree with it bit for bit). Every instruction-set path (AVX-512,
// AVX2+FMA, portable) computes the same canonical sum (see linear.cpp), so results do not
// depend on which one the CPU selects.
float dot_f32(const float* a, const float* b, int64_t k);
// out[r] = dot_f32(x + r * x_stride, w, k) for r < rows, sharing one pass over w.
void dot_f32_rows(const float* x, int64_t x_stride, int rows, const float* w, int64_t k, float* out);
// The portable path of dot_f32, whatever the CPU (tests compare the two).
float dot_f32_reference(const float* a, const float* b, int64_t k);
// "avx512", "avx2" or "portable": the path chosen at run time (MOERT_CPU_ISA caps it).
const char* cpu_isa_name();

}  // namespace moert::quant
