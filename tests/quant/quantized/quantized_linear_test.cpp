// Fused quantized linear (quant/cpu/quantized_linear.h) against the codecs: the weight is
// quantized and dequantized with quant/formats, then
//   * a float64 matmul over the dequantized weight bounds the error (relative L2 < 1e-5);
//   * cpu::dot_f32_reference (core/cpu/dot.h's portable canonical dot) over the dequantized rows must
//     equal every output bit for bit, on whichever path this CPU (and MOERT_CPU_ISA) selects;
//   * the explicit portable path, each row alone, other thread counts: bit-identical again.
// The int8-activation mode (quant/cpu/int8_linear.h) has its own checks at the end: its
// definition in float64, the same bits on every path, and its error against F32. So has the
// bf16-activation mode of FP8 weights (quant/cpu/bf16_linear.h): its definition written out
// here, the same bits on every path, every code.
// CTest also runs this binary with MOERT_CPU_ISA=avx2 and =portable (and the BF16 tests with
// avx512-nobf16).
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

namespace moert::quant {
namespace {

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

std::vector<float> normals(int64_t count, Rng& rng, float scale = 1.0f) {
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

Owned quantize(WeightFormat format, int64_t n, int64_t k, Rng& rng) {
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
void dequantize_view(Owned& o) {
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

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Equal bits, or both NaN (NaN payloads are not part of the contract).
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
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

// y = x . dequant^T + bias by the canonical order over the codec's floats.
std::vector<float> canonical_reference(const std::vector<float>& x, int64_t t, const Owned& o,
                                       const float* bias) {
  const int64_t n = o.view.rows, k = o.view.cols;
  std::vector<float> y(static_cast<size_t>(t * n));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      y[static_cast<size_t>(r * n + c)] =
          cpu::dot_f32_reference(x.data() + r * k, o.dequant.data() + c * k, k) + (bias != nullptr ? bias[c] : 0.0f);
    }
  }
  return y;
}

double relative_l2_vs_f64(const std::vector<float>& y, const std::vector<float>& x, int64_t t, const Owned& o,
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

std::vector<float> run(const std::vector<float>& x, int64_t t, const QuantizedWeightView& w, const float* bias,
                       ThreadPool& pool, bool portable = false) {
  std::vector<float> y(static_cast<size_t>(t * w.rows), std::numeric_limits<float>::quiet_NaN());
  if (portable) quantized_linear_forward_portable(x.data(), t, w, bias, y.data(), pool);
  else quantized_linear_forward(x.data(), t, w, bias, y.data(), pool);
  return y;
}

// Every check of the header's invariant on one weight.
void check_weight(const Owned& o, int64_t t, bool with_bias, Rng& rng, const std::string& what) {
  const int64_t n = o.view.rows, k = o.view.cols;
  const std::vector<float> x = normals(t * k, rng);
  const std::vector<float> bias_v = normals(n, rng);
  const float* bias = with_bias ? bias_v.data() : nullptr;
  ThreadPool pool2(2), pool1(1), pool3(3);

  const std::vector<float> y = run(x, t, o.view, bias, pool2);
  expect_same(y, canonical_reference(x, t, o, bias), what + " vs canonical reference");
  expect_same(run(x, t, o.view, bias, pool2, /*portable=*/true), y, what + " vs portable path");
  expect_same(run(x, t, o.view, bias, pool1), y, what + " 1 thread");
  expect_same(run(x, t, o.view, bias, pool3), y, what + " 3 threads");
  if (o.view.format == WeightFormat::kNvfp4 || o.view.format == WeightFormat::kMxfp4) {
    // The CPU code order (repacked at load) computes the same bits on every path, and
    // reordering back gives the checkpoint's bytes.
    std::vector<uint8_t> repacked(o.data.size()), back(o.data.size());
    reorder_fp4_codes(o.data.data(), n, k, Fp4CodeOrder::kCheckpoint, Fp4CodeOrder::kCpuChunk32, repacked.data());
    reorder_fp4_codes(repacked.data(), n, k, Fp4CodeOrder::kCpuChunk32, Fp4CodeOrder::kCheckpoint, back.data());
    EXPECT_EQ(back, o.data) << what;
    if (k >= 32) {
      EXPECT_NE(repacked, o.data) << what;
    }
    QuantizedWeightView chunk32 = o.view;
    chunk32.data = repacked.data();
    chunk32.code_order = Fp4CodeOrder::kCpuChunk32;
    expect_same(run(x, t, chunk32, bias, pool2), y, what + " CPU code order");
    expect_same(run(x, t, chunk32, bias, pool2, /*portable=*/true), y, what + " CPU code order, portable");
  }
  const bool fp8 = o.view.format == WeightFormat::kFp8Block || o.view.format == WeightFormat::kFp8Tensor;
  if (fp8 && std::none_of(o.data.begin(), o.data.end(), [](uint8_t b) { return (b & 0x7F) == 0x7F; })) {
    // What the loader marks (it rejects NaN codes): the decode without NaN handling, same bits.
    QuantizedWeightView finite = o.view;
    finite.fp8_codes_finite = true;
    expect_same(run(x, t, finite, bias, pool2), y, what + " codes marked finite");
  }
  for (int64_t r = 0; r < t; r += std::max<int64_t>(1, t / 3)) {
    const std::vector<float> x_row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> y_row = run(x_row, 1, o.view, bias, pool2);
    const std::vector<float> want(y.begin() + r * n, y.begin() + (r + 1) * n);
    expect_same(y_row, want, what + " row " + std::to_string(r) + " alone");
  }
  bool finite = true;
  for (float v : o.dequant) finite = finite && std::isfinite(v);
  if (finite) {
    EXPECT_LT(relative_l2_vs_f64(y, x, t, o, bias), 1e-5) << what;
  }
}

void sweep(WeightFormat format, const std::vector<int64_t>& ks) {
  Rng rng(static_cast<uint64_t>(format) * 1000 + 7);
  // N = 13: one 8-wide batch-1 tile, one 4-wide, one single feature (row_driver.h); 17, 300: other mixes.
  for (int64_t t : {1, 3, 8, 33}) {
    for (int64_t n : {1, 13, 17, 64, 300}) {
      for (int64_t k : ks) {
        const Owned o = quantize(format, n, k, rng);
        const std::string what = std::string(weight_format_name(format)) + " T=" + std::to_string(t) +
                                 " N=" + std::to_string(n) + " K=" + std::to_string(k);
        check_weight(o, t, /*with_bias=*/(n + k) % 2 == 1, rng, what);
      }
    }
  }
}

// The path the run-time selection must pick, worked out here without core/cpu/isa.cpp:
// the best one this CPU supports (the SIMD paths exist only in x86-64 and AArch64 builds),
// capped by MOERT_CPU_ISA (x86-64: portable < avx2 < avx512, any other value caps nothing;
// AArch64: neon unless portable).
std::string expected_cpu_path() {
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

// CTest runs this binary uncapped and with MOERT_CPU_ISA=avx2 and =portable: each run must
// report a known path, the one the CPU and the cap imply, and the dense kernels must agree.
TEST(QuantizedLinear, ReportsPathImpliedByCpuAndIsaCap) {
  const std::string path = quantized_linear_isa_name();
  std::printf("quantized_linear path: %s\n", path.c_str());
  EXPECT_TRUE(path == "avx512" || path == "avx2" || path == "neon" || path == "portable") << path;
  EXPECT_EQ(path, expected_cpu_path());
  EXPECT_EQ(std::string(cpu::cpu_isa_name()), path);
}

// The load-time repack against the element-wise definition (fp4_code_at), rows with and
// without a last 16-element group, and back to the checkpoint's bytes.
TEST(QuantizedLinear, ReorderFp4CodesMovesEveryElement) {
  Rng rng(17);
  for (int64_t k : {16, 32, 48, 96, 1040}) {
    const int64_t n = 3;
    std::vector<uint8_t> codes(static_cast<size_t>(n * k / 2));
    for (auto& b : codes) b = static_cast<uint8_t>(rng.next());
    std::vector<uint8_t> repacked(codes.size()), back(codes.size());
    reorder_fp4_codes(codes.data(), n, k, Fp4CodeOrder::kCheckpoint, Fp4CodeOrder::kCpuChunk32, repacked.data());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        ASSERT_EQ(fp4_code_at(repacked.data() + r * k / 2, i, k, Fp4CodeOrder::kCpuChunk32),
                  fp4_code_at(codes.data() + r * k / 2, i, k, Fp4CodeOrder::kCheckpoint))
            << "K=" << k << " row " << r << " element " << i;
      }
    }
    reorder_fp4_codes(repacked.data(), n, k, Fp4CodeOrder::kCpuChunk32, Fp4CodeOrder::kCheckpoint, back.data());
    EXPECT_EQ(back, codes) << "K=" << k;
    reorder_fp4_codes(codes.data(), n, k, Fp4CodeOrder::kCheckpoint, Fp4CodeOrder::kCheckpoint, back.data());
    EXPECT_EQ(back, codes) << "K=" << k << ", same order";
  }
}

TEST(QuantizedLinear, Nvfp4MatchesCodec) { sweep(WeightFormat::kNvfp4, {16, 48, 64, 96, 1024}); }
TEST(QuantizedLinear, Mxfp4MatchesCodec) { sweep(WeightFormat::kMxfp4, {32, 96, 1024}); }
TEST(QuantizedLinear, Fp8BlockMatchesCodec) { sweep(WeightFormat::kFp8Block, {1, 15, 100, 129, 300}); }
TEST(QuantizedLinear, Fp8TensorMatchesCodec) { sweep(WeightFormat::kFp8Tensor, {1, 16, 100, 129, 300}); }

// Tall enough for several 128-row scale tiles, ragged in both directions, long K (chunks).
TEST(QuantizedLinear, LargerShapes) {
  Rng rng(99);
  check_weight(quantize(WeightFormat::kFp8Block, 260, 1000, rng), 5, true, rng, "fp8_block 260x1000");
  check_weight(quantize(WeightFormat::kNvfp4, 9, 2080, rng), 6, true, rng, "nvfp4 K=2080");
  check_weight(quantize(WeightFormat::kMxfp4, 11, 2112, rng), 2, false, rng, "mxfp4 K=2112");
}

// Every code and scale byte (NaN, subnormal and -0 codes included), straight from raw bytes.
TEST(QuantizedLinear, RawBytesAllCodes) {
  Rng rng(5);
  for (WeightFormat format :
       {WeightFormat::kNvfp4, WeightFormat::kMxfp4, WeightFormat::kFp8Block, WeightFormat::kFp8Tensor}) {
    // NVFP4 also at K = 400: 25 block scales per row, so the SIMD scale decode runs whole
    // 16-scale steps (on NaN scales too) before its scalar tail.
    const std::vector<int64_t> ks = format == WeightFormat::kMxfp4   ? std::vector<int64_t>{160}
                                    : format == WeightFormat::kNvfp4 ? std::vector<int64_t>{144, 400}
                                                                     : std::vector<int64_t>{144};
    for (int64_t k : ks) {
      for (bool with_nan : {false, true}) {
        const int64_t n = 37;
        Owned o;
        o.view.format = format;
        o.view.rows = n;
        o.view.cols = k;
        const bool fp4 = format == WeightFormat::kNvfp4 || format == WeightFormat::kMxfp4;
        o.data.resize(static_cast<size_t>(fp4 ? n * k / 2 : n * k));
        for (auto& b : o.data) {
          b = static_cast<uint8_t>(rng.next());
          if (!fp4 && !with_nan && (b & 0x7F) == 0x7F) b = 0x7E;
        }
        if (format == WeightFormat::kNvfp4) {
          o.scales.resize(static_cast<size_t>(n * k / 16));
          for (auto& b : o.scales) {
            b = static_cast<uint8_t>(rng.next() & 0x7F);  // positive E4M3, subnormal through 448
            if (!with_nan && b == 0x7F) b = 0x01;
          }
          o.view.global_scale = 0.75f / 2688.0f;
        } else if (format == WeightFormat::kMxfp4) {
          o.scales.resize(static_cast<size_t>(n * k / 32));
          for (auto& b : o.scales) {
            b = static_cast<uint8_t>(100 + rng.next() % 40);
            if (with_nan && rng.next() % 8 == 0) b = kE8m0NaN;
          }
        } else if (format == WeightFormat::kFp8Block) {
          o.block_scale_inv.resize(static_cast<size_t>(((n + 127) / 128) * ((k + 127) / 128)));
          for (auto& s : o.block_scale_inv) s = static_cast<float>(rng.uniform()) * 1e-3f;
        } else {
          o.view.global_scale = -3.0e-4f;  // a negative scale flips every sign; still the codec's value
        }
        o.view.data = o.data.data();
        o.view.scales = o.scales.empty() ? nullptr : o.scales.data();
        o.view.block_scale_inv = o.block_scale_inv.empty() ? nullptr : o.block_scale_inv.data();
        dequantize_view(o);
        check_weight(o, 5, true, rng,
                     std::string("raw ") + weight_format_name(format) + " K=" + std::to_string(k) +
                         (with_nan ? " with NaN" : ""));
      }
    }
  }
}

// FP8 scales (and NVFP4 global scales) so large that the SIMD decode's 2^8 could overflow:
// still the codec's bits.
TEST(QuantizedLinear, Fp8HugeScales) {
  Rng rng(6);
  Owned o = quantize(WeightFormat::kFp8Block, 20, 300, rng);
  o.block_scale_inv[1] = 0x1p126f;
  dequantize_view(o);
  check_weight(o, 3, false, rng, "fp8_block huge scale");
  Owned t = quantize(WeightFormat::kFp8Tensor, 20, 300, rng);
  t.view.global_scale = 0x1p125f;
  dequantize_view(t);
  check_weight(t, 3, false, rng, "fp8_tensor huge scale");
  Owned nv = quantize(WeightFormat::kNvfp4, 20, 320, rng);
  for (auto& b : nv.scales) b &= 0x1F;  // block scales <= 0.12: the products stay finite,
  nv.view.global_scale = 0x1p121f;       // but 256 * global overflows
  dequantize_view(nv);
  check_weight(nv, 3, false, rng, "nvfp4 huge global scale");
}

// FP8 scales so small that the weights fall among the float subnormals (a subnormal scale
// too), and 2^8 and up with every product finite: the SIMD decodes fold a power of two into
// the scale (quant/cpu/x86/fp8_decode_x86.h: 2^8), and must still round value * scale once as
// the codec does.
TEST(QuantizedLinear, Fp8TinyAndLargeScales) {
  Rng rng(8);
  Owned o = quantize(WeightFormat::kFp8Block, 20, 300, rng);
  o.block_scale_inv[0] = 0x1.2345p-135f;
  o.block_scale_inv[1] = 256.0f;
  o.block_scale_inv[2] = 0x1.6789ap-128f;
  dequantize_view(o);
  ASSERT_EQ(std::fpclassify(o.dequant[1]), FP_SUBNORMAL);
  check_weight(o, 3, false, rng, "fp8_block tiny and large scales");
  // Block scales at other edges: the largest float below 2^8, the smallest subnormal, a
  // negative one.
  Owned edge = quantize(WeightFormat::kFp8Block, 20, 300, rng);
  edge.block_scale_inv[0] = 0x1.fffffep7f;
  edge.block_scale_inv[1] = 0x1p-149f;
  edge.block_scale_inv[2] = -0x1.8p-3f;
  dequantize_view(edge);
  check_weight(edge, 3, false, rng, "fp8_block edge scales");
  for (float scale : {0x1.abcdep-127f, 0x1.5p20f}) {
    Owned t = quantize(WeightFormat::kFp8Tensor, 20, 300, rng);
    t.view.global_scale = scale;
    dequantize_view(t);
    check_weight(t, 3, false, rng, "fp8_tensor scale " + std::to_string(scale));
  }
}

// apply_linears splits the features of several layers (packed and dense, different N, K and
// rows) over one parallel_for: every output has the bits of one apply_linear per layer.
TEST(QuantizedLinear, ApplyLinearsMatchesOneCallPerLayer) {
  Rng rng(12);
  std::vector<Owned> packed;
  for (WeightFormat format :
       {WeightFormat::kNvfp4, WeightFormat::kMxfp4, WeightFormat::kFp8Block, WeightFormat::kFp8Tensor}) {
    packed.push_back(quantize(format, 37 + 8 * static_cast<int64_t>(packed.size()), 64 * (1 + packed.size()), rng));
  }
  std::vector<uint16_t> dense_bits(static_cast<size_t>(29 * 96));
  for (auto& b : dense_bits) b = f32_to_bf16(static_cast<float>(rng.normal()));
  std::vector<LinearWeight> weights;
  for (const Owned& o : packed) weights.push_back(LinearWeight::from_packed(o.view));
  weights.push_back(LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {29, 96}, dense_bits.data())));
  std::vector<std::vector<float>> xs, biases, batched, single;
  std::vector<LinearJob> jobs;
  for (size_t j = 0; j < weights.size(); ++j) {
    const int64_t t = 1 + static_cast<int64_t>(j % 3) * 2, n = weights[j].out_features();
    xs.push_back(normals(t * weights[j].in_features(), rng));
    biases.push_back(normals(n, rng));
    batched.emplace_back(static_cast<size_t>(t * n), std::nanf(""));
    single.emplace_back(static_cast<size_t>(t * n), std::nanf(""));
  }
  for (size_t j = 0; j < weights.size(); ++j) {
    const int64_t t = static_cast<int64_t>(xs[j].size()) / weights[j].in_features();
    jobs.push_back({&weights[j], xs[j].data(), t, j % 2 == 0 ? biases[j].data() : nullptr, batched[j].data()});
  }
  ThreadPool two(2), one(1);
  apply_linears(jobs, two);
  for (size_t j = 0; j < jobs.size(); ++j) {
    apply_linear(weights[j], jobs[j].x, jobs[j].num_rows, jobs[j].bias, single[j].data(), one);
    for (size_t i = 0; i < single[j].size(); ++i) {
      ASSERT_EQ(bits(batched[j][i]), bits(single[j][i])) << "layer " << j << " value " << i;
    }
  }
}

TEST(QuantizedLinear, EmptyShapes) {
  ThreadPool pool(2);
  Rng rng(8);
  // K = 0: every output is the bias.
  QuantizedWeightView w{WeightFormat::kFp8Tensor, 3, 0};
  const std::vector<float> bias = {1.0f, -2.0f, 0.5f};
  std::vector<float> x, y(6, 0.0f);
  quantized_linear_forward(x.data(), 2, w, bias.data(), y.data(), pool);
  EXPECT_EQ(y, (std::vector<float>{1.0f, -2.0f, 0.5f, 1.0f, -2.0f, 0.5f}));
  // T = 0 and N = 0 write nothing.
  const Owned o = quantize(WeightFormat::kNvfp4, 4, 32, rng);
  quantized_linear_forward(nullptr, 0, o.view, nullptr, nullptr, pool);
  QuantizedWeightView none{WeightFormat::kMxfp4, 0, 64};
  quantized_linear_forward(normals(64, rng).data(), 1, none, nullptr, nullptr, pool);
}

TEST(QuantizedLinear, ValidateNamesTheOffendingValue) {
  const uint8_t byte = 0;
  const float scale = 1.0f;
  auto expect_error = [](const QuantizedWeightView& w, const std::string& needle) {
    const Status s = validate_quantized_weight(w);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_error({WeightFormat::kNvfp4, 4, 24, &byte, &byte}, "cols = 24 must be a multiple of 16");
  expect_error({WeightFormat::kMxfp4, 4, 48, &byte, &byte}, "cols = 48 must be a multiple of 32");
  expect_error({WeightFormat::kFp8Block, -1, 8, &byte, nullptr, &scale}, "rows = -1");
  expect_error({WeightFormat::kFp8Tensor, 2, -3, &byte}, "cols = -3");
  expect_error({WeightFormat::kNvfp4, 4, 32, nullptr, &byte}, "data is null");
  expect_error({WeightFormat::kMxfp4, 4, 32, &byte, nullptr}, "scales is null");
  expect_error({WeightFormat::kFp8Block, 4, 32, &byte, nullptr, nullptr}, "block_scale_inv is null");
  expect_error({WeightFormat::kFp8Block, 4, 32, &byte}, "fp8_block");
  expect_error({WeightFormat::kFp8Tensor, int64_t{1} << 40, int64_t{1} << 40, &byte}, "overflows int64");
  EXPECT_TRUE(validate_quantized_weight({WeightFormat::kFp8Tensor, 4, 7, &byte}).is_ok());
  EXPECT_TRUE(validate_quantized_weight({WeightFormat::kNvfp4, 0, 32}).is_ok());
  EXPECT_TRUE(validate_quantized_weight({WeightFormat::kMxfp4, 3, 0}).is_ok());
}

TEST(QuantizedLinear, WeightBytes) {
  EXPECT_EQ(quantized_weight_bytes({WeightFormat::kNvfp4, 2, 32}), 2 * 16 + 2 * 2);
  EXPECT_EQ(quantized_weight_bytes({WeightFormat::kMxfp4, 2, 64}), 2 * 32 + 2 * 2);
  EXPECT_EQ(quantized_weight_bytes({WeightFormat::kFp8Block, 129, 10}), 129 * 10 + 4 * 2);
  EXPECT_EQ(quantized_weight_bytes({WeightFormat::kFp8Tensor, 3, 10}), 30);
}


// ---- The int8-activation mode (quant/cpu/int8_linear.h) ----------------------------------------

// x's int8 codes and block steps d_b, worked out here from the header's definition.
struct QuantizedX {
  std::vector<float> q;  // codes as floats
  std::vector<float> d;  // per 16-element block
};

QuantizedX quantize_x_by_definition(const std::vector<float>& x, int64_t t, int64_t k) {
  QuantizedX out;
  out.q.resize(x.size());
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t b = 0; b < k / 16; ++b) {
      const float* block = x.data() + r * k + b * 16;
      float amax = 0.0f;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(block[i]));
      out.d.push_back(amax / 127.0f);
      for (int i = 0; i < 16; ++i) {
        out.q[static_cast<size_t>(r * k + b * 16 + i)] = amax > 0.0f ? std::nearbyint(block[i] * (127.0f / amax)) : 0.0f;
      }
    }
  }
  return out;
}

std::vector<float> run_int8(const std::vector<float>& x, int64_t t, QuantizedWeightView w, const float* bias,
                            ThreadPool& pool) {
  w.activations = ActivationPrecision::kInt8;
  std::vector<float> y(static_cast<size_t>(t * w.rows), std::numeric_limits<float>::quiet_NaN());
  apply_linear(LinearWeight::from_packed(w), x.data(), t, bias, y.data(), pool);
  return y;
}

// Relative L2 distance of y from the float64 sum over x_hat = q * d (the definition's x) and
// the codec's weights: only the kernel's F32 roundings remain.
double int8_definition_error(const std::vector<float>& y, const std::vector<float>& x, int64_t t, const Owned& o,
                             const float* bias) {
  const int64_t n = o.view.rows, k = o.view.cols;
  const QuantizedX qx = quantize_x_by_definition(x, t, k);
  std::vector<float> x_hat(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_hat[i] = static_cast<float>(static_cast<double>(qx.q[i]) * qx.d[i / 16]);
  (void)n;
  return relative_l2_vs_f64(y, x_hat, t, o, bias);
}

// Count of outputs outside the bound rounding x allows: |y - x . w| <= sum_i (d_b(i) / 2) |w_i|
// (each code is within half a step of x_i * 127 / amax), plus F32 slack.
int64_t int8_outside_rounding_bound(const std::vector<float>& y, const std::vector<float>& x, int64_t t,
                                    const Owned& o, const float* bias) {
  const int64_t n = o.view.rows, k = o.view.cols;
  const QuantizedX qx = quantize_x_by_definition(x, t, k);
  int64_t outside = 0;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double exact = bias != nullptr ? bias[c] : 0.0, bound = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double w = o.dequant[static_cast<size_t>(c * k + i)], xi = x[static_cast<size_t>(r * k + i)];
        exact += xi * w;
        bound += 0.5 * qx.d[static_cast<size_t>((r * k + i) / 16)] * std::fabs(w);
        magnitude += std::fabs(xi * w);
      }
      if (std::fabs(y[static_cast<size_t>(r * n + c)] - exact) > bound + 1e-5 * magnitude) ++outside;
    }
  }
  return outside;
}

void check_int8_weight(const Owned& o, int64_t t, bool with_bias, Rng& rng, const std::string& what) {
  const int64_t n = o.view.rows, k = o.view.cols;
  std::vector<float> x = normals(t * k, rng);
  for (int64_t i = 0; i < t * k; i += 37) x[static_cast<size_t>(i)] *= 20.0f;  // outliers
  for (int64_t i = 16; i + 16 <= t * k; i += 160) std::fill_n(x.begin() + i, 16, 0.0f);  // all-zero blocks
  const std::vector<float> bias_v = normals(n, rng);
  const float* bias = with_bias ? bias_v.data() : nullptr;
  ThreadPool pool2(2), pool1(1);

  const std::vector<float> y = run_int8(x, t, o.view, bias, pool2);
  EXPECT_LT(int8_definition_error(y, x, t, o, bias), 2e-6) << what << " vs the definition in float64";
  EXPECT_EQ(int8_outside_rounding_bound(y, x, t, o, bias), 0) << what << " vs F32 activations";
  EXPECT_GT(relative_l2_vs_f64(y, x, t, o, bias), 1e-6) << what << ": int8 activations must round x";
  // Every path and code order, each row alone, one thread: the same bits.
  std::vector<uint8_t> repacked(o.data.size());
  reorder_fp4_codes(o.data.data(), n, k, Fp4CodeOrder::kCheckpoint, Fp4CodeOrder::kCpuChunk32, repacked.data());
  QuantizedWeightView chunk32 = o.view;
  chunk32.data = repacked.data();
  chunk32.code_order = Fp4CodeOrder::kCpuChunk32;
  chunk32.activations = ActivationPrecision::kInt8;
  expect_same(run_int8(x, t, chunk32, bias, pool2), y, what + " CPU code order");
  expect_same(run_int8(x, t, chunk32, bias, pool1), y, what + " CPU code order, 1 thread");
  Int8Rows rows;
  rows.quantize(x.data(), t, k);
  for (const QuantizedWeightView& view : {o.view, chunk32}) {
    std::vector<float> portable(y.size());
    int8_linear_rows_portable(rows.view(), view, bias, portable.data(), 0, n);
    expect_same(portable, y, what + " portable, " + (view.code_order == Fp4CodeOrder::kCheckpoint ? "checkpoint" : "CPU") + " order");
  }
  for (int64_t r = 0; r < t; r += std::max<int64_t>(1, t / 2)) {
    const std::vector<float> x_row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> want(y.begin() + r * n, y.begin() + (r + 1) * n);
    expect_same(run_int8(x_row, 1, chunk32, bias, pool2), want, what + " row " + std::to_string(r) + " alone");
  }
}

void int8_sweep(WeightFormat format, const std::vector<int64_t>& ks) {
  Rng rng(static_cast<uint64_t>(format) * 1000 + 11);
  for (int64_t t : {1, 3, 6}) {
    for (int64_t n : {1, 13, 64}) {
      for (int64_t k : ks) {
        const std::string what = std::string(weight_format_name(format)) + " int8 T=" + std::to_string(t) +
                                 " N=" + std::to_string(n) + " K=" + std::to_string(k);
        check_int8_weight(quantize(format, n, k, rng), t, (n + t) % 2 == 1, rng, what);
      }
    }
  }
}

// K % 64 = 0, 16, 32 and 48: the last group partial in every way; more than one scale chunk.
// The quantization of x on this CPU's path against the definition (quantize_rows with the
// portable block), buffer by buffer: partial groups, a zero block, an Inf and a NaN block,
// values that round half-way.
TEST(Int8Activations, QuantizedRowsMatchTheDefinition) {
  Rng rng(23);
  for (int64_t cols : {16, 48, 64, 80, 1024, 1040}) {
    const int64_t rows = 3;
    std::vector<float> x = normals(rows * cols, rng);
    for (int64_t i = 0; i < 16; ++i) x[static_cast<size_t>(i)] = 0.0f;  // row 0, block 0: all zero
    if (cols >= 48) {
      x[static_cast<size_t>(cols + 20)] = std::numeric_limits<float>::infinity();  // row 1, block 1
      x[static_cast<size_t>(2 * cols + 47)] = std::numeric_limits<float>::quiet_NaN();  // row 2, block 2
      for (int64_t i = 0; i < 16; ++i) x[static_cast<size_t>(2 * cols + i)] = static_cast<float>(i - 8) * 0.5f;
    }
    Int8Rows quantized;
    quantized.quantize(x.data(), rows, cols);
    const Int8RowsView got = quantized.view();
    const int64_t groups = int8_groups(cols);
    std::vector<int8_t> codes(static_cast<size_t>(rows * groups * kInt8Group), 0);
    std::vector<float> scales(static_cast<size_t>(rows * groups * kInt8GroupLanes), 0.0f);
    std::vector<int32_t> offsets(scales.size(), 0);
    int8_detail::quantize_rows(x.data(), rows, cols, codes.data(), scales.data(), offsets.data(),
                               int8_detail::quantize_block_portable);
    const std::string what = "cols=" + std::to_string(cols);
    EXPECT_EQ(std::vector<int8_t>(got.codes, got.codes + codes.size()), codes) << what;
    EXPECT_EQ(std::vector<int32_t>(got.lane_offsets, got.lane_offsets + offsets.size()), offsets) << what;
    for (size_t i = 0; i < scales.size(); ++i) {
      EXPECT_EQ(std::isnan(got.lane_scales[i]), std::isnan(scales[i])) << what << " lane " << i;
      if (!std::isnan(scales[i])) EXPECT_EQ(got.lane_scales[i], scales[i]) << what << " lane " << i;
    }
    EXPECT_TRUE(std::any_of(offsets.begin(), offsets.end(), [](int32_t o) { return o != 0; })) << what;
  }
}

TEST(Int8Activations, Nvfp4MatchesDefinition) { int8_sweep(WeightFormat::kNvfp4, {16, 48, 64, 96, 1040, 1072, 2112}); }
TEST(Int8Activations, Mxfp4MatchesDefinition) { int8_sweep(WeightFormat::kMxfp4, {32, 64, 96, 1056, 2112}); }

TEST(Int8Activations, EveryCodeAndScaleByte) {
  Rng rng(21);
  for (WeightFormat format : {WeightFormat::kNvfp4, WeightFormat::kMxfp4}) {
    const int64_t n = 19, k = 192;
    Owned o;
    o.view.format = format;
    o.view.rows = n;
    o.view.cols = k;
    o.data.resize(static_cast<size_t>(n * k / 2));
    for (auto& b : o.data) b = static_cast<uint8_t>(rng.next());
    o.scales.resize(static_cast<size_t>(n * k / (format == WeightFormat::kNvfp4 ? 16 : 32)));
    for (auto& b : o.scales) {
      b = static_cast<uint8_t>(format == WeightFormat::kNvfp4 ? rng.next() % 0x7F : (rng.next() % 8 == 0 ? 0 : 100 + rng.next() % 40));
    }
    o.view.global_scale = 0.75f / 2688.0f;
    o.view.data = o.data.data();
    o.view.scales = o.scales.data();
    dequantize_view(o);
    check_int8_weight(o, 4, true, rng, std::string("raw ") + weight_format_name(format) + " int8");
  }
}

// A NaN or infinity in x makes its row's outputs NaN (never a finite wrong value); the other rows
// keep their bits.
TEST(Int8Activations, NonFiniteInputPoisonsOnlyItsRow) {
  Rng rng(22);
  const Owned o = quantize(WeightFormat::kNvfp4, 8, 128, rng);
  std::vector<float> x = normals(3 * 128, rng);
  ThreadPool pool(2);
  const std::vector<float> clean = run_int8(x, 3, o.view, nullptr, pool);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x_bad = x;
    x_bad[128 + 70] = bad;
    const std::vector<float> y = run_int8(x_bad, 3, o.view, nullptr, pool);
    for (int64_t c = 0; c < 8; ++c) {
      EXPECT_TRUE(std::isnan(y[static_cast<size_t>(8 + c)])) << bad << " feature " << c;
      EXPECT_EQ(bits(y[static_cast<size_t>(c)]), bits(clean[static_cast<size_t>(c)]));
      EXPECT_EQ(bits(y[static_cast<size_t>(16 + c)]), bits(clean[static_cast<size_t>(16 + c)]));
    }
  }
}

// A NaN scale byte (NVFP4 E4M3 0x7F / 0xFF, MXFP4 E8M0 0xFF) makes its weight row's outputs NaN on
// every path (the SIMD tiles' quad decode and the buffered one, both code orders); the other rows
// keep their bits. K = 320: five full groups, so a quad and a last group past it.
TEST(Int8Activations, NanScaleBytePoisonsOnlyItsFeature) {
  Rng rng(24);
  for (WeightFormat format : {WeightFormat::kNvfp4, WeightFormat::kMxfp4}) {
    const int64_t n = 9, k = 320, t = 2;
    Owned o = quantize(format, n, k, rng);
    const std::vector<float> x = normals(t * k, rng);
    ThreadPool pool(2);
    const std::vector<float> clean = run_int8(x, t, o.view, nullptr, pool);
    const int64_t per_row = k / (format == WeightFormat::kNvfp4 ? 16 : 32);
    const uint8_t nan_code = format == WeightFormat::kNvfp4 ? 0x7F : kE8m0NaN;
    o.scales[static_cast<size_t>(2 * per_row + 1)] = nan_code;                 // in the quad
    o.scales[static_cast<size_t>(7 * per_row + per_row - 1)] = nan_code;       // in the last group
    std::vector<uint8_t> repacked(o.data.size());
    reorder_fp4_codes(o.data.data(), n, k, Fp4CodeOrder::kCheckpoint, Fp4CodeOrder::kCpuChunk32, repacked.data());
    QuantizedWeightView chunk32 = o.view;
    chunk32.data = repacked.data();
    chunk32.code_order = Fp4CodeOrder::kCpuChunk32;
    for (const QuantizedWeightView& view : {o.view, chunk32}) {
      const std::vector<float> y = run_int8(x, t, view, nullptr, pool);
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          const size_t at = static_cast<size_t>(r * n + c);
          if (c == 2 || c == 7) {
            EXPECT_TRUE(std::isnan(y[at])) << weight_format_name(format) << " row " << r << " feature " << c;
          } else {
            EXPECT_EQ(bits(y[at]), bits(clean[at])) << weight_format_name(format) << " row " << r << " feature " << c;
          }
        }
      }
    }
  }
}

// apply_linears quantizes a shared x once (gate and up); results equal one call per layer, and
// int8 jobs mix with F32 ones.
TEST(Int8Activations, ApplyLinearsMatchesOneCallPerLayer) {
  Rng rng(23);
  const Owned gate = quantize(WeightFormat::kNvfp4, 40, 256, rng), up = quantize(WeightFormat::kMxfp4, 24, 256, rng);
  const Owned f32 = quantize(WeightFormat::kNvfp4, 16, 256, rng);
  QuantizedWeightView gate_view = gate.view, up_view = up.view;
  gate_view.activations = up_view.activations = ActivationPrecision::kInt8;
  const LinearWeight weights[] = {LinearWeight::from_packed(gate_view), LinearWeight::from_packed(up_view),
                                  LinearWeight::from_packed(f32.view)};
  const std::vector<float> x = normals(5 * 256, rng);
  std::vector<std::vector<float>> batched, single;
  std::vector<LinearJob> jobs;
  for (const LinearWeight& w : weights) {
    batched.emplace_back(static_cast<size_t>(5 * w.out_features()), std::nanf(""));
    single.emplace_back(static_cast<size_t>(5 * w.out_features()), std::nanf(""));
  }
  for (size_t j = 0; j < 3; ++j) jobs.push_back({&weights[j], x.data(), 5, nullptr, batched[j].data()});
  ThreadPool two(2), one(1);
  apply_linears(jobs, two);
  for (size_t j = 0; j < 3; ++j) {
    apply_linear(weights[j], x.data(), 5, nullptr, single[j].data(), one);
    for (size_t i = 0; i < single[j].size(); ++i) ASSERT_EQ(bits(batched[j][i]), bits(single[j][i])) << j << " " << i;
  }
  // The F32 job kept F32 activations: the exact kernel's bits.
  expect_same(single[2], run(x, 5, f32.view, nullptr, one), "f32 job beside int8 ones");
}

TEST(Int8Activations, ReportsPathAndRejectsOtherFormats) {
  const std::string path = int8_linear_isa_name();
  std::printf("int8_linear path: %s\n", path.c_str());
  const std::string isa = expected_cpu_path();
  const char* cap = std::getenv("MOERT_CPU_ISA");
  if (isa == "avx512" && cap != nullptr && std::string(cap) == "avx512-novnni") {
    EXPECT_EQ(path, "avx512");
  } else if (isa == "neon") {
    const bool no_dot = cap != nullptr && std::string(cap) == "neon-nodot";
    EXPECT_TRUE(path == "neon" || (!no_dot && path == "neon-dotprod")) << path;
  } else {
    EXPECT_TRUE(isa == "avx512" ? (path == "avx512" || path == "avx512-vnni") : path == isa) << path << " / " << isa;
  }
  const uint8_t byte = 0;
  QuantizedWeightView fp8{WeightFormat::kFp8Tensor, 2, 16, &byte};
  fp8.activations = ActivationPrecision::kInt8;
  const Status s = validate_quantized_weight(fp8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int8 activations apply to NVFP4 / MXFP4 only"), std::string::npos) << s.message();
}

// ---- The bf16-activation mode of FP8 weights (quant/cpu/bf16_linear.h) ---------------------------

float bf16_float(uint16_t b) { return bf16_to_f32(b); }

// x_i as the mode reads it: rounded to BF16, below 2^-55 a zero of its sign.
float bf16_x(float x) {
  const float v = bf16_float(f32_to_bf16(x));
  return std::fabs(v) < 0x1p-55f ? std::copysign(0.0f, v) : v;
}

// The header's definition written out element by element: x rounded to BF16 (below 2^-55 a
// zero), w = e4m3 * 2^8, per 128-column block 16 lanes over 32-element groups taking the odd
// element of each pair first, then lane = fma(partial, s * 2^-8, lane) and the tree.
std::vector<float> bf16_by_definition(const std::vector<float>& x, int64_t t, const Owned& o, const float* bias) {
  const int64_t n = o.view.rows, k = o.view.cols;
  auto xb = [&](int64_t r, int64_t i) -> float {
    return i < k ? bf16_x(x[static_cast<size_t>(r * k + i)]) : 0.0f;
  };
  auto scale = [&](int64_t c, int64_t b) {
    if (o.view.format == WeightFormat::kFp8Tensor) return o.view.global_scale;
    return o.view.block_scale_inv[static_cast<size_t>((c / 128) * ((k + 127) / 128) + b)];
  };
  std::vector<float> y(static_cast<size_t>(t * n));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      auto w = [&](int64_t i) { return i < k ? e4m3_decode(o.data[static_cast<size_t>(c * k + i)]) * 256.0f : 0.0f; };
      float lanes[16] = {};
      for (int64_t b = 0; b * 128 < k; ++b) {
        float partial[16] = {};
        for (int64_t g = 128 * b; g < std::min(128 * b + 128, k); g += 32) {
          for (int l = 0; l < 16; ++l) {
            partial[l] = std::fma(xb(r, g + 2 * l + 1), w(g + 2 * l + 1), partial[l]);
            partial[l] = std::fma(xb(r, g + 2 * l), w(g + 2 * l), partial[l]);
          }
        }
        for (int l = 0; l < 16; ++l) lanes[l] = std::fma(partial[l], scale(c, b) * 0x1p-8f, lanes[l]);
      }
      for (int width = 8; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
      }
      y[static_cast<size_t>(r * n + c)] = lanes[0] + (bias != nullptr ? bias[c] : 0.0f);
    }
  }
  return y;
}

std::vector<float> run_bf16(const std::vector<float>& x, int64_t t, QuantizedWeightView w, const float* bias,
                            ThreadPool& pool) {
  w.activations = ActivationPrecision::kBf16;
  w.fp8_codes_finite = true;
  std::vector<float> y(static_cast<size_t>(t * w.rows), std::numeric_limits<float>::quiet_NaN());
  apply_linear(LinearWeight::from_packed(w), x.data(), t, bias, y.data(), pool);
  return y;
}

void check_bf16_weight(const Owned& o, int64_t t, bool with_bias, Rng& rng, const std::string& what) {
  const int64_t n = o.view.rows, k = o.view.cols;
  std::vector<float> x = normals(t * k, rng);
  for (int64_t i = 0; i < t * k; i += 37) x[static_cast<size_t>(i)] *= 20.0f;       // outliers
  for (int64_t i = 5; i < t * k; i += 41) x[static_cast<size_t>(i)] = 0.0f;         // zeros
  for (int64_t i = 11; i < t * k; i += 43) x[static_cast<size_t>(i)] *= 0x1p-56f;  // flushed
  for (int64_t i = 17; i < t * k; i += 47) x[static_cast<size_t>(i)] *= 0x1p-54f;  // kept, tiny
  // Row 1 all around 2^-55: about half its elements flushed, the sums made of the others.
  for (int64_t i = k; i < std::min(t, int64_t{2}) * k; ++i) x[static_cast<size_t>(i)] *= 0x1p-55f;
  const std::vector<float> bias_v = normals(n, rng);
  const float* bias = with_bias ? bias_v.data() : nullptr;
  ThreadPool pool2(2), pool1(1);

  const std::vector<float> y = run_bf16(x, t, o.view, bias, pool2);
  expect_same(y, bf16_by_definition(x, t, o, bias), what + " vs the definition");
  // Against the float64 product with x unrounded: within what rounding (and flushing) x to BF16
  // allows, sum_i |x_i - xb_i| |w_i|, plus F32 slack.
  const std::vector<float> rounded_x = [&] {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_x(x[i]);
    return r;
  }();
  int64_t outside = 0;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double exact = bias != nullptr ? bias[c] : 0.0, bound = 0.0, magnitude = std::fabs(exact);
      for (int64_t i = 0; i < k; ++i) {
        const size_t at = static_cast<size_t>(r * k + i);
        const double w = o.dequant[static_cast<size_t>(c * k + i)];
        exact += static_cast<double>(x[at]) * w;
        bound += std::fabs((static_cast<double>(x[at]) - rounded_x[at]) * w);
        magnitude += std::fabs(x[at] * w);
      }
      if (std::fabs(y[static_cast<size_t>(r * n + c)] - exact) > bound + 1e-5 * magnitude) ++outside;
    }
  }
  EXPECT_EQ(outside, 0) << what << " vs F32 activations";
  EXPECT_GT(relative_l2_vs_f64(y, x, t, o, bias), 1e-6) << what << ": bf16 activations must round x";
  expect_same(run_bf16(x, t, o.view, bias, pool1), y, what + " 1 thread");
  Bf16Rows rows;
  rows.round(x.data(), t, k);
  QuantizedWeightView marked = o.view;
  marked.fp8_codes_finite = true;
  std::vector<float> portable(y.size());
  bf16_linear_rows_portable(rows.view(), marked, bias, portable.data(), 0, n);
  expect_same(portable, y, what + " portable");
  for (int64_t r = 0; r < t; r += std::max<int64_t>(1, t / 2)) {
    const std::vector<float> x_row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> want(y.begin() + r * n, y.begin() + (r + 1) * n);
    expect_same(run_bf16(x_row, 1, o.view, bias, pool2), want, what + " row " + std::to_string(r) + " alone");
  }
}

// K: one partial group, whole groups, a partial block, several blocks with a partial last group.
void bf16_sweep(WeightFormat format) {
  Rng rng(static_cast<uint64_t>(format) * 1000 + 29);
  for (int64_t t : {1, 3, 6}) {
    for (int64_t n : {1, 7, 130}) {
      for (int64_t k : {1, 31, 64, 100, 129, 300, 1024}) {
        const std::string what = std::string(weight_format_name(format)) + " bf16 T=" + std::to_string(t) +
                                 " N=" + std::to_string(n) + " K=" + std::to_string(k);
        check_bf16_weight(quantize(format, n, k, rng), t, (n + t) % 2 == 1, rng, what);
      }
    }
  }
}

TEST(Bf16Activations, Fp8BlockMatchesDefinition) { bf16_sweep(WeightFormat::kFp8Block); }
TEST(Bf16Activations, Fp8TensorMatchesDefinition) { bf16_sweep(WeightFormat::kFp8Tensor); }

// Every finite E4M3 code (subnormals, zeros of both signs, the largest) read alone: a one-hot x
// gives code * s exactly, on four rows at once (the SIMD tiles' columns), at each position of a
// 32-element group.
TEST(Bf16Activations, EveryFiniteCodeDecodesExactly) {
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));
  }
  const int64_t k = 64, n = static_cast<int64_t>(codes.size());  // 254 rows, each holding one code per position
  Owned o;
  o.view.format = WeightFormat::kFp8Tensor;
  o.view.rows = n;
  o.view.cols = k;
  o.view.global_scale = 0.25f;
  o.data.resize(static_cast<size_t>(n * k));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      o.data[static_cast<size_t>(c * k + i)] = codes[static_cast<size_t>((c + 3 * i) % n)];
    }
  }
  o.view.data = o.data.data();
  ThreadPool pool(2);
  for (int64_t i = 0; i < k; ++i) {
    std::vector<float> x(static_cast<size_t>(k), 0.0f);
    x[static_cast<size_t>(i)] = 1.0f;
    const std::vector<float> y = run_bf16(x, 1, o.view, nullptr, pool);
    for (int64_t c = 0; c < n; ++c) {
      const float want = e4m3_decode(o.data[static_cast<size_t>(c * k + i)]) * 0.25f;
      ASSERT_EQ(y[static_cast<size_t>(c)], want) << "row " << c << " position " << i << " code 0x" << std::hex
                                                 << int{o.data[static_cast<size_t>(c * k + i)]};
    }
  }
}

TEST(Bf16Activations, NonFiniteInputPoisonsOnlyItsRow) {
  Rng rng(71);
  const Owned o = quantize(WeightFormat::kFp8Block, 9, 256, rng);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = normals(3 * 256, rng);
    x[256 + 77] = bad;
    ThreadPool pool(2);
    const std::vector<float> y = run_bf16(x, 3, o.view, nullptr, pool);
    for (int64_t c = 0; c < 9; ++c) {
      EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(c)])) << c;
      EXPECT_FALSE(std::isfinite(y[static_cast<size_t>(9 + c)])) << c;
      EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(18 + c)])) << c;
    }
  }
}

// Gate and up reading one x share its rounding; an F32 FP8 job beside them keeps the exact bits.
TEST(Bf16Activations, ApplyLinearsMatchesOneCallPerLayer) {
  Rng rng(73);
  const Owned gate = quantize(WeightFormat::kFp8Block, 40, 192, rng);
  const Owned up = quantize(WeightFormat::kFp8Block, 24, 192, rng);
  const Owned exact = quantize(WeightFormat::kFp8Tensor, 12, 192, rng);
  const std::vector<float> x = normals(5 * 192, rng);
  ThreadPool pool(2), one(1);
  QuantizedWeightView g = gate.view, u = up.view;
  for (QuantizedWeightView* v : {&g, &u}) {
    v->activations = ActivationPrecision::kBf16;
    v->fp8_codes_finite = true;
  }
  const LinearWeight lw[] = {LinearWeight::from_packed(g), LinearWeight::from_packed(u),
                             LinearWeight::from_packed(exact.view)};
  std::vector<std::vector<float>> batched(3), single(3);
  std::vector<LinearJob> jobs;
  for (int j = 0; j < 3; ++j) {
    batched[static_cast<size_t>(j)].assign(static_cast<size_t>(5 * lw[j].out_features()), 0.0f);
    jobs.push_back({&lw[j], x.data(), 5, nullptr, batched[static_cast<size_t>(j)].data()});
  }
  apply_linears(jobs, pool);
  single[0] = run_bf16(x, 5, gate.view, nullptr, one);
  single[1] = run_bf16(x, 5, up.view, nullptr, one);
  single[2] = run(x, 5, exact.view, nullptr, one);
  for (size_t j = 0; j < 3; ++j) expect_same(batched[j], single[j], "job " + std::to_string(j));
}

// ---- The bf16-activation mode of dense BF16 weights ---------------------------------------------

// A dense BF16 weight [n, k] of normals (some zeros, some at the mode's 2^-56 floor, some under
// it: those count as zeros of their sign).
struct DenseBf16 {
  std::vector<uint16_t> bits;
  int64_t n = 0, k = 0;
  LinearWeight weight() const {
    return LinearWeight::from_dense(
        TensorView::contiguous(DType::kBF16, Shape{n, k}, const_cast<uint16_t*>(bits.data())));
  }
};

DenseBf16 dense_bf16(int64_t n, int64_t k, Rng& rng) {
  DenseBf16 d{{}, n, k};
  for (const float v : normals(n * k, rng)) d.bits.push_back(f32_to_bf16(v * 0.05f));
  for (int64_t i = 3; i < n * k; i += 29) d.bits[static_cast<size_t>(i)] = 0x8000;                   // -0
  for (int64_t i = 7; i < n * k; i += 31) d.bits[static_cast<size_t>(i)] = f32_to_bf16(0x1.4p-56f);  // the floor
  for (int64_t i = 13; i < n * k; i += 37) d.bits[static_cast<size_t>(i)] = f32_to_bf16(-0x1.8p-57f);  // flushed
  for (int64_t i = 19; i < n * k; i += 41) d.bits[static_cast<size_t>(i)] = 0x0003;                    // subnormal
  return d;
}

// w_i as the mode reads it: below 2^-56 a zero of its sign.
float bf16_w(uint16_t bits) {
  const float v = bf16_float(bits);
  return std::fabs(v) < 0x1p-56f ? std::copysign(0.0f, v) : v;
}

// The storage the loader gives enable_bf16_activations for flushed copies.
struct FlushedCopies {
  std::vector<std::vector<uint16_t>> copies;
  Bf16WeightStorage storage() {
    return [this](int64_t numel) { return copies.emplace_back(static_cast<size_t>(numel)).data(); };
  }
};

// The header's dense definition element by element: 16 lanes over 32-element groups (the odd
// element of each pair first), no blocks, then the tree and the bias.
std::vector<float> bf16_dense_by_definition(const std::vector<float>& x, int64_t t, const DenseBf16& d,
                                            const float* bias) {
  std::vector<float> y(static_cast<size_t>(t * d.n));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < d.n; ++c) {
      auto xb = [&](int64_t i) { return i < d.k ? bf16_x(x[static_cast<size_t>(r * d.k + i)]) : 0.0f; };
      auto w = [&](int64_t i) { return i < d.k ? bf16_w(d.bits[static_cast<size_t>(c * d.k + i)]) : 0.0f; };
      float lanes[16] = {};
      for (int64_t g = 0; g < d.k; g += 32) {
        for (int l = 0; l < 16; ++l) {
          lanes[l] = std::fma(xb(g + 2 * l + 1), w(g + 2 * l + 1), lanes[l]);
          lanes[l] = std::fma(xb(g + 2 * l), w(g + 2 * l), lanes[l]);
        }
      }
      for (int width = 8; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
      }
      y[static_cast<size_t>(r * d.n + c)] = lanes[0] + (bias != nullptr ? bias[c] : 0.0f);
    }
  }
  return y;
}

std::vector<float> run_bf16_dense(const std::vector<float>& x, int64_t t, const DenseBf16& d, const float* bias,
                                  ThreadPool& pool) {
  LinearWeight w = d.weight();
  FlushedCopies copies;
  EXPECT_TRUE(enable_bf16_activations(w, copies.storage()));
  std::vector<float> y(static_cast<size_t>(t * d.n), std::numeric_limits<float>::quiet_NaN());
  apply_linear(w, x.data(), t, bias, y.data(), pool);
  return y;
}

// Every path (this binary runs under each MOERT_CPU_ISA cap) against the definition, the
// portable variant, one thread, and float64 within what rounding x to BF16 allows.
TEST(Bf16Activations, DenseBf16MatchesDefinition) {
  Rng rng(83);
  ThreadPool pool2(2), pool1(1);
  for (int64_t t : {1, 3, 6}) {
    for (int64_t n : {1, 7, 130}) {
      for (int64_t k : {1, 31, 64, 100, 129, 300, 1024}) {
        const std::string what = "dense bf16 T=" + std::to_string(t) + " N=" + std::to_string(n) +
                                 " K=" + std::to_string(k);
        const DenseBf16 d = dense_bf16(n, k, rng);
        std::vector<float> x = normals(t * k, rng);
        for (int64_t i = 0; i < t * k; i += 37) x[static_cast<size_t>(i)] *= 20.0f;      // outliers
        for (int64_t i = 11; i < t * k; i += 43) x[static_cast<size_t>(i)] *= 0x1p-56f;  // flushed
        for (int64_t i = 17; i < t * k; i += 47) x[static_cast<size_t>(i)] *= 0x1p-54f;  // kept, tiny
        const std::vector<float> bias_v = normals(n, rng);
        const float* bias = (n + t) % 2 == 1 ? bias_v.data() : nullptr;
        const std::vector<float> y = run_bf16_dense(x, t, d, bias, pool2);
        expect_same(y, bf16_dense_by_definition(x, t, d, bias), what + " vs the definition");
        expect_same(run_bf16_dense(x, t, d, bias, pool1), y, what + " 1 thread");
        LinearWeight w = d.weight();
        FlushedCopies copies;
        ASSERT_TRUE(enable_bf16_activations(w, copies.storage()));
        Bf16Rows rows;
        rows.round(x.data(), t, k);
        std::vector<float> portable(y.size());
        bf16_dense_linear_rows_portable(rows.view(), w, bias, portable.data(), 0, n);
        expect_same(portable, y, what + " portable");
        int64_t outside = 0;
        double differs = 0.0;
        for (int64_t r = 0; r < t; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            double exact = bias != nullptr ? bias[c] : 0.0, bound = 0.0, magnitude = std::fabs(exact);
            for (int64_t i = 0; i < k; ++i) {
              const float xi = x[static_cast<size_t>(r * k + i)];
              const double wi = bf16_w(d.bits[static_cast<size_t>(c * k + i)]);
              exact += static_cast<double>(xi) * wi;
              bound += std::fabs((static_cast<double>(xi) - bf16_x(xi)) * wi);
              magnitude += std::fabs(xi * wi);
            }
            const double error = std::fabs(y[static_cast<size_t>(r * n + c)] - exact);
            outside += error > bound + 1e-5 * magnitude;
            differs += error;
          }
        }
        EXPECT_EQ(outside, 0) << what << " vs float64";
        if (k >= 31) EXPECT_GT(differs, 0.0) << what << ": bf16 activations must round x";
      }
    }
  }
}

// A finite BF16 weight is admitted; one holding elements under 2^-56 through a flushed copy only
// (the checkpoint's bytes untouched); a non-finite one never.
TEST(Bf16Activations, DenseAdmissionFlushesTinyWeightsIntoACopy) {
  Rng rng(89);
  DenseBf16 clean = dense_bf16(5, 4100, rng);  // more than one 4096-element scan block
  for (uint16_t& b : clean.bits) b = bf16_w(b) == 0.0f ? static_cast<uint16_t>(b & 0x8000u) : b;
  LinearWeight ok = clean.weight();
  EXPECT_TRUE(enable_bf16_activations(ok));
  EXPECT_EQ(ok.dense_activations, ActivationPrecision::kBf16);
  EXPECT_EQ(ok.dense.data, clean.bits.data());  // no copy needed
  for (const uint16_t tiny : {uint16_t{0x0001}, uint16_t{0x8040}, f32_to_bf16(0x1p-57f)}) {
    for (const int64_t at : {int64_t{0}, int64_t{4097}, int64_t{5 * 4100 - 1}}) {
      DenseBf16 d = clean;
      d.bits[static_cast<size_t>(at)] = tiny;
      LinearWeight without = d.weight();
      EXPECT_FALSE(enable_bf16_activations(without)) << std::hex << tiny << " at " << std::dec << at;
      EXPECT_EQ(without.dense_activations, ActivationPrecision::kF32);
      LinearWeight with = d.weight();
      FlushedCopies copies;
      ASSERT_TRUE(enable_bf16_activations(with, copies.storage()));
      ASSERT_EQ(copies.copies.size(), 1u);
      EXPECT_EQ(with.dense.data, copies.copies[0].data());
      for (size_t i = 0; i < d.bits.size(); ++i) {
        ASSERT_EQ(copies.copies[0][i], static_cast<int64_t>(i) == at ? (tiny & 0x8000) : d.bits[i]) << i;
      }
      EXPECT_EQ(d.bits[static_cast<size_t>(at)], tiny);  // the weight's own bytes stay
    }
  }
  for (const uint16_t bad : {uint16_t{0x7F80}, uint16_t{0xFFC0}}) {
    DenseBf16 d = clean;
    d.bits[4097] = bad;
    LinearWeight w = d.weight();
    FlushedCopies copies;
    EXPECT_FALSE(enable_bf16_activations(w, copies.storage())) << std::hex << bad;
  }
  std::vector<float> f32(20, 1.0f);
  LinearWeight f32_weight = LinearWeight::from_dense(TensorView::contiguous(DType::kF32, Shape{4, 5}, f32.data()));
  EXPECT_FALSE(enable_bf16_activations(f32_weight));
  const LinearWeight not_enabled = clean.weight();
  Bf16Rows rows;
  std::vector<float> x(4100, 1.0f), y(5);
  rows.round(x.data(), 1, 4100);
  MOERT_EXPECT_DEATH(bf16_dense_linear_rows(rows.view(), not_enabled, nullptr, y.data(), 0, 5),
                     "not enabled for them");
}

// One x rounded once serves a dense BF16 job and an FP8 job in bf16 mode; a dense BF16 job with
// F32 activations beside them keeps the exact bits.
TEST(Bf16Activations, DenseAndFp8JobsShareTheRoundedX) {
  Rng rng(97);
  const DenseBf16 dense = dense_bf16(33, 160, rng);
  const Owned fp8 = quantize(WeightFormat::kFp8Block, 20, 160, rng);
  const std::vector<float> x = normals(4 * 160, rng);
  ThreadPool pool(2), one(1);
  LinearWeight d = dense.weight();
  FlushedCopies copies;
  ASSERT_TRUE(enable_bf16_activations(d, copies.storage()));
  QuantizedWeightView f = fp8.view;
  f.activations = ActivationPrecision::kBf16;
  f.fp8_codes_finite = true;
  const LinearWeight lw[] = {d, LinearWeight::from_packed(f), dense.weight()};
  std::vector<std::vector<float>> batched(3);
  std::vector<LinearJob> jobs;
  for (int j = 0; j < 3; ++j) {
    batched[static_cast<size_t>(j)].assign(static_cast<size_t>(4 * lw[j].out_features()), 0.0f);
    jobs.push_back({&lw[j], x.data(), 4, nullptr, batched[static_cast<size_t>(j)].data()});
  }
  apply_linears(jobs, pool);
  expect_same(batched[0], run_bf16_dense(x, 4, dense, nullptr, one), "dense bf16 job");
  expect_same(batched[1], run_bf16(x, 4, fp8.view, nullptr, one), "fp8 bf16 job");
  std::vector<float> exact(static_cast<size_t>(4 * 33));
  apply_linear(dense.weight(), x.data(), 4, nullptr, exact.data(), one);
  expect_same(batched[2], exact, "dense f32 job");
}

TEST(Bf16Activations, ReportsPathAndRejectsOtherWeights) {
  const std::string path = bf16_linear_isa_name();
  std::printf("bf16_linear path: %s\n", path.c_str());
  const std::string isa = expected_cpu_path();
  const char* cap = std::getenv("MOERT_CPU_ISA");
  const bool bf16_off = cap != nullptr && std::string(cap) == "avx512-nobf16";
  if (isa == "avx512") {
    EXPECT_TRUE(path == "avx2" || (!bf16_off && path == "avx512-bf16")) << path;
  } else {
    EXPECT_EQ(path, isa == "avx2" ? "avx2" : "portable");
  }
  Rng rng(79);
  const Owned nv = quantize(WeightFormat::kNvfp4, 4, 64, rng), fp8 = quantize(WeightFormat::kFp8Block, 4, 64, rng);
  Bf16Rows rows;
  const std::vector<float> x = normals(64, rng);
  rows.round(x.data(), 1, 64);
  std::vector<float> y(4);
  QuantizedWeightView nv_bf16 = nv.view;
  nv_bf16.activations = ActivationPrecision::kBf16;
  const Status s = validate_quantized_weight(nv_bf16);
  EXPECT_NE(s.message().find("bf16 activations apply to FP8 only"), std::string::npos) << s.message();
  MOERT_EXPECT_DEATH(bf16_linear_rows(rows.view(), nv.view, nullptr, y.data(), 0, 4),
                     "bf16 activations with a nvfp4 weight");
  MOERT_EXPECT_DEATH(bf16_linear_rows(rows.view(), fp8.view, nullptr, y.data(), 0, 4),
                     "bf16 activations with a fp8_block weight");  // codes not marked finite
}

}  // namespace
}  // namespace moert::quant
