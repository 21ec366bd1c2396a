#include "attention/cpu/x86/accumulate_values_avx512.h"

#include <immintrin.h>

namespace moert::attention::x86 {

__attribute__((target("avx512f"))) void accumulate_values_avx512(const float* v, int64_t v_stride, int64_t count,
                                                                 const float* weights, int64_t weight_stride,
                                                                 int group, int head_dim, float* acc) {
  for (int64_t r = 0; r < count; ++r) {
    const float* v_row = v + r * v_stride;
    for (int g = 0; g < group; ++g) {
      const __m512 p = _mm512_set1_ps(weights[g * weight_stride + r]);
      float* a = acc + static_cast<int64_t>(g) * head_dim;
      for (int d = 0; d < head_dim; d += 16) {
        _mm512_storeu_ps(a + d, _mm512_add_ps(_mm512_loadu_ps(a + d), _mm512_mul_ps(p, _mm512_loadu_ps(v_row + d))));
      }
    }
  }
}

}  // namespace moert::attention::x86
