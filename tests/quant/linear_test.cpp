// The dense linear kernel and the 16-bit conversions against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "quant/bf16.h"
#include "core/cpu/dot.h"
#include "core/cpu/isa.h"
#include "quant/cpu/linear.h"

namespace moert::quant {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is the midpoint between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = bf16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) ASSERT_EQ(f32_to_bf16(value), bits);
  }
}

TEST(F16, EveryFiniteCodeRoundTrips) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = f16_to_f32(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) ASSERT_EQ(f32_to_f16(value), bits) << std::hex << bits;
  }
}

struct Problem {
  int64_t rows, n, k;
};

// Fills a weight matrix of `dtype` with normal samples: w16 holds the BF16/F16 codes, w the
// values they stand for (the samples themselves for F32). Returns the data the kernel reads.
void* fill_weights(DType dtype, std::mt19937& rng, std::vector<float>& w, std::vector<uint16_t>& w16) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < w.size(); ++i) {
    const float value = normal(rng);
    w16[i] = dtype == DType::kBF16 ? f32_to_bf16(value) : f32_to_f16(value);
    w[i] = dtype == DType::kF32 ? value : dtype == DType::kBF16 ? bf16_to_f32(w16[i]) : f16_to_f32(w16[i]);
  }
  return dtype == DType::kF32 ? static_cast<void*>(w.data()) : static_cast<void*>(w16.data());
}

TEST(Linear, MatchesFloat64ReferenceForEveryWeightType) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(3);
  for (const Problem& p : {Problem{1, 1, 1}, Problem{3, 17, 15}, Problem{5, 64, 256}, Problem{2, 130, 1000}}) {
    std::vector<float> x(static_cast<size_t>(p.rows * p.k)), w(static_cast<size_t>(p.n * p.k)),
        bias(static_cast<size_t>(p.n));
    for (float& v : x) v = normal(rng);
    for (float& v : bias) v = normal(rng);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<uint16_t> w16(w.size());
      void* data = fill_weights(dtype, rng, w, w16);
      const TensorView view = TensorView::contiguous(dtype, {p.n, p.k}, data);
      std::vector<float> y(static_cast<size_t>(p.rows * p.n));
      linear_forward(x.data(), p.rows, view, bias.data(), y.data(), pool);
      for (int64_t t = 0; t < p.rows; ++t) {
        double diff = 0, norm = 0;
        for (int64_t j = 0; j < p.n; ++j) {
          double expected = bias[static_cast<size_t>(j)];
          for (int64_t i = 0; i < p.k; ++i) expected += static_cast<double>(x[t * p.k + i]) * w[j * p.k + i];
          diff += std::pow(y[t * p.n + j] - expected, 2);
          norm += expected * expected;
        }
        EXPECT_LT(std::sqrt(diff / norm), 1e-6) << dtype_name(dtype) << " k=" << p.k;
      }
    }
  }
}

TEST(Linear, RowsAreBitIdenticalWhateverTheBatchAndThreads) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 77, k = 301, rows = 9;
  std::vector<float> x(static_cast<size_t>(rows * k)), w(static_cast<size_t>(n * k));
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  const TensorView view = TensorView::contiguous(DType::kF32, {n, k}, w.data());
  ThreadPool one(1), four(4);
  std::vector<float> batched(static_cast<size_t>(rows * n));
  linear_forward(x.data(), rows, view, nullptr, batched.data(), four);
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> single(static_cast<size_t>(n));
    linear_forward(x.data() + t * k, 1, view, nullptr, single.data(), one);
    EXPECT_EQ(0, std::memcmp(single.data(), batched.data() + t * n, sizeof(float) * n)) << "row " << t;
  }
}

}  // namespace
}  // namespace moert::quant

namespace moert::quant {
namespace {

// Every instruction-set path computes the canonical sum: the run-time path equals the
// portable one bit for bit, at lengths with and without a tail.
TEST(Linear, DispatchedDotEqualsPortableBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("cpu path: %s\n", cpu::cpu_isa_name());
  for (int64_t k : {1, 7, 16, 17, 64, 100, 1000, 1024}) {
    std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
    for (float& v : a) v = normal(rng);
    for (float& v : b) v = normal(rng);
    const float fast = cpu::dot_f32(a.data(), b.data(), k);
    const float slow = cpu::dot_f32_reference(a.data(), b.data(), k);
    EXPECT_EQ(0, std::memcmp(&fast, &slow, sizeof(float))) << "k=" << k << ": " << fast << " vs " << slow;
  }
}

}  // namespace
}  // namespace moert::quant

namespace moert::quant {
namespace {

// The blocked multi-row, multi-column kernel is the canonical dot for every element, for every
// weight type and every row count of a tile (AVX-512 1..6 rows, AVX2 1..4, both halves of AVX2's
// lanes), with and without a tail after the last 16-element chunk.
TEST(Linear, EveryOutputIsTheCanonicalDot) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (auto [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 9, 33}, {7, 23, 64}, {70, 13, 17}, {11, 9, 1024},
                            {2, 14, 48}, {3, 12, 40}, {4, 15, 96}, {5, 7, 200}, {6, 16, 16}, {8, 11, 130}, {13, 5, 272}}) {
    std::vector<float> x(static_cast<size_t>(rows * k)), w(static_cast<size_t>(n * k)), y(static_cast<size_t>(rows * n));
    std::vector<uint16_t> w16(w.size());
    for (float& v : x) v = normal(rng);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      void* data = fill_weights(dtype, rng, w, w16);
      linear_forward(x.data(), rows, TensorView::contiguous(dtype, {n, k}, data), nullptr, y.data(), pool);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t j = 0; j < n; ++j) {
          const float expected = cpu::dot_f32_reference(x.data() + t * k, w.data() + j * k, k);
          ASSERT_EQ(0, std::memcmp(&expected, &y[t * n + j], sizeof(float)))
              << dtype_name(dtype) << " row " << t << " of " << rows << ", feature " << j << " of " << n << ", k=" << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moert::quant
