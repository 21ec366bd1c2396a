// AVX-512 kernel of the paged attention's value accumulation (compiled on x86-64 only; see
// attention/cpu/CMakeLists.txt). Same results as the portable accumulate_values.
#pragma once

#include <cstdint>

namespace moert::attention::x86 {

// acc[g, d] += weights[g * weight_stride + r] * v[r * v_stride + d], head_dim % 16 == 0;
// multiply and add as two instructions. Call only when the CPU has AVX-512F.
void accumulate_values_avx512(const float* v, int64_t v_stride, int64_t count, const float* weights,
                              int64_t weight_stride, int group, int head_dim, float* acc);

}  // namespace moert::attention::x86
