// Element codecs and small helpers for the kernels, bit-exact twins of the CPU ones
// (core/half.h, quant/formats; docs/quant-formats.md). Plain arithmetic only, so they run
// on the GPU and in the emulation alike. Include after core/cuda/cuda_api.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace moert::MOERT_CUDA_NS {

__host__ __device__ __forceinline__ float bits_to_float(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof(value));
  return value;
}
__host__ __device__ __forceinline__ uint32_t float_to_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// The 16 bytes at p (16-byte aligned) as four little-endian words: one vector load on the GPU.
__device__ __forceinline__ void load_16_bytes(const void* p, uint32_t (&words)[4]) {
#if defined(__CUDACC__)
  const uint4 v = __ldg(static_cast<const uint4*>(p));
  words[0] = v.x;
  words[1] = v.y;
  words[2] = v.z;
  words[3] = v.w;
#else
  memcpy(words, p, sizeof(words));
#endif
}

__host__ __device__ __forceinline__ float bf16_to_float(uint16_t bits) { return bits_to_float(static_cast<uint32_t>(bits) << 16); }

// Round to nearest, ties to even; NaN stays a quiet NaN (core/half.h f32_to_bf16).
__host__ __device__ __forceinline__ uint16_t float_to_bf16(float value) {
  const uint32_t bits = float_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// IEEE half -> float, exact (subnormals, Inf, NaN).
__host__ __device__ __forceinline__ float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // m * 2^-24
    return bits_to_float(float_to_bits(magnitude) | sign);
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// E4M3 (OCP "fn": no Inf, 0x7F / 0xFF are NaN) -> float, exact.
__host__ __device__ __forceinline__ float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 15 && mantissa == 7) return bits_to_float(0x7fc00000u | sign);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);  // m * 2^-9
    return bits_to_float(float_to_bits(magnitude) | sign);
  }
  return bits_to_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// E2M1 nibble -> float: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
__host__ __device__ __forceinline__ float e2m1_to_float(uint8_t nibble) {
  const int magnitude_code = nibble & 0x7;
  const float magnitude = magnitude_code < 2 ? 0.5f * static_cast<float>(magnitude_code)
                          : magnitude_code < 4 ? 1.0f + 0.5f * static_cast<float>(magnitude_code - 2)
                          : magnitude_code < 6 ? 2.0f + static_cast<float>(magnitude_code - 4)
                                               : (magnitude_code == 6 ? 4.0f : 6.0f);
  return (nibble & 0x8) ? -magnitude : magnitude;
}

// E8M0 -> 2^(code - 127); 0xFF is NaN.
__host__ __device__ __forceinline__ float e8m0_to_float(uint8_t code) {
  if (code == 0xff) return bits_to_float(0x7fc00000u);
  if (code == 0) return bits_to_float(0x00400000u);  // 2^-127, a float32 subnormal
  return bits_to_float(static_cast<uint32_t>(code) << 23);
}

// Sum of `value` over the 32 lanes of a warp; every lane gets the total. The order is fixed
// (butterfly), so a given warp's result is deterministic.
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = other > value ? other : value;
  }
  return value;
}

// The smallest power of two >= x (x > 0, finite), exactly; the twin of the CPU's in
// attention/cpu/paged_attention.cpp (FP8 KV block scales).
__device__ __forceinline__ float power_of_two_at_least(float x) {
  int exponent = 0;
  const float mantissa = frexpf(x, &exponent);
  return mantissa == 0.5f ? x : ldexpf(1.0f, exponent);
}

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace moert::MOERT_CUDA_NS

namespace moert::MOERT_CUDA_NS {

// Products and sums rounded on their own (never fused into an FMA by nvcc), where a kernel
// must give the CPU twin's exact bits (the CPU builds with -ffp-contract=off).
#if defined(__CUDACC__)
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return a * b; }
__device__ __forceinline__ float add_rn(float a, float b) { return a + b; }
#endif

}  // namespace moert::MOERT_CUDA_NS

namespace moert::MOERT_CUDA_NS {

// The lowest index of the largest value of row[0, count) (count >= 1), found by a block of
// kThreads threads that all call it; every thread gets it. values, indices: [kThreads] shared
// scratch, free again when this returns.
template <int kThreads>
__device__ int64_t block_argmax(const float* row, int64_t count, float* values, int64_t* indices) {
  float best = row[0];
  int64_t best_index = 0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    if (row[i] > best) {
      best = row[i];
      best_index = i;
    }
  }
  values[threadIdx.x] = best;
  indices[threadIdx.x] = best_index;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) {
      const float other = values[threadIdx.x + width];
      const int64_t other_index = indices[threadIdx.x + width];
      if (other > values[threadIdx.x] || (other == values[threadIdx.x] && other_index < indices[threadIdx.x])) {
        values[threadIdx.x] = other;
        indices[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  const int64_t result = indices[0];
  __syncthreads();
  return result;
}

}  // namespace moert::MOERT_CUDA_NS
