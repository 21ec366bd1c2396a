// Backend conformance harness (in the manner of ggml's test-backend-ops): every op of the
// Backend table, on every backend compiled in (the CUDA one also emulated on the CPU), against a
// simple float64 reference on random shapes (odd sizes, one row, empty batches). Floats
// are compared by relative L2 error against the float64 result, never on all-zero data;
// integer outputs (ids, copies) exactly.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "quant/bf16.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/weight.h"
#include "core/check.h"
#include "experts/router.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_backend.h"
#if defined(MOERT_CUDA_EMULATION)
#include "core/cuda/emulation/emulated_device.h"
#endif
#include "runtime/sampling/sampler.h"
#include "tests/support/reference_routing.h"
#include "tests/support/test_support.h"

namespace moert::backend {
namespace {

using moert::testing::relative_l2_error;

constexpr double kTolerance = 2e-6;  // relative L2 error of F32 ops against float64

// The backends built into this binary that can run here.
struct BackendCase {
  std::string name;
  std::function<std::unique_ptr<Backend>(ThreadPool&)> make;
};
// This binary links the CUDA backend emulated on the CPU (core/cuda/emulation): it runs
// beside the CPU backend here. The `cuda` build of this file links the real one instead and
// skips without a GPU (tests/support/cuda_test_main.cpp).
std::unique_ptr<Backend> make_cuda(ThreadPool&) {
  Result<std::unique_ptr<Backend>> backend = MOERT_CUDA_NS::make_cuda_backend(0);
  MOERT_CHECK(backend.is_ok(), "" << backend.status().message());
  return std::move(*backend);
}
std::vector<BackendCase> present_backends() {
#if defined(MOERT_CUDA_EMULATION) && defined(MOERT_CONFORMANCE_CPU_ONLY)
  return {{"cpu", [](ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }}};
#elif defined(MOERT_CUDA_EMULATION)
  return {{"cpu", [](ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }},
          {"cuda_emulated", make_cuda}};
#else
  return {{"cuda", make_cuda}};
#endif
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const BackendCase& c : present_backends()) {
      if (c.name == GetParam()) backend_ = c.make(pool_);
    }
    ASSERT_NE(backend_, nullptr);
  }
  std::vector<float> random_floats(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng_);
    return v;
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{1234};
};

// float64 y = x . W^T (+ bias), W given as F32 values.
std::vector<double> reference_linear(const std::vector<float>& x, int64_t rows, const std::vector<float>& w,
                                     int64_t n, int64_t k, const float* bias) {
  std::vector<double> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n; ++o) {
      double acc = bias == nullptr ? 0.0 : bias[o];
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(x[static_cast<size_t>(r * k + i)]) * w[static_cast<size_t>(o * k + i)];
      y[static_cast<size_t>(r * n + o)] = acc;
    }
  }
  return y;
}

std::vector<double> reference_swiglu(const std::vector<float>& x, int64_t rows, int64_t dim, int64_t width,
                                     const std::vector<float>& gate, const std::vector<float>& up,
                                     const std::vector<float>& down) {
  const std::vector<double> g = reference_linear(x, rows, gate, width, dim, nullptr);
  const std::vector<double> u = reference_linear(x, rows, up, width, dim, nullptr);
  std::vector<double> h(g.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  std::vector<double> y(static_cast<size_t>(rows * dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < dim; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < width; ++i) acc += h[static_cast<size_t>(r * width + i)] * down[static_cast<size_t>(o * width + i)];
      y[static_cast<size_t>(r * dim + o)] = acc;
    }
  }
  return y;
}

// Top-2 routing of `tokens` tokens over `num_experts`: two distinct random experts a token,
// with the gate weights `first` and `second`. [T, 2] ids and weights.
struct TwoExpertRouting {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
TwoExpertRouting random_two_expert_routing(std::mt19937& rng, int64_t tokens, int num_experts, float first,
                                           float second) {
  TwoExpertRouting routing;
  for (int64_t t = 0; t < tokens; ++t) {
    const int expert = static_cast<int>(rng() % num_experts);
    routing.ids.push_back(expert);
    routing.ids.push_back((expert + 1 + static_cast<int>(rng() % (num_experts - 1))) % num_experts);
    routing.weights.push_back(first);
    routing.weights.push_back(second);
  }
  return routing;
}

TensorView f32_view(std::vector<float>& v, Shape shape) { return TensorView::contiguous(DType::kF32, std::move(shape), v.data()); }

// Routed experts with random F32 weights: gate, up [width, dim], down [dim, width].
struct RandomExperts {
  std::vector<std::vector<float>> gates, ups, downs;
  std::vector<quant::LinearWeight> gate_w, up_w, down_w;

  RandomExperts(int num_experts, int64_t dim, int64_t width, const std::function<std::vector<float>(int64_t)>& random) {
    for (int e = 0; e < num_experts; ++e) {
      gates.push_back(random(width * dim));
      ups.push_back(random(width * dim));
      downs.push_back(random(dim * width));
    }
    for (size_t e = 0; e < gates.size(); ++e) {  // views into the vectors, which no longer move
      gate_w.push_back(quant::LinearWeight::from_dense(f32_view(gates[e], {width, dim})));
      up_w.push_back(quant::LinearWeight::from_dense(f32_view(ups[e], {width, dim})));
      down_w.push_back(quant::LinearWeight::from_dense(f32_view(downs[e], {dim, width})));
    }
  }
  std::function<Backend::ExpertWeights(int)> weights() const {
    return [this](int e) {
      const auto u = static_cast<size_t>(e);
      return Backend::ExpertWeights{&gate_w[u], &up_w[u], &down_w[u], nullptr, nullptr, nullptr, {}};
    };
  }
};

TEST_P(Conformance, EmbeddingGatherWidensEveryDtypeExactly) {
  for (int64_t vocab : {1, 7, 33}) {
    for (int64_t dim : {1, 5, 64}) {
      std::vector<float> table = random_floats(vocab * dim);
      std::vector<uint16_t> bf16(table.size());
      for (size_t i = 0; i < table.size(); ++i) bf16[i] = quant::f32_to_bf16(table[i]);
      std::vector<int32_t> tokens;
      for (int t = 0; t < 9; ++t) tokens.push_back(static_cast<int32_t>(rng_() % static_cast<unsigned>(vocab)));
      for (int64_t num_tokens : {int64_t{0}, int64_t{1}, int64_t{9}}) {
        std::vector<float> out(static_cast<size_t>(num_tokens * dim), -1.0f);
        backend_->embedding_gather(f32_view(table, {vocab, dim}), tokens.data(), num_tokens, out.data());
        std::vector<float> out_bf16(out.size());
        backend_->embedding_gather(TensorView::contiguous(DType::kBF16, {vocab, dim}, bf16.data()), tokens.data(),
                                   num_tokens, out_bf16.data());
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t i = 0; i < dim; ++i) {
            const size_t src = static_cast<size_t>(tokens[static_cast<size_t>(t)] * dim + i);
            ASSERT_EQ(out[static_cast<size_t>(t * dim + i)], table[src]);
            ASSERT_EQ(out_bf16[static_cast<size_t>(t * dim + i)], quant::bf16_to_f32(bf16[src]));
          }
        }
      }
    }
  }
}

TEST_P(Conformance, RmsNormMatchesFloat64) {
  for (int64_t rows : {1, 3, 17}) {
    for (int64_t dim : {1, 7, 256}) {
      std::vector<float> x = random_floats(rows * dim, 3.0f), w = random_floats(dim);
      std::vector<double> expected(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[static_cast<size_t>(r * dim + i)]) * x[static_cast<size_t>(r * dim + i)];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + 1e-6);
        for (int64_t i = 0; i < dim; ++i) expected[static_cast<size_t>(r * dim + i)] = x[static_cast<size_t>(r * dim + i)] * inv * w[static_cast<size_t>(i)];
      }
      backend_->rms_norm(x.data(), rows, dim, w.data(), 1e-6f);
      EXPECT_LT(relative_l2_error(x.data(), expected.data(), rows * dim), kTolerance) << rows << "x" << dim;
    }
  }
  backend_->rms_norm(nullptr, 0, 8, nullptr, 1e-6f);  // an empty batch touches nothing
}

TEST_P(Conformance, LinearMatchesFloat64ForF32AndBf16WeightsWithAndWithoutBias) {
  for (auto [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 5, 7}, {9, 33, 65}, {2, 16, 300}}) {
    std::vector<float> x = random_floats(rows * k), w = random_floats(n * k), bias = random_floats(n);
    std::vector<uint16_t> w_bf16(w.size());
    std::vector<float> w_rounded(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w_bf16[i] = quant::f32_to_bf16(w[i]);
      w_rounded[i] = quant::bf16_to_f32(w_bf16[i]);
    }
    for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
      std::vector<float> y(static_cast<size_t>(rows * n));
      backend_->linear(quant::LinearWeight::from_dense(f32_view(w, {n, k})), x.data(), rows, b, y.data());
      EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w, n, k, b).data(), rows * n), kTolerance);
      backend_->linear(quant::LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {n, k}, w_bf16.data())),
                       x.data(), rows, b, y.data());
      EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w_rounded, n, k, b).data(), rows * n), kTolerance);
    }
  }
}

#if !defined(MOERT_CUDA_EMULATION)
// More than 16 rows per weight: the tiled SIMT (F32) and tensor-core (BF16, FP8 block) kernels
// (docs/cuda-backend.md, Linear kernels), at prefill sizes, on a real GPU only
// (backend_conformance_cuda_test; the emulation runs them through cuda_emulated_linear_test at
// smaller sizes). FP8 with 128 x 128 block scales against float64 over its dequantized weight.
TEST_P(Conformance, LinearOverMoreThan16RowsMatchesFloat64) {
  for (auto [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{17, 64, 128}, {64, 256, 512}, {300, 200, 1000},
                            {512, 1024, 2048}}) {
    std::vector<float> x = random_floats(rows * k), w = random_floats(n * k), bias = random_floats(n);
    std::vector<uint16_t> w_bf16(w.size());
    std::vector<float> w_rounded(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w_bf16[i] = quant::f32_to_bf16(w[i]);
      w_rounded[i] = quant::bf16_to_f32(w_bf16[i]);
    }
    std::vector<float> y(static_cast<size_t>(rows * n));
    const double tolerance = k >= 1000 ? 1e-5 : kTolerance;  // F32 sums over k products
    backend_->linear(quant::LinearWeight::from_dense(f32_view(w, {n, k})), x.data(), rows, bias.data(), y.data());
    EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w, n, k, bias.data()).data(), rows * n), tolerance)
        << rows << "x" << n << "x" << k << " f32";
    backend_->linear(quant::LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {n, k}, w_bf16.data())),
                     x.data(), rows, nullptr, y.data());
    EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w_rounded, n, k, nullptr).data(), rows * n),
              tolerance)
        << rows << "x" << n << "x" << k << " bf16";
    const quant::Fp8BlockTensor fp8 = quant::fp8_block_quantize(w.data(), n, k).value();
    quant::QuantizedWeightView view;
    view.rows = n;
    view.cols = k;
    view.format = quant::WeightFormat::kFp8Block;
    view.data = fp8.data.data();
    view.block_scale_inv = fp8.scale_inv.data();
    const quant::LinearWeight fp8_weight = quant::LinearWeight::from_packed(view);
    std::vector<float> w_fp8(w.size());
    quant::dequantize_to_f32(fp8_weight, w_fp8.data());
    backend_->linear(fp8_weight, x.data(), rows, bias.data(), y.data());
    EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w_fp8, n, k, bias.data()).data(), rows * n),
              tolerance)
        << rows << "x" << n << "x" << k << " fp8 block";
  }
}
#endif

// linears_of (the q, k, v projections of one x) gives each weight the bits linear() gives it:
// F32 and BF16 weights of different widths, with and without bias.
TEST_P(Conformance, LinearsOfOneXEqualOneLinearEach) {
  const int64_t rows = 5, k = 96;
  std::vector<float> x = random_floats(rows * k), w0 = random_floats(40 * k), w1 = random_floats(12 * k),
                           bias = random_floats(40);
  std::vector<uint16_t> w2(static_cast<size_t>(28 * k));
  for (uint16_t& v : w2) v = quant::f32_to_bf16(random_floats(1)[0]);
  const quant::LinearWeight weights[] = {quant::LinearWeight::from_dense(f32_view(w0, {40, k})),
                                         quant::LinearWeight::from_dense(f32_view(w1, {12, k})),
                                         quant::LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {28, k}, w2.data()))};
  const float* biases[] = {bias.data(), nullptr, bias.data()};
  std::vector<std::vector<float>> together(3), alone(3);
  std::vector<backend::Backend::LinearOfX> calls;
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = weights[i].out_features();
    together[i].assign(static_cast<size_t>(rows * n), -1.0f);
    alone[i].assign(static_cast<size_t>(rows * n), -2.0f);
    calls.push_back({&weights[i], biases[i], together[i].data()});
    backend_->linear(weights[i], x.data(), rows, biases[i], alone[i].data());
  }
  backend_->linears_of(x.data(), rows, calls);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(together[i].size(), alone[i].size());
    for (size_t e = 0; e < alone[i].size(); ++e) {
      ASSERT_EQ(std::bit_cast<uint32_t>(together[i][e]), std::bit_cast<uint32_t>(alone[i][e])) << "weight " << i << " at " << e;
    }
  }
}

TEST_P(Conformance, RopeRotatesChannelPairsAtEachPositionAsFloat64) {
  using attention::RopePairing;
  struct Case {
    int head_dim, rotary_dim, first_channel;
    RopePairing pairing;
  };
  // Full, partial, a rotated tail after pass-through channels (MLA's [latent | rope]).
  // Each shape under two thetas in turn on the same positions: a backend that keeps tables
  // between calls must tell the rotations apart.
  for (const Case& test : {Case{8, 8, 0, RopePairing::kRotateHalf}, Case{64, 32, 0, RopePairing::kRotateHalf},
                           Case{6, 2, 0, RopePairing::kRotateHalf}, Case{8, 8, 0, RopePairing::kInterleaved},
                           Case{40, 16, 24, RopePairing::kInterleaved}, Case{12, 4, 6, RopePairing::kRotateHalf}})
  for (const double theta : {10000.0, 1000000.0}) {
    const attention::RotaryEmbedding rope(test.head_dim, test.rotary_dim, theta, {}, test.pairing,
                                          test.first_channel);
    const int heads = 3, head_dim = test.head_dim, half = test.rotary_dim / 2;
    const std::vector<int64_t> positions{0, 1, 17, 4095, 5};
    const auto tokens = static_cast<int64_t>(positions.size());
    std::vector<float> x = random_floats(tokens * heads * head_dim);
    std::vector<double> expected(x.begin(), x.end());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>((t * heads + h) * head_dim + test.first_channel);
        for (int i = 0; i < half; ++i) {
          const double angle =
              static_cast<double>(positions[static_cast<size_t>(t)]) * std::pow(theta, -2.0 * i / test.rotary_dim);
          const bool interleaved = test.pairing == RopePairing::kInterleaved;
          const size_t first = base + static_cast<size_t>(interleaved ? 2 * i : i);
          const size_t second = base + static_cast<size_t>(interleaved ? 2 * i + 1 : i + half);
          const double a = x[first], b = x[second];
          expected[first] = a * std::cos(angle) - b * std::sin(angle);
          expected[second] = b * std::cos(angle) + a * std::sin(angle);
        }
      }
    }
    backend_->rope(rope, x.data(), tokens, heads, positions.data());
    EXPECT_LT(relative_l2_error(x.data(), expected.data(), tokens * heads * head_dim), kTolerance) << head_dim << " theta " << theta;
    backend_->rope(rope, nullptr, 0, heads, nullptr);
  }
}

// The attention variant a paged-attention case runs (attention/attention_variant.h; sinks
// drawn at random when set).
struct VariantCase {
  float softmax_scale = 0.0f;  // 0: 1/sqrt(Dh)
  float soft_cap = 0.0f;
  int sliding_window = 0;
  bool sinks = false;
};

// Ragged block tables over a shuffled pool of `dtype` storage the backend allocated: write
// K/V through slots, attend causally under `variant`, copy a block; against float64 dense
// causal attention over each sequence. With a window, the pages wholly behind every row's
// window are handed over as the null block, which holds NaN: reading one would show.
// `round_to_bf16` rounds the reference's K/V as a BF16 cache stores them. `latent`: one kv
// head whose row is key and value at once, in one aliased storage (MLA, attention/paged_kv.h).
// Returns the relative L2 error.
// The sizes of a paged-attention case: small by default (every backend, the emulation too);
// at least 4 sequences, the fourth of at least 7 positions.
struct AttentionShape {
  int block_size = 4, kv_heads = 2, heads = 6, head_dim = 8, num_blocks = 40;
  std::vector<int> kv_lens{1, 4, 5, 13};  // per sequence, positions with K/V
  std::vector<int> q_lens{1, 4, 2, 13};   // the last q_len positions are queries
};

double paged_attention_error(Backend& backend, std::mt19937& rng, DType dtype, const VariantCase& variant,
                             bool round_to_bf16, bool latent = false, const AttentionShape& sizes = {}) {
  const int block_size = sizes.block_size, kv_heads = latent ? 1 : sizes.kv_heads, heads = sizes.heads;
  const int head_dim = sizes.head_dim, num_blocks = sizes.num_blocks;
  const std::vector<int>& kv_lens = sizes.kv_lens;
  const std::vector<int>& q_lens = sizes.q_lens;
  std::normal_distribution<float> normal;
  auto random_floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  const Shape shape{num_blocks, block_size, kv_heads, head_dim};
  Buffer k_cache = backend.allocate(dtype, shape), v_cache = backend.allocate(dtype, shape);
  Buffer k_scales = backend.allocate(DType::kF32, {num_blocks, kv_heads});
  Buffer v_scales = backend.allocate(DType::kF32, {num_blocks, kv_heads});
  const Buffer& values_storage = latent ? k_cache : v_cache;
  const Buffer& value_scales = latent ? k_scales : v_scales;
  // The storage is on the backend's device: filled and read through copy_bytes.
  const int64_t block_bytes = static_cast<int64_t>(k_cache.size_bytes()) / num_blocks;
  const std::vector<unsigned char> nan_block(static_cast<size_t>(block_bytes), 0xFF);  // NaN in every dtype
  backend.copy_bytes(k_cache.view().data, nan_block.data(), block_bytes);  // the null block
  backend.copy_bytes(v_cache.view().data, nan_block.data(), block_bytes);
  attention::PagedKvLayer layer{k_cache.view().data, values_storage.view().data, num_blocks, block_size, kv_heads,
                                head_dim, dtype};
  if (dtype == DType::kF8E4M3) {
    layer.k_scales = k_scales.data<float>();
    layer.v_scales = value_scales.data<float>();
    const std::vector<float> ones(static_cast<size_t>(kv_heads), 1.0f);
    backend.copy_bytes(layer.k_scales, ones.data(), kv_heads * static_cast<int64_t>(sizeof(float)));
    backend.copy_bytes(layer.v_scales, ones.data(), kv_heads * static_cast<int64_t>(sizeof(float)));
  }
  std::vector<int32_t> free_blocks(num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);  // block 0 is the null block
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, pages, last_len;
  std::vector<std::vector<float>> seq_k, seq_v;
  size_t next_block = 0;
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    const int num_pages = (kv_lens[b] + block_size - 1) / block_size;
    std::vector<int32_t> table(free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block),
                               free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block + num_pages));
    next_block += static_cast<size_t>(num_pages);
    seq_k.push_back(random_floats(kv_lens[b] * kv_heads * head_dim));
    seq_v.push_back(random_floats(kv_lens[b] * kv_heads * head_dim));
    // Later positions grow in magnitude (up to 32 positions, then again), so FP8 block scales
    // must grow as rows arrive.
    for (int p = 0; p < kv_lens[b]; ++p) {
      for (int i = 0; i < kv_heads * head_dim; ++i) seq_v.back()[static_cast<size_t>(p * kv_heads * head_dim + i)] *= 1.0f + 0.3f * (p % 32);
    }
    if (latent) seq_k.back() = seq_v.back();
    std::vector<int64_t> slots;
    for (int p = 0; p < kv_lens[b]; ++p) slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / block_size)]) * block_size + p % block_size);
    slots.push_back(-1);  // padding is skipped
    std::vector<float> k_rows = seq_k.back(), v_rows = seq_v.back();
    k_rows.resize(k_rows.size() + static_cast<size_t>(kv_heads * head_dim), 99.0f);
    v_rows.resize(k_rows.size(), 99.0f);
    if (latent) v_rows = k_rows;  // the model hands the same row as key and value
    // Sequence 3 arrives in two writes (prefill, then the rest), as the engine writes it.
    const int64_t split = b == 3 ? 6 : 0;
    const int64_t row_floats = kv_heads * head_dim;
    if (split > 0) backend.write_kv(layer, k_rows.data(), v_rows.data(), slots.data(), split);
    backend.write_kv(layer, k_rows.data() + split * row_floats, v_rows.data() + split * row_floats, slots.data() + split,
                     static_cast<int64_t>(slots.size()) - split);
    if (variant.sliding_window > 0) {  // pages wholly behind the first row's window: null
      const int first_key = std::max(0, kv_lens[b] - q_lens[b] + 1 - variant.sliding_window);
      for (int p = 0; p < first_key / block_size; ++p) table[static_cast<size_t>(p)] = 0;
    }
    pages.insert(pages.end(), table.begin(), table.end());
    page_indptr.push_back(static_cast<int32_t>(pages.size()));
    last_len.push_back(kv_lens[b] - (num_pages - 1) * block_size);
    qo_indptr.push_back(qo_indptr.back() + q_lens[b]);
  }
  const int64_t num_rows = qo_indptr.back();
  std::vector<float> q = random_floats(num_rows * heads * head_dim);
  std::vector<float> sinks = random_floats(heads);
  std::vector<float> out(q.size(), 0.0f);
  attention::PagedAttentionPlan plan{static_cast<int>(kv_lens.size()), qo_indptr.data(), page_indptr.data(),
                                     pages.data(), last_len.data(), {}};
  plan.variant = {variant.softmax_scale, variant.soft_cap, variant.sliding_window,
                  variant.sinks ? sinks.data() : nullptr};
  backend.paged_attention(q.data(), layer, plan, heads, out.data());

  auto stored = [&](float x) { return round_to_bf16 ? quant::bf16_to_f32(quant::f32_to_bf16(x)) : x; };
  std::vector<double> expected(out.size());
  const double scale = variant.softmax_scale > 0 ? variant.softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    for (int i = 0; i < q_lens[b]; ++i) {
      const int position = kv_lens[b] - q_lens[b] + i;
      const int first = variant.sliding_window > 0 ? std::max(0, position + 1 - variant.sliding_window) : 0;
      const int64_t row = qo_indptr[b] + i;
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        const float* qh = q.data() + (row * heads + h) * head_dim;
        std::vector<double> logits;
        for (int p = first; p <= position; ++p) {
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * stored(seq_k[b][static_cast<size_t>((p * kv_heads + kvh) * head_dim + d)]);
          double logit = dot * scale;
          if (variant.soft_cap > 0) logit = variant.soft_cap * std::tanh(logit / variant.soft_cap);
          logits.push_back(logit);
        }
        double max_logit = *std::max_element(logits.begin(), logits.end());
        if (variant.sinks) max_logit = std::max<double>(max_logit, sinks[static_cast<size_t>(h)]);
        double denom = variant.sinks ? std::exp(sinks[static_cast<size_t>(h)] - max_logit) : 0.0;
        for (double& l : logits) denom += (l = std::exp(l - max_logit));
        for (int d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (int p = first; p <= position; ++p) acc += logits[static_cast<size_t>(p - first)] / denom * stored(seq_v[b][static_cast<size_t>((p * kv_heads + kvh) * head_dim + d)]);
          expected[static_cast<size_t>((row * heads + h) * head_dim + d)] = acc;
        }
      }
    }
  }
  const double error = relative_l2_error(out.data(), expected.data(), static_cast<int64_t>(out.size()));

  if (dtype == DType::kF32) {
    // The contiguous-history op (reference path) on the same sequences gives the same rows.
    for (size_t b : {size_t{2}, size_t{3}}) {
      const int64_t row = qo_indptr[b];
      const size_t width = static_cast<size_t>(heads * head_dim);
      std::vector<float> contiguous(static_cast<size_t>(q_lens[b]) * width);
      backend.contiguous_attention(q.data() + static_cast<size_t>(row) * width, q_lens[b], seq_k[b].data(),
                                   seq_v[b].data(), kv_lens[b] - q_lens[b], heads, kv_heads, head_dim,
                                   plan.variant, contiguous.data());
      EXPECT_LT(relative_l2_error(contiguous.data(), expected.data() + static_cast<size_t>(row) * width,
                                  static_cast<int64_t>(contiguous.size())),
                kTolerance)
          << "sequence " << b;
    }
  }

  // Copy-on-write: the last sequence's last block into a fresh one, bytes and scale alike.
  const int32_t src = pages.back(), dst = free_blocks.back();
  backend.copy_kv_blocks(layer, &src, &dst, 1);
  for (const Buffer* cache : {static_cast<const Buffer*>(&k_cache), &values_storage}) {
    std::vector<char> bytes(cache->size_bytes());
    backend.copy_bytes(bytes.data(), cache->view().data, static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(std::memcmp(bytes.data() + dst * block_bytes, bytes.data() + src * block_bytes,
                          static_cast<size_t>(block_bytes)),
              0);
  }
  if (dtype == DType::kF8E4M3) {
    for (const float* scales : {layer.k_scales, layer.v_scales}) {
      std::vector<float> host(static_cast<size_t>(num_blocks * kv_heads));
      backend.copy_bytes(host.data(), scales, static_cast<int64_t>(host.size() * sizeof(float)));
      for (int head = 0; head < kv_heads; ++head) {
        EXPECT_EQ(host[static_cast<size_t>(dst * kv_heads + head)], host[static_cast<size_t>(src * kv_heads + head)]);
      }
    }
  }
  return error;
}

TEST_P(Conformance, PagedAttentionOverRaggedBlockTablesMatchesDenseFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, {}, false), kTolerance);
}

// Scale, soft-cap, sliding window (null pages behind it) and sinks, alone and together.
TEST_P(Conformance, PagedAttentionVariantsMatchFloat64) {
  const std::vector<std::pair<std::string, VariantCase>> variants = {
      {"scale", {0.21f, 0.0f, 0, false}}, {"soft_cap", {0.0f, 1.5f, 0, false}},
      {"window 5", {0.0f, 0.0f, 5, false}}, {"window 1", {0.0f, 0.0f, 1, false}},
      {"sinks", {0.0f, 0.0f, 0, true}},     {"all", {0.4f, 2.0f, 6, true}},
  };
  for (const auto& [name, variant] : variants) {
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, variant, false), kTolerance) << name;
  }
}

// A BF16 cache computes exactly the float64 attention of its rounded K/V; an FP8 cache stays
// within E4M3's precision of the exact result (per-block scales that grow with the rows,
// never saturating), and does quantize (its error is not zero).
TEST_P(Conformance, PagedAttentionOverBf16AndFp8CachesMatchesFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, true), kTolerance);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {0.0f, 0.0f, 5, true}, true), kTolerance);
  EXPECT_GT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, false), 1e-4);  // the rounding shows
  const double fp8_error = paged_attention_error(*backend_, rng_, DType::kF8E4M3, {}, false);
  EXPECT_LT(fp8_error, 0.05);
  EXPECT_GT(fp8_error, 1e-3);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF8E4M3, {0.0f, 0.0f, 5, true}, false), 0.05);
}

#if !defined(MOERT_CUDA_EMULATION)
// Model shapes, on a real GPU only (backend_conformance_cuda_test; the emulation would take
// minutes over them, and the float64 reference seconds): head dims 64 and 128 under GQA and
// MLA's latent row of 576 (kv_lora_rank 512 + rope 64) over one kv head, 16-position blocks,
// contexts of 700 and 1100 positions (44 and 69 blocks, in one batch with short ones), a
// 40-row prefill chunk and decode rows; F32 and BF16 caches.
TEST_P(Conformance, PagedAttentionAtModelShapesMatchesFloat64) {
  struct Case {
    const char* name;
    int heads, kv_heads, head_dim;
    bool latent;
  };
  for (const Case& c : {Case{"gqa 16/4 x 64", 16, 4, 64, false}, Case{"gqa 32/8 x 128", 32, 8, 128, false},
                        Case{"mla 16 x 576", 16, 1, 576, true}}) {
    AttentionShape sizes;
    sizes.block_size = 16;
    sizes.heads = c.heads;
    sizes.kv_heads = c.kv_heads;
    sizes.head_dim = c.head_dim;
    sizes.num_blocks = 160;
    sizes.kv_lens = {1, 17, 700, 1100};
    sizes.q_lens = {1, 17, 1, 40};
    const VariantCase scaled{c.latent ? 0.07f : 0.0f, 0.0f, 0, false};
    const double tolerance = 1e-5;  // F32 sums over ~1000 positions and up to 576 channels
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, scaled, false, c.latent, sizes), tolerance) << c.name;
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, scaled, true, c.latent, sizes), tolerance)
        << c.name << " bf16";
  }
}
#endif

// A latent cache (MLA): one kv head whose row is key and value, stored once; its writes,
// block copies and FP8 scales go through the aliased storage.
TEST_P(Conformance, PagedAttentionOverLatentCachesMatchesFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, {0.3f, 0.0f, 0, false}, false, true), kTolerance);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, true, true), kTolerance);
  const double fp8_error = paged_attention_error(*backend_, rng_, DType::kF8E4M3, {}, false, true);
  EXPECT_LT(fp8_error, 0.05);
  EXPECT_GT(fp8_error, 1e-3);
}

TEST_P(Conformance, SwigluAndGroupedExpertFfnMatchFloat64) {
  const int64_t dim = 12, width = 20;
  const int num_experts = 5, top_k = 2;
  const RandomExperts experts(num_experts, dim, width, [&](int64_t n) { return random_floats(n, 0.3f); });
  const auto& [gates, ups, downs, gate_w, up_w, down_w] = experts;
  for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{11}}) {
    std::vector<float> x = random_floats(tokens * dim);
    std::vector<float> out(static_cast<size_t>(tokens * dim));
    backend_->swiglu_ffn(x.data(), tokens, gate_w[0], up_w[0], down_w[0], out.data());
    if (tokens > 0) {
      EXPECT_LT(relative_l2_error(out.data(), reference_swiglu(x, tokens, dim, width, gates[0], ups[0], downs[0]).data(),
                                  tokens * dim),
                kTolerance);
    }
    const auto [ids, weights] = random_two_expert_routing(rng_, tokens, num_experts, 0.7f, 0.3f);
    Result<experts::ExpertDispatchLayout> layout = experts::layout_from_routing(ids, weights, tokens, top_k, num_experts);
    ASSERT_TRUE(layout.is_ok());
    std::vector<float> contributions(static_cast<size_t>(tokens * top_k * dim));
    backend_->grouped_expert_ffn(*layout, x, static_cast<int>(dim), experts.weights(), contributions);
    for (int64_t c = 0; c < layout->num_entries(); ++c) {
      const auto e = static_cast<size_t>(layout->entry_expert[static_cast<size_t>(c)]);
      const int64_t row = layout->entry_row[static_cast<size_t>(c)];
      std::vector<float> xr(x.begin() + row * dim, x.begin() + (row + 1) * dim);
      std::vector<double> y = reference_swiglu(xr, 1, dim, width, gates[e], ups[e], downs[e]);
      for (double& v : y) v *= layout->entry_weight[static_cast<size_t>(c)];
      EXPECT_LT(relative_l2_error(contributions.data() + c * dim, y.data(), dim), kTolerance) << "entry " << c;
    }
  }
}

// The routed experts from routing in the backend's memory (a device may plan the layout
// there) against float64, and bit-identical to the same routing given as host data (the
// layout planned on the host): 1 to 16 tokens (planned on a device), 17 (on the host),
// every token on one expert (a 16-row group), unregistered and registered weights.
TEST_P(Conformance, RoutedExpertsFromDeviceRoutingMatchFloat64AndTheHostPlan) {
  const int64_t dim = 12, width = 20;
  const int num_experts = 6, top_k = 3;
  RandomExperts experts(num_experts, dim, width, [&](int64_t n) { return random_floats(n, 0.3f); });
  auto& [gates, ups, downs, gate_w, up_w, down_w] = experts;
  const std::function<Backend::ExpertWeights(int)> expert_weights = experts.weights();
  for (const bool registered : {false, true}) {
    if (registered) {
      for (int e = 0; e < num_experts; ++e) {
        for (std::vector<float>* w : {&gates[static_cast<size_t>(e)], &ups[static_cast<size_t>(e)], &downs[static_cast<size_t>(e)]}) {
          backend_->register_host_weights(w->data(), static_cast<int64_t>(w->size() * sizeof(float)));
        }
      }
    }
    for (const int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}}) {
      for (const bool one_expert_for_all : {false, true}) {
        std::vector<int32_t> ids;
        std::vector<float> weights;
        for (int64_t t = 0; t < tokens; ++t) {
          // Distinct experts per token, in no particular order.
          const int first = one_expert_for_all ? 0 : static_cast<int>(rng_() % num_experts);
          for (int k = 0; k < top_k; ++k) {
            ids.push_back((first + (k == 0 ? 0 : 1 + (k + static_cast<int>(t)) % 2 + 2 * (k - 1))) % num_experts);
            weights.push_back(0.2f + 0.3f * static_cast<float>(k) + 0.01f * static_cast<float>(t));
          }
          std::swap(ids[ids.size() - 1], ids[ids.size() - 1 - static_cast<size_t>(t % top_k)]);
        }
        const std::vector<float> x = random_floats(tokens * dim);
        const auto entries = static_cast<int64_t>(ids.size());
        Buffer device_ids = backend_->allocate(DType::kI32, {entries});
        Buffer device_weights = backend_->allocate(DType::kF32, {entries});
        Buffer device_x = backend_->allocate(DType::kF32, {tokens, dim});
        Buffer device_out = backend_->allocate(DType::kF32, {tokens, dim});
        backend_->copy_bytes(device_ids.data<int32_t>(), ids.data(), entries * 4);
        backend_->copy(device_weights.data<float>(), weights.data(), entries);
        backend_->copy(device_x.data<float>(), x.data(), tokens * dim);
        routed_experts_on(*backend_, device_x.data<float>(), tokens, static_cast<int>(dim), device_ids.data<int32_t>(),
                          device_weights.data<float>(), top_k, num_experts, expert_weights, device_out.data<float>());
        std::vector<float> out(static_cast<size_t>(tokens * dim));
        backend_->to_host(device_out.data<float>(), tokens * dim, out.data());
        std::vector<float> host_planned(out.size());
        routed_experts_on(*backend_, device_x.data<float>(), tokens, static_cast<int>(dim), ids.data(), weights.data(),
                          top_k, num_experts, expert_weights, device_out.data<float>());
        backend_->to_host(device_out.data<float>(), tokens * dim, host_planned.data());
        EXPECT_EQ(out, host_planned) << tokens << " tokens, registered " << registered;
        std::vector<double> want(out.size(), 0.0);
        for (int64_t t = 0; t < tokens; ++t) {
          const std::vector<float> row(x.begin() + t * dim, x.begin() + (t + 1) * dim);
          for (int k = 0; k < top_k; ++k) {
            const auto e = static_cast<size_t>(ids[static_cast<size_t>(t * top_k + k)]);
            const std::vector<double> y = reference_swiglu(row, 1, dim, width, gates[e], ups[e], downs[e]);
            for (int64_t i = 0; i < dim; ++i) {
              want[static_cast<size_t>(t * dim + i)] += weights[static_cast<size_t>(t * top_k + k)] * y[static_cast<size_t>(i)];
            }
          }
        }
        EXPECT_LT(relative_l2_error(out.data(), want.data(), tokens * dim), kTolerance) << tokens << " tokens";
      }
    }
  }
}

// An FP4 weight computed under `--fp4-activations fp4`: the packed checkpoint data, the view
// the backends read, and the weight's decoded floats. Not movable: the view points inside.
struct Fp4ActivationWeight {
  Fp4ActivationWeight(quant::WeightFormat format, std::vector<float> w, int64_t rows, int64_t cols) {
    values.resize(w.size());
    view.format = format;
    view.rows = rows;
    view.cols = cols;
    view.activations = quant::ActivationPrecision::kFp4;
    if (format == quant::WeightFormat::kNvfp4) {
      const quant::Nvfp4Tensor t = quant::nvfp4_quantize(w.data(), rows, cols).value();
      packed = t.packed;
      scales = t.block_scales;
      view.global_scale = t.global_scale;
      quant::nvfp4_dequantize(t, values.data());
    } else {
      const quant::Mxfp4Tensor t = quant::mxfp4_quantize(w.data(), rows, cols).value();
      packed = t.packed;
      scales = t.scales;
      quant::mxfp4_dequantize(t, values.data());
    }
    view.data = packed.data();
    view.scales = scales.data();
    weight = quant::LinearWeight::from_packed(view);
  }
  Fp4ActivationWeight(const Fp4ActivationWeight&) = delete;
  std::vector<uint8_t> packed, scales;
  std::vector<float> values;
  quant::QuantizedWeightView view;
  quant::LinearWeight weight;
};

std::vector<float> round_trip_rows(quant::WeightFormat format, std::vector<float> x, int64_t cols) {
  for (size_t r = 0; r * cols < x.size(); ++r) {
    float* row = x.data() + r * cols;
    format == quant::WeightFormat::kNvfp4 ? quant::nvfp4_round_trip_row(row, cols, row)
                                          : quant::mxfp4_round_trip_row(row, cols, row);
  }
  return x;
}

// `--fp4-activations fp4`: every product with an FP4 weight reads its input rounded per row
// to the weight's format (quant/formats/fp4.h), on every backend: a linear layer, and the
// routed experts (x before gate and up, the activated intermediate before down), planned on
// the host and (5 tokens) from routing in the backend's memory. The float64 references round
// the same float32 inputs; the intermediate is rounded from its float32 value, so a rounding
// boundary crossed between float32 and float64 would show as an error far above kTolerance.
// registered: the weights are registered host weights (a device keeps them, and its tiled block
// scales, resident across calls), else staged per call.
void check_fp4_activations(Backend& backend, const std::function<std::vector<float>(int64_t, float)>& random_floats,
                           std::mt19937& rng, bool registered) {
  const int64_t dim = 64, width = 32;
  const int num_experts = 4, top_k = 2;
  // Every weight lives (at its address) until the end: a device keeps copies of registered ones.
  std::vector<std::unique_ptr<Fp4ActivationWeight>> alive;
  for (const quant::WeightFormat format : {quant::WeightFormat::kNvfp4, quant::WeightFormat::kMxfp4}) {
    SCOPED_TRACE(quant::weight_format_name(format));
    auto register_weight = [&](const Fp4ActivationWeight& w) {
      if (!registered) return;
      backend.register_host_weights(w.packed.data(), static_cast<int64_t>(w.packed.size()));
      backend.register_host_weights(w.scales.data(), static_cast<int64_t>(w.scales.size()));
    };
    alive.push_back(std::make_unique<Fp4ActivationWeight>(format, random_floats(width * dim, 0.3f), width, dim));
    const Fp4ActivationWeight& linear = *alive.back();
    register_weight(linear);
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{20}}) {
      const std::vector<float> x = random_floats(rows * dim, 1.0f);
      std::vector<float> y(static_cast<size_t>(rows * width));
      backend.linear(linear.weight, x.data(), rows, nullptr, y.data());
      const std::vector<double> want = reference_linear(round_trip_rows(format, x, dim), rows, linear.values, width, dim, nullptr);
      EXPECT_LT(relative_l2_error(y.data(), want.data(), rows * width), kTolerance) << rows << " rows";
      const std::vector<double> unrounded = reference_linear(x, rows, linear.values, width, dim, nullptr);
      EXPECT_GT(relative_l2_error(y.data(), unrounded.data(), rows * width), 1e-3) << "the activations were not rounded";
    }
    std::vector<std::unique_ptr<Fp4ActivationWeight>> gates, ups, downs;
    for (int e = 0; e < num_experts; ++e) {
      gates.push_back(std::make_unique<Fp4ActivationWeight>(format, random_floats(width * dim, 0.3f), width, dim));
      ups.push_back(std::make_unique<Fp4ActivationWeight>(format, random_floats(width * dim, 0.3f), width, dim));
      downs.push_back(std::make_unique<Fp4ActivationWeight>(format, random_floats(dim * width, 0.3f), dim, width));
      for (const auto* w : {gates.back().get(), ups.back().get(), downs.back().get()}) register_weight(*w);
    }
    const std::function<Backend::ExpertWeights(int)> expert_weights = [&](int e) {
      const auto u = static_cast<size_t>(e);
      return Backend::ExpertWeights{&gates[u]->weight, &ups[u]->weight, &downs[u]->weight, nullptr, nullptr, nullptr, {}};
    };
    // One expert on one float32 row, as the backends round: gate and up on the rounded row,
    // the SwiGLU in float64 then float32, rounded, then down.
    auto reference_expert = [&](int e, const float* row) {
      const std::vector<float> xr = round_trip_rows(format, std::vector<float>(row, row + dim), dim);
      const auto u = static_cast<size_t>(e);
      const std::vector<double> g = reference_linear(xr, 1, gates[u]->values, width, dim, nullptr);
      const std::vector<double> up = reference_linear(xr, 1, ups[u]->values, width, dim, nullptr);
      std::vector<float> h(static_cast<size_t>(width));
      for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(g[i] / (1.0 + std::exp(-g[i])) * up[i]);
      return reference_linear(round_trip_rows(format, h, width), 1, downs[u]->values, dim, width, nullptr);
    };
    for (const int64_t tokens : {int64_t{5}, int64_t{18}}) {
      const auto [ids, weights] = random_two_expert_routing(rng, tokens, num_experts, 0.6f, 0.4f);
      const std::vector<float> x = random_floats(tokens * dim, 1.0f);
      std::vector<double> want(static_cast<size_t>(tokens * dim), 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int k = 0; k < top_k; ++k) {
          const std::vector<double> y = reference_expert(ids[static_cast<size_t>(t * top_k + k)], x.data() + t * dim);
          for (int64_t i = 0; i < dim; ++i) {
            want[static_cast<size_t>(t * dim + i)] += weights[static_cast<size_t>(t * top_k + k)] * y[static_cast<size_t>(i)];
          }
        }
      }
      Buffer device_ids = backend.allocate(DType::kI32, {tokens * top_k});
      Buffer device_weights = backend.allocate(DType::kF32, {tokens * top_k});
      Buffer device_x = backend.allocate(DType::kF32, {tokens, dim});
      Buffer device_out = backend.allocate(DType::kF32, {tokens, dim});
      backend.copy_bytes(device_ids.data<int32_t>(), ids.data(), tokens * top_k * 4);
      backend.copy(device_weights.data<float>(), weights.data(), tokens * top_k);
      backend.copy(device_x.data<float>(), x.data(), tokens * dim);
      for (const bool routing_on_device : {true, false}) {
        routed_experts_on(backend, device_x.data<float>(), tokens, static_cast<int>(dim),
                                 routing_on_device ? device_ids.data<int32_t>() : ids.data(),
                                 routing_on_device ? device_weights.data<float>() : weights.data(), top_k, num_experts,
                                 expert_weights, device_out.data<float>());
        std::vector<float> out(static_cast<size_t>(tokens * dim));
        backend.to_host(device_out.data<float>(), tokens * dim, out.data());
        EXPECT_LT(relative_l2_error(out.data(), want.data(), tokens * dim), kTolerance)
            << tokens << " tokens, routing on the device " << routing_on_device;
      }
    }
    for (auto* list : {&gates, &ups, &downs}) {
      for (auto& w : *list) alive.push_back(std::move(w));
    }
  }
}

TEST_P(Conformance, Fp4ActivationsRoundTheInputOfEveryFp4Product) {
  auto random = [this](int64_t n, float scale) { return random_floats(n, scale); };
  check_fp4_activations(*backend_, random, rng_, /*registered=*/false);
#if defined(MOERT_CUDA_EMULATION)
  if (GetParam() != "cuda_emulated") return;
  // The same on a device with block-scaled FP4 tensor cores (compute capability 10): the
  // linear layers run block_scaled_gemm (emulated: the library call's definition).
  cuda_emulation::set_compute_capability(10, 0);
  const int64_t calls_before = cuda_emulation::block_scaled_gemm_calls();
  std::unique_ptr<Backend> blackwell = make_cuda(pool_);
  check_fp4_activations(*blackwell, random, rng_, /*registered=*/false);
  check_fp4_activations(*blackwell, random, rng_, /*registered=*/true);  // scales tiled once, then reused
  blackwell.reset();
  cuda_emulation::set_compute_capability(9, 0);
  // Per pass and format: 3 linear calls; routed experts planned on the host (5 and 18 tokens;
  // the device-planned 5 keep the other kernels), each with >= 2 experts of 3 GEMMs.
  EXPECT_GE(cuda_emulation::block_scaled_gemm_calls() - calls_before, 2 * 2 * (3 + 2 * 2 * 3))
      << "the block-scaled path was not taken";
#endif
}

// Expert counts accumulate on the device, exactly.
TEST_P(Conformance, CountExpertsAccumulatesExactly) {
  const int num_experts = 7;
  std::vector<int32_t> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(static_cast<int32_t>((i * i + 3 * i) % num_experts));
  std::vector<int64_t> want(num_experts, 5);
  for (int32_t id : ids) want[static_cast<size_t>(id)] += 2;  // counted twice below
  Buffer device_ids = backend_->allocate(DType::kI32, {static_cast<int64_t>(ids.size())});
  Buffer counts = backend_->allocate(DType::kI64, {num_experts});
  backend_->copy_bytes(device_ids.data<int32_t>(), ids.data(), static_cast<int64_t>(ids.size() * 4));
  const std::vector<int64_t> start(num_experts, 5);
  backend_->copy_bytes(counts.data<int64_t>(), start.data(), num_experts * 8);
  for (int pass = 0; pass < 2; ++pass) {
    backend_->count_experts(device_ids.data<int32_t>(), static_cast<int64_t>(ids.size()), num_experts,
                            counts.data<int64_t>());
  }
  backend_->count_experts(device_ids.data<int32_t>(), 0, num_experts, counts.data<int64_t>());
  std::vector<int64_t> got(num_experts);
  backend_->copy_bytes(got.data(), counts.data<int64_t>(), num_experts * 8);
  EXPECT_EQ(got, want);
}

// Step graphs, where the backend records them: a recorded op sequence replays over what its
// device inputs hold at each replay; rope takes device positions after
// prepare_device_positions with the host positions' bits; a capture whose op needs host
// data or a synchronisation fails, naming why, and runs nothing.
TEST_P(Conformance, StepGraphsReplayOverNewInputsAndRefuseHostData) {
  const int64_t rows = 3, dim = 40;
  const std::vector<float> norm_weight = random_floats(dim);
  Buffer x = backend_->allocate(DType::kF32, {rows, dim});
  Buffer y = backend_->allocate(DType::kF32, {rows, dim});
  Buffer positions = backend_->allocate(DType::kI64, {rows});
  Buffer norm = backend_->allocate(DType::kF32, {dim});
  backend_->copy(norm.data<float>(), norm_weight.data(), dim);
  const attention::RotaryEmbedding rope(8, 8, 10000.0);
  backend_->prepare_device_positions(rope, 64);
  Result<std::unique_ptr<Backend::StepGraph>> graph = backend_->capture([&] {
    backend_->add(x.data<float>(), y.data<float>(), rows * dim);
    backend_->rms_norm(x.data<float>(), rows, dim, norm.data<float>(), 1e-6f);
    Buffer scratch = backend_->allocate(DType::kF32, {rows, dim});
    backend_->copy(scratch.data<float>(), x.data<float>(), rows * dim);
    backend_->rope(rope, scratch.data<float>(), rows, dim / 8, positions.data<int64_t>());
    backend_->copy(x.data<float>(), scratch.data<float>(), rows * dim);
  });
  if (!graph.is_ok()) {
    EXPECT_NE(std::string(backend_->name()).find("cpu"), std::string::npos) << graph.status().message();
    EXPECT_NE(graph.status().message().find("no step graphs"), std::string::npos) << graph.status().message();
    return;
  }
  for (int replay = 0; replay < 3; ++replay) {
    const std::vector<float> x0 = random_floats(rows * dim), y0 = random_floats(rows * dim);
    const std::vector<int64_t> step_positions{replay, 7 + replay, 63 - replay};
    backend_->copy(x.data<float>(), x0.data(), rows * dim);
    backend_->copy(y.data<float>(), y0.data(), rows * dim);
    backend_->copy_bytes(positions.data<int64_t>(), step_positions.data(), rows * 8);
    (*graph)->replay();
    std::vector<float> replayed(x0.size());
    backend_->to_host(x.data<float>(), rows * dim, replayed.data());
    // The same ops run eagerly, positions from the host.
    std::vector<float> eager = x0;
    backend_->add(eager.data(), y0.data(), rows * dim);
    backend_->rms_norm(eager.data(), rows, dim, norm_weight.data(), 1e-6f);
    backend_->rope(rope, eager.data(), rows, dim / 8, step_positions.data());
    EXPECT_EQ(replayed, eager) << "replay " << replay;
  }
  std::vector<float> host(static_cast<size_t>(rows * dim));
  for (const auto& [why, record] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"reads host memory", [&] { backend_->add(x.data<float>(), host.data(), rows * dim); }},
           {"host", [&] { backend_->to_host(x.data<float>(), rows * dim, host.data()); }},
           {"synchronises", [&] { backend_->synchronize(); }}}) {
    Result<std::unique_ptr<Backend::StepGraph>> refused = backend_->capture(record);
    ASSERT_FALSE(refused.is_ok()) << why;
    EXPECT_NE(refused.status().message().find(why), std::string::npos) << refused.status().message();
  }
  // Nothing of a refused capture ran, and eager ops work after it.
  std::vector<float> before(host.size()), after(host.size());
  backend_->to_host(x.data<float>(), rows * dim, before.data());
  Result<std::unique_ptr<Backend::StepGraph>> refused = backend_->capture([&] {
    backend_->add(x.data<float>(), y.data<float>(), rows * dim);
    backend_->synchronize();
  });
  ASSERT_FALSE(refused.is_ok());
  backend_->to_host(x.data<float>(), rows * dim, after.data());
  EXPECT_EQ(before, after);
}

TEST_P(Conformance, RouteSelectsTheTopKOfTheSoftmaxAndAddsAndArgmaxAreExact) {
  experts::RouterConfig config;
  config.num_experts = 9;
  config.top_k = 3;
  config.norm_topk_prob = true;
  const int64_t tokens = 7;
  std::vector<float> logits = random_floats(tokens * config.num_experts, 2.0f);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * config.top_k));
  std::vector<float> weights(ids.size());
  backend_->route(config, logits.data(), tokens, nullptr, ids.data(), weights.data());
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(config.num_experts));
    std::iota(order.begin(), order.end(), 0);
    const float* row = logits.data() + t * config.num_experts;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    double sum = 0.0;
    for (int k = 0; k < config.top_k; ++k) sum += std::exp(static_cast<double>(row[order[static_cast<size_t>(k)]]));
    std::vector<double> expected;
    for (int k = 0; k < config.top_k; ++k) {
      EXPECT_EQ(ids[static_cast<size_t>(t * config.top_k + k)], order[static_cast<size_t>(k)]) << "token " << t;
      expected.push_back(std::exp(static_cast<double>(row[order[static_cast<size_t>(k)]])) / sum);
    }
    EXPECT_LT(relative_l2_error(weights.data() + t * config.top_k, expected.data(), config.top_k), kTolerance);
  }

  std::vector<float> a = random_floats(13), b = random_floats(13);
  std::vector<double> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = static_cast<double>(static_cast<float>(a[i] + b[i]));
  backend_->add(a.data(), b.data(), 13);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], sum[i]);

  const std::vector<float> rows{0.5f, 2.0f, 2.0f, -1.0f,  // tie: the lowest id wins
                                -3.0f, -2.0f, -7.0f, -2.5f};
  std::vector<int32_t> best(2, -1);
  backend_->argmax_rows(rows.data(), 2, 4, best.data());
  EXPECT_EQ(best, (std::vector<int32_t>{1, 1}));
}

// Every routing rule against the float64 reference router (tests/support/reference_routing.h,
// written apart from experts/router.cpp): softmax with and without a
// balancing bias, DeepSeek-V3 sigmoid + correction bias + group limit with renormalisation
// and scaling, groups of one; ids exactly, weights within float rounding.
TEST_P(Conformance, RouteMatchesTheFloat64ReferenceForEveryRule) {
  struct Case {
    experts::ScoreFunc score;
    int experts, top_k, n_group, topk_group;
    bool norm, bias;
    float scale;
  };
  const std::vector<Case> cases = {{experts::ScoreFunc::kSoftmax, 8, 2, 1, 1, false, false, 1.0f},
                                   {experts::ScoreFunc::kSoftmax, 60, 4, 1, 1, true, true, 1.0f},
                                   {experts::ScoreFunc::kSigmoid, 16, 4, 4, 2, true, true, 2.5f},
                                   {experts::ScoreFunc::kSigmoid, 8, 3, 8, 4, false, true, 1.0f},
                                   {experts::ScoreFunc::kSigmoid, 12, 2, 1, 1, true, false, 1.5f}};
  for (const Case& c : cases) {
    experts::RouterConfig config;
    config.num_experts = c.experts;
    config.top_k = c.top_k;
    config.score_func = c.score;
    config.n_group = c.n_group;
    config.topk_group = c.topk_group;
    config.norm_topk_prob = c.norm;
    config.routed_scaling_factor = c.scale;
    const int64_t tokens = 21;
    std::vector<float> logits = random_floats(tokens * c.experts, 2.0f);
    for (int64_t i = 0; i < tokens * c.experts; i += 5) logits[static_cast<size_t>(i)] = 0.5f;  // ties
    const std::vector<float> bias = random_floats(c.experts, 0.1f);
    const float* bias_or_null = c.bias ? bias.data() : nullptr;
    const auto count = static_cast<size_t>(tokens * c.top_k);
    std::vector<int32_t> ids(count);
    std::vector<float> weights(count);
    backend_->route(config, logits.data(), tokens, bias_or_null, ids.data(), weights.data());
    const testing::ReferenceRoute expected = testing::reference_route(config, logits, bias_or_null);
    EXPECT_EQ(ids, expected.ids) << c.experts << " experts";
    EXPECT_LT(relative_l2_error(weights.data(), expected.weights.data(), static_cast<int64_t>(count)), 1e-6);
  }
}

// A router beyond a backend's capabilities (600 experts, 80 groups: past the CUDA router's 512
// and 64) still routes through route_on, on the host where the backend cannot: the reference's
// ids, weights within float rounding; within them route_on and route() agree exactly.
TEST_P(Conformance, RouteOnTakesRoutersBeyondTheBackendsCapabilities) {
  experts::RouterConfig config;
  config.num_experts = 640;
  config.top_k = 8;
  config.score_func = experts::ScoreFunc::kSigmoid;
  config.n_group = 80;
  config.topk_group = 4;
  config.norm_topk_prob = true;
  config.routed_scaling_factor = 2.5f;
  ASSERT_TRUE(experts::validate_router_config(config).is_ok());
  const int64_t tokens = 7;
  const std::vector<float> logits = random_floats(tokens * config.num_experts, 2.0f);
  const std::vector<float> bias = random_floats(config.num_experts, 0.1f);
  const auto count = static_cast<size_t>(tokens * config.top_k);
  std::vector<int32_t> ids(count, -1);
  std::vector<float> weights(count);
  route_on(*backend_, config, logits.data(), tokens, bias.data(), ids.data(), weights.data());
  const testing::ReferenceRoute expected = testing::reference_route(config, logits, bias.data());
  EXPECT_EQ(ids, expected.ids);
  EXPECT_LT(relative_l2_error(weights.data(), expected.weights.data(), static_cast<int64_t>(count)), 1e-6);
  const Backend::Capabilities caps = backend_->capabilities();
  config.num_experts = std::min(caps.max_router_experts, 64);
  config.n_group = 8;
  const std::vector<float> small = random_floats(tokens * config.num_experts, 2.0f);
  std::vector<int32_t> direct_ids(count), on_ids(count);
  std::vector<float> direct_weights(count), on_weights(count);
  backend_->route(config, small.data(), tokens, nullptr, direct_ids.data(), direct_weights.data());
  route_on(*backend_, config, small.data(), tokens, nullptr, on_ids.data(), on_weights.data());
  EXPECT_EQ(direct_ids, on_ids);
  EXPECT_EQ(direct_weights, on_weights);
}

// Backend draws against the float64 reference sampler (tests/support/reference_routing.h) on
// the same rows and uniforms: greedy with ties, temperature alone, top-k with tied weights at the cut, top-p,
// both, and -inf-masked tokens; a row's draw never depends on the rows beside it.
TEST_P(Conformance, SampleRowsDrawWhatTheFloat64ReferenceDraws) {
  const int64_t vocab = 300;
  std::vector<float> logits;
  std::vector<Backend::RowSampling> rows;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<Backend::RowSampling> settings = {
      {0.0f, 0, 1.0f, 0.0}, {1.0f, 0, 1.0f, 0.0}, {0.7f, 5, 1.0f, 0.0},  {1.3f, 0, 0.8f, 0.0},
      {0.9f, 7, 0.6f, 0.0}, {2.0f, 1, 1.0f, 0.0}, {1.0f, 40, 0.95f, 0.0}, {0.5f, 0, 0.3f, 0.0}};
  for (int r = 0; r < 24; ++r) {
    std::vector<float> row = random_floats(vocab, 2.0f);
    for (int64_t i = 0; i < vocab; i += 7) row[static_cast<size_t>(i)] = std::round(row[static_cast<size_t>(i)]);  // ties
    if (r % 5 == 0) row[static_cast<size_t>(r % vocab)] = -std::numeric_limits<float>::infinity();
    logits.insert(logits.end(), row.begin(), row.end());
    Backend::RowSampling setting = settings[static_cast<size_t>(r) % settings.size()];
    setting.uniform = uniform(rng_);
    rows.push_back(setting);
  }
  std::vector<int32_t> drawn(rows.size(), -1);
  backend_->sample_rows(logits.data(), vocab, rows, drawn.data());
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::vector<float> row(logits.begin() + static_cast<int64_t>(r) * vocab,
                                 logits.begin() + static_cast<int64_t>(r + 1) * vocab);
    const int32_t expected =
        testing::reference_sample(row, rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].uniform);
    EXPECT_EQ(drawn[r], expected) << "row " << r;
  }
  // One row alone draws the same as inside the batch.
  int32_t alone = -1;
  backend_->sample_rows(logits.data() + 3 * vocab, vocab, std::span(rows).subspan(3, 1), &alone);
  EXPECT_EQ(alone, drawn[3]);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendCase& c : present_backends()) names.push_back(c.name);
  return names;
}
// The data-movement and combine ops: exact (they copy, or add in a fixed order that the
// float64 reference follows within F32 rounding).
TEST_P(Conformance, CopyGatherToHostCombineAndGatedAddMatchFloat64) {
  const int64_t rows = 7, dim = 13;
  const std::vector<float> src = random_floats(rows * dim);
  Buffer device = backend_->allocate(DType::kF32, {rows, dim});
  backend_->copy(device.data<float>(), src.data(), rows * dim);
  std::vector<float> back(src.size(), -1.0f);
  backend_->to_host(device.data<float>(), rows * dim, back.data());
  EXPECT_EQ(back, src);
  const std::vector<int64_t> picked{6, 0, 3, 3};
  Buffer gathered = backend_->allocate(DType::kF32, {4, dim});
  backend_->gather_rows(device.data<float>(), dim, picked.data(), 4, gathered.data<float>());
  std::vector<float> host(static_cast<size_t>(4 * dim));
  backend_->to_host(gathered.data<float>(), 4 * dim, host.data());
  for (size_t r = 0; r < picked.size(); ++r) {
    for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(host[r * dim + i], src[static_cast<size_t>(picked[r] * dim + i)]);
  }
  backend_->gather_rows(device.data<float>(), dim, nullptr, 0, nullptr);  // empty batch

  // combine: out[t] = sum_j rows[src_rows[t * K + j]] in j order; 3 tokens, K = 2.
  const int top_k = 2;
  const std::vector<int64_t> src_rows{4, 1, 0, 6, 2, 2};
  std::vector<float> combined(static_cast<size_t>(3 * dim), 5.0f);
  backend_->combine_rows(src_rows, top_k, src, static_cast<int>(dim), combined);
  std::vector<double> expected(combined.size());
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      double acc = 0.0;
      for (int j = 0; j < top_k; ++j) acc += src[static_cast<size_t>(src_rows[static_cast<size_t>(t * top_k + j)] * dim + i)];
      expected[static_cast<size_t>(t * dim + i)] = acc;
    }
  }
  EXPECT_LT(relative_l2_error(combined.data(), expected.data(), static_cast<int64_t>(combined.size())), kTolerance);

  // gated_add: x += sigmoid(gate) * y per row, and x += y without a gate.
  const std::vector<float> y = random_floats(rows * dim), gate = random_floats(rows, 2.0f);
  for (const bool gated : {true, false}) {
    std::vector<float> x = random_floats(rows * dim);
    std::vector<double> want(x.size());
    for (int64_t t = 0; t < rows; ++t) {
      const double g = gated ? 1.0 / (1.0 + std::exp(-static_cast<double>(gate[static_cast<size_t>(t)]))) : 1.0;
      for (int64_t i = 0; i < dim; ++i) want[static_cast<size_t>(t * dim + i)] = x[static_cast<size_t>(t * dim + i)] + g * y[static_cast<size_t>(t * dim + i)];
    }
    backend_->gated_add(x.data(), y.data(), gated ? gate.data() : nullptr, rows, dim);
    EXPECT_LT(relative_l2_error(x.data(), want.data(), static_cast<int64_t>(x.size())), kTolerance) << gated;
  }
}

// Strided copies and per-head matrices (MLA's absorbed projections): heads read from and
// written into wider head slots, the channels outside them untouched.
TEST_P(Conformance, CopyRowsAndPerHeadLinearMatchFloat64) {
  const int64_t rows = 5, src_stride = 11, dst_stride = 9, width = 6;
  const std::vector<float> src = random_floats(rows * src_stride);
  Buffer src_device = backend_->allocate(DType::kF32, {rows, src_stride});
  Buffer dst_device = backend_->allocate(DType::kF32, {rows, dst_stride});
  backend_->copy(src_device.data<float>(), src.data(), rows * src_stride);
  const std::vector<float> before = random_floats(rows * dst_stride);
  backend_->copy(dst_device.data<float>(), before.data(), rows * dst_stride);
  backend_->copy_rows(dst_device.data<float>() + 2, dst_stride, src_device.data<float>() + 3, src_stride, rows, width);
  std::vector<float> dst(before.size());
  backend_->to_host(dst_device.data<float>(), rows * dst_stride, dst.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dst_stride; ++i) {
      const bool copied = i >= 2 && i < 2 + width;
      ASSERT_EQ(dst[static_cast<size_t>(r * dst_stride + i)],
                copied ? src[static_cast<size_t>(r * src_stride + 3 + i - 2)] : before[static_cast<size_t>(r * dst_stride + i)]);
    }
  }
  backend_->copy_rows(nullptr, dst_stride, nullptr, src_stride, 0, width);  // empty

  for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{19}}) {
    const int heads = 3;
    const int64_t out = 13, in = 37, x_stride = 41, y_stride = 15;
    const std::vector<float> w = random_floats(heads * out * in), x = random_floats(tokens * heads * x_stride);
    const std::vector<float> y_before = random_floats(tokens * heads * y_stride);
    Buffer w_device = backend_->allocate(DType::kF32, {heads, out, in});
    Buffer x_device = backend_->allocate(DType::kF32, {tokens, heads, x_stride});
    Buffer y_device = backend_->allocate(DType::kF32, {tokens, heads, y_stride});
    backend_->copy(w_device.data<float>(), w.data(), heads * out * in);
    backend_->copy(x_device.data<float>(), x.data(), tokens * heads * x_stride);
    backend_->copy(y_device.data<float>(), y_before.data(), tokens * heads * y_stride);
    backend_->per_head_linear(w_device.data<float>(), heads, out, in, x_device.data<float>(), x_stride, tokens,
                              y_device.data<float>(), y_stride);
    std::vector<float> y(y_before.size());
    backend_->to_host(y_device.data<float>(), tokens * heads * y_stride, y.data());
    std::vector<float> got;
    std::vector<double> want;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const size_t y_head = static_cast<size_t>((t * heads + h) * y_stride);
        for (int64_t o = 0; o < out; ++o) {
          double acc = 0.0;
          for (int64_t i = 0; i < in; ++i) {
            acc += static_cast<double>(w[static_cast<size_t>((h * out + o) * in + i)]) *
                   x[static_cast<size_t>((t * heads + h) * x_stride + i)];
          }
          got.push_back(y[y_head + static_cast<size_t>(o)]);
          want.push_back(acc);
        }
        for (int64_t o = out; o < y_stride; ++o) ASSERT_EQ(y[y_head + static_cast<size_t>(o)], y_before[y_head + static_cast<size_t>(o)]);
      }
    }
    EXPECT_LT(relative_l2_error(got.data(), want.data(), static_cast<int64_t>(got.size())), kTolerance) << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backend_names()));

}  // namespace
}  // namespace moert::backend
