// exp_f32 (core/cpu/exp.h): its table and accuracy against float64, every instruction-set path
// of exp_shifted against it bit for bit (ctest runs this binary under each MOERT_CPU_ISA cap),
// and, where the C library is glibc on x86-64 with FMA, equality with std::exp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu/exp.h"
#include "core/cpu/exp_table.h"
#include "core/cpu/isa.h"

namespace {

using namespace moert::cpu;

// Every `stride`-th float bit pattern (all signs, exponents, NaNs and infinities among them).
std::vector<float> sampled_floats(uint64_t stride) {
  std::vector<float> out;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += stride) out.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  return out;
}

TEST(ExpTable, EntriesAreTwoToTheIOver32RoundedToDouble) {
  for (int i = 0; i < 32; ++i) {
    const double entry = std::bit_cast<double>(exp_detail::kTable[i] + (static_cast<uint64_t>(i) << 47));
    const long double exact = std::exp2(static_cast<long double>(i) / 32);
    EXPECT_EQ(entry, static_cast<double>(exact)) << "entry " << i;
    EXPECT_LE(std::fabs(static_cast<long double>(entry) - exact), std::ldexp(1.0L, -53)) << "entry " << i;
  }
}

TEST(ExpF32, WithinOneUlpOfFloat64AndSpecialValues) {
  int64_t checked = 0;
  for (const float x : sampled_floats(4099)) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(exp_f32(x)));
      continue;
    }
    const double exact = std::exp(static_cast<double>(x));
    const float got = exp_f32(x);
    if (exact > std::numeric_limits<float>::max()) {
      EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << x;
      continue;
    }
    const double ulp = std::max(static_cast<double>(std::numeric_limits<float>::denorm_min()),
                                std::ldexp(1.0, std::ilogb(std::max(exact, 1e-300)) - 23));
    ASSERT_LE(std::fabs(got - exact), ulp) << "x = " << x << " exp_f32 " << got << " float64 " << exact;
    ++checked;
  }
  EXPECT_GT(checked, 700000);
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_f32(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(exp_f32(-103.5f), std::numeric_limits<float>::denorm_min());
  EXPECT_GT(exp_f32(-103.0f), 0.0f);
}

// Every path's exp_shifted equals exp_f32 element by element, for lengths that leave every
// tail and shifts that move inputs across the main path's bounds.
TEST(ExpShifted, EveryPathMatchesTheDefinition) {
  std::printf("cpu path: %s\n", cpu_isa_name());
  const std::vector<float> inputs = sampled_floats(1021);
  for (const float shift : {0.0f, 3.5f, -20.0f, 90.0f}) {
    std::vector<float> values = inputs;
    exp_shifted(values.data(), static_cast<int64_t>(values.size()), shift);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const float want = exp_f32(inputs[i] - shift);
      ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>(want))
          << "input " << inputs[i] << " shift " << shift << " path " << cpu_isa_name();
    }
  }
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<float> values(static_cast<size_t>(n) + 1, 7.0f), want(values.size());
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = -0.37f * static_cast<float>(i) + 1.0f;
    for (size_t i = 0; i < values.size(); ++i) want[i] = static_cast<int64_t>(i) < n ? exp_f32(values[i] - 2.0f) : 7.0f;
    exp_shifted(values.data(), n, 2.0f);
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], want[i]) << "n = " << n << " i = " << i;
  }
}

// exp_f32 is glibc's expf as built with FMA (core/cpu/exp.h): where that is the libm in use,
// the attention results of earlier builds (std::exp) are unchanged.
TEST(ExpF32, EqualsGlibcExpfWithFma) {
#if defined(__GLIBC__) && defined(__x86_64__)
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "glibc takes its non-FMA expf on this CPU";
  int64_t differ = 0;
  for (const float x : sampled_floats(251)) {
    const float want = std::exp(x);
    if (std::isnan(want)) continue;
    differ += std::bit_cast<uint32_t>(exp_f32(x)) != std::bit_cast<uint32_t>(want);
  }
  EXPECT_EQ(differ, 0);
#else
  GTEST_SKIP() << "not glibc on x86-64";
#endif
}

}  // namespace
