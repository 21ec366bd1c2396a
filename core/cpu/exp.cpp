#include "core/cpu/exp.h"

#include <bit>
#include <cmath>
#include <limits>

#include "core/cpu/exp_table.h"
#include "core/cpu/isa.h"
#if defined(MOERT_X86_KERNELS)
#include "core/cpu/x86/exp_x86.h"
#endif

namespace moert::cpu {

using namespace exp_detail;

float exp_f32(float x) {
  if (magnitude_top(x) > kMainTop) {  // |x| >= 88, inf or NaN
    if (std::isnan(x)) return x + x;
    if (x > kOverflow) return std::numeric_limits<float>::infinity();
    if (x < kUnderflow) return 0.0f;  // -inf too
    if (x < kMayUnderflow) return std::numeric_limits<float>::denorm_min();
  }
  const double xd = x;
  const double shifted = std::fma(kInvLn2N, xd, kShift);  // k in the low bits of its mantissa
  const uint64_t k = std::bit_cast<uint64_t>(shifted);
  const double kd = shifted - kShift;
  const double r = std::fma(kInvLn2N, xd, -kd);
  const double scale = std::bit_cast<double>(kTable[k % (1 << kTableBits)] + (k << (52 - kTableBits)));
  const double cubic_part = std::fma(kC0, r, kC1);
  const double r2 = r * r;
  double y = std::fma(kC2, r, 1.0);
  y = std::fma(cubic_part, r2, y);
  return static_cast<float>(y * scale);
}

void exp_shifted(float* values, int64_t n, float shift) {
  switch (active_cpu_isa()) {
#if defined(MOERT_X86_KERNELS)
    case CpuIsa::kAvx512: return x86::exp_shifted_avx512(values, n, shift);
    case CpuIsa::kAvx2: return x86::exp_shifted_avx2(values, n, shift);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) values[i] = exp_f32(values[i] - shift);
  }
}

}  // namespace moert::cpu
