// The int8-activation mode of the fused quantized linear (quant/cpu/int8_linear.h): its
// definition in float64, the same bits on every path, and its error against F32
// (helpers in quantized_linear_test_support.h; CTest runs this binary under each ISA cap).
#include <gtest/gtest.h>

#include "tests/quant/quantized/quantized_linear_test_support.h"

namespace moert::quant::linear_test {
namespace {

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

}  // namespace
}  // namespace moert::quant::linear_test
