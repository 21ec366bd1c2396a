// Fused quantized linear (quant/cpu/quantized_linear.h) against the codecs: the weight is
// quantized and dequantized with quant/formats, then
//   * a float64 matmul over the dequantized weight bounds the error (relative L2 < 1e-5);
//   * cpu::dot_f32_reference (core/cpu/dot.h's portable canonical dot) over the dequantized rows must
//     equal every output bit for bit, on whichever path this CPU (and MOERT_CPU_ISA) selects;
//   * the explicit portable path, each row alone, other thread counts: bit-identical again.
// The int8-activation mode (quant/cpu/int8_linear.h) has its own checks in
// int8_activations_test.cpp: its definition in float64, the same bits on every path, and its
// error against F32. So has the bf16-activation mode of FP8 weights (quant/cpu/bf16_linear.h,
// bf16_activations_test.cpp): its definition written out there, the same bits on every path,
// every code. The three files share quantized_linear_test_support.h.
// CTest also runs this binary with MOERT_CPU_ISA=avx2 and =portable (and the BF16 tests with
// avx512-nobf16).
#include <gtest/gtest.h>

#include "tests/quant/quantized/quantized_linear_test_support.h"

namespace moert::quant::linear_test {
namespace {

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

}  // namespace
}  // namespace moert::quant::linear_test
