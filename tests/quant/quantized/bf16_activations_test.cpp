// The bf16-activation mode of FP8 (and dense BF16) weights (quant/cpu/bf16_linear.h): its
// definition written out here, the same bits on every path, every code (CTest runs this
// binary under each ISA cap, and the Bf16Activations tests with avx512-nobf16).
#include <gtest/gtest.h>

#include "tests/quant/quantized/quantized_linear_test_support.h"

namespace moert::quant::linear_test {
namespace {

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
}  // namespace moert::quant::linear_test
