// What the quantized-linear tests share (quantized_linear_test.cpp, int8_activations_test.cpp,
// bf16_activations_test.cpp): a seeded generator, weights quantized by the codecs with their
// dequantized copies, bit-exact comparison, the float64 error bound, one call of the fused
// linear, and the CPU path the run-time selection must pick.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu/dot.h"
#include "core/cpu/isa.h"
#include "quant/bf16.h"
#include "quant/cpu/apply_linear.h"
#include "quant/cpu/bf16_linear.h"
#include "quant/cpu/int8_linear.h"
#include "quant/cpu/int8_linear_tiles.h"
#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/formats/minifloat.h"
#include "tests/support/death_test.h"

namespace moert::quant::linear_test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }  // (0, 1]
  float normal() {
    return static_cast<float>(std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
  }

 private:
  uint64_t state_;
};

inline std::vector<float> normals(int64_t count, Rng& rng, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

// A quantized weight that owns its buffers, with the codec's dequantized copy [N, K].
struct Owned {
  QuantizedWeightView view;
  std::vector<uint8_t> data, scales;
  std::vector<float> block_scale_inv;
  std::vector<float> dequant;
};

inline Owned quantize(WeightFormat format, int64_t n, int64_t k, Rng& rng) {
  const std::vector<float> w = normals(n * k, rng, 0.05f);
  Owned o;
  o.dequant.resize(static_cast<size_t>(n * k));
  o.view.format = format;
  o.view.rows = n;
  o.view.cols = k;
  switch (format) {
    case WeightFormat::kNvfp4: {
      Result<Nvfp4Tensor> t = nvfp4_quantize(w.data(), n, k);
      EXPECT_TRUE(t.is_ok()) << t.status().to_string();
      nvfp4_dequantize(*t, o.dequant.data());
      o.data = t->packed;
      o.scales = t->block_scales;
      o.view.global_scale = t->global_scale;
      break;
    }
    case WeightFormat::kMxfp4: {
      Result<Mxfp4Tensor> t = mxfp4_quantize(w.data(), n, k);
      EXPECT_TRUE(t.is_ok()) << t.status().to_string();
      mxfp4_dequantize(*t, o.dequant.data());
      o.data = t->packed;
      o.scales = t->scales;
      break;
    }
    case WeightFormat::kFp8Block: {
      Result<Fp8BlockTensor> t = fp8_block_quantize(w.data(), n, k);
      EXPECT_TRUE(t.is_ok()) << t.status().to_string();
      fp8_block_dequantize(*t, o.dequant.data());
      o.data = t->data;
      o.block_scale_inv = t->scale_inv;
      break;
    }
    case WeightFormat::kFp8Tensor: {
      Result<Fp8TensorScaled> t = fp8_tensor_quantize(w.data(), n, k);
      EXPECT_TRUE(t.is_ok()) << t.status().to_string();
      fp8_tensor_dequantize(*t, o.dequant.data());
      o.data = t->data;
      o.view.global_scale = t->scale;
      break;
    }
  }
  o.view.data = o.data.data();
  o.view.scales = o.scales.empty() ? nullptr : o.scales.data();
  o.view.block_scale_inv = o.block_scale_inv.empty() ? nullptr : o.block_scale_inv.data();
  return o;
}

// Re-derives the dequantized copy from the raw bytes (for hand-made views) with the codecs.
inline void dequantize_view(Owned& o) {
  const QuantizedWeightView& v = o.view;
  o.dequant.resize(static_cast<size_t>(v.rows * v.cols));
  switch (v.format) {
    case WeightFormat::kNvfp4:
      nvfp4_dequantize(v.data, v.scales, v.global_scale, v.rows, v.cols, o.dequant.data());
      break;
    case WeightFormat::kMxfp4: mxfp4_dequantize(v.data, v.scales, v.rows, v.cols, o.dequant.data()); break;
    case WeightFormat::kFp8Block:
      fp8_block_dequantize(v.data, v.block_scale_inv, v.rows, v.cols, kFp8BlockSize, kFp8BlockSize, o.dequant.data());
      break;
    case WeightFormat::kFp8Tensor: {
      Fp8TensorScaled t;
      t.rows = v.rows;
      t.cols = v.cols;
      t.data.assign(v.data, v.data + v.rows * v.cols);
      t.scale = v.global_scale;
      fp8_tensor_dequantize(t, o.dequant.data());
      break;
    }
  }
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Equal bits, or both NaN (NaN payloads are not part of the contract).
inline bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

inline void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same(got[i], want[i]) && mismatches++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " (0x" << std::hex << bits(got[i])
                    << ") want " << want[i] << " (0x" << bits(want[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

inline double relative_l2_vs_f64(const std::vector<float>& y, const std::vector<float>& x, int64_t t, const Owned& o,
                          const float* bias) {
  const int64_t n = o.view.rows, k = o.view.cols;
  double err = 0.0, ref = 0.0;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double acc = bias != nullptr ? bias[c] : 0.0;
      for (int64_t i = 0; i < k; ++i) {
        acc += static_cast<double>(x[static_cast<size_t>(r * k + i)]) * o.dequant[static_cast<size_t>(c * k + i)];
      }
      const double d = y[static_cast<size_t>(r * n + c)] - acc;
      err += d * d;
      ref += acc * acc;
    }
  }
  return ref > 0.0 ? std::sqrt(err / ref) : std::sqrt(err);
}

inline std::vector<float> run(const std::vector<float>& x, int64_t t, const QuantizedWeightView& w, const float* bias,
                       ThreadPool& pool, bool portable = false) {
  std::vector<float> y(static_cast<size_t>(t * w.rows), std::numeric_limits<float>::quiet_NaN());
  if (portable) quantized_linear_forward_portable(x.data(), t, w, bias, y.data(), pool);
  else quantized_linear_forward(x.data(), t, w, bias, y.data(), pool);
  return y;
}

// The path the run-time selection must pick, worked out here without core/cpu/isa.cpp:
// the best one this CPU supports (the SIMD paths exist only in x86-64 and AArch64 builds),
// capped by MOERT_CPU_ISA (x86-64: portable < avx2 < avx512, any other value caps nothing;
// AArch64: neon unless portable).
inline std::string expected_cpu_path() {
#if defined(__aarch64__)
  const char* arm_cap = std::getenv("MOERT_CPU_ISA");
  return arm_cap != nullptr && std::string(arm_cap) == "portable" ? "portable" : "neon";
#endif
  int best = 0;  // 0 portable, 1 avx2, 2 avx512
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    best = 1;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      best = 2;
    }
  }
#endif
  if (const char* cap = std::getenv("MOERT_CPU_ISA")) {
    const std::string wanted = cap;
    best = std::min(best, wanted == "portable" ? 0 : wanted == "avx2" ? 1 : 2);
  }
  static const char* const kNames[] = {"portable", "avx2", "avx512"};
  return kNames[best];
}

}  // namespace moert::quant::linear_test
