// Internal to core/cpu/exp.cpp and core/cpu/x86/exp_x86.cpp: the constants of exp_f32
// (core/cpu/exp.h; docs/kv-cache.md "The exponential").
#pragma once

#include <bit>
#include <cstdint>

namespace moert::cpu::exp_detail {

constexpr int kTableBits = 5;            // 2^(i/32), i < 32
constexpr double kInvLn2N = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;     // x + kShift rounds x to an integer in the low bits
// 2^(r/32) ~ 1 + kC2 r + kC1 r^2 + kC0 r^3 for |r| <= 1/2 (evaluated as (kC0 r + kC1) r^2 + (kC2 r + 1)).
constexpr double kC0 = 0x1.c6af84b912394p-20;
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
// Above these, exp overflows (+inf); below kUnderflow it is 0, below kMayUnderflow the
// smallest subnormal. |x| < kMainRange (top 12 bits of x's magnitude <= kMainTop) takes the main path alone.
constexpr float kOverflow = 0x1.62e42ep+6f;
constexpr float kUnderflow = -0x1.9fe368p+6f;
constexpr float kMayUnderflow = -0x1.9d1d9ep+6f;
constexpr uint32_t kMainTop = 0x42a;  // (bits(x) >> 20) & 0x7ff up to this: |x| < 88

// Table entry i: the bits of 2^(i/32) rounded to the nearest double, less i << 47, so that
// adding k << 47 for k = 32 q + i gives the bits of 2^q * 2^(i/32).
inline constexpr uint64_t kTable[1 << kTableBits] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

// The top 12 bits of |x| (sign dropped): which path x takes.
inline uint32_t magnitude_top(float x) { return (std::bit_cast<uint32_t>(x) >> 20) & 0x7ff; }

}  // namespace moert::cpu::exp_detail
