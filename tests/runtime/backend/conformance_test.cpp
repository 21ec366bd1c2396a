// Backend conformance harness (in the manner of ggml's test-backend-ops): every op of the
// Backend table, on every backend compiled in (the CUDA one also emulated on the CPU), against a
// simple float64 reference on random shapes (odd sizes, one row, empty batches). Floats
// are compared by relative L2 error against the float64 result, never on all-zero data;
// integer outputs (ids, copies) exactly.
// This file: embedding, RMS norm, linears, RoPE, step graphs and the data-movement ops; beside
// it: paged attention (conformance_attention_test.cpp), the expert FFNs and FP4 activations
// (conformance_experts_test.cpp), routing and sampling (conformance_routing_test.cpp).
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"
#include "tests/support/death_test.h"

namespace moert::backend::conformance {
namespace {

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
        backend_->embedding_gather(f32_view(table, {vocab, dim}), tokens, num_tokens, out);
        std::vector<float> out_bf16(out.size());
        backend_->embedding_gather(TensorView::contiguous(DType::kBF16, {vocab, dim}, bf16.data()), tokens,
                                   num_tokens, out_bf16);
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
      backend_->rms_norm(x, rows, dim, w.data(), 1e-6f);
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
      backend_->linear(quant::LinearWeight::from_dense(f32_view(w, {n, k})), x, rows, b, y);
      EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w, n, k, b).data(), rows * n), kTolerance);
      backend_->linear(quant::LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {n, k}, w_bf16.data())),
                       x, rows, b, y);
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
    backend_->linear(quant::LinearWeight::from_dense(f32_view(w, {n, k})), x, rows, bias.data(), y);
    EXPECT_LT(relative_l2_error(y.data(), reference_linear(x, rows, w, n, k, bias.data()).data(), rows * n), tolerance)
        << rows << "x" << n << "x" << k << " f32";
    backend_->linear(quant::LinearWeight::from_dense(TensorView::contiguous(DType::kBF16, {n, k}, w_bf16.data())),
                     x, rows, nullptr, y);
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
    backend_->linear(fp8_weight, x, rows, bias.data(), y);
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
    calls.push_back({&weights[i], biases[i], together[i]});
    backend_->linear(weights[i], x, rows, biases[i], alone[i]);
  }
  backend_->linears_of(x, rows, calls);
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
    backend_->rope(rope, x, tokens, heads, positions);
    EXPECT_LT(relative_l2_error(x.data(), expected.data(), tokens * heads * head_dim), kTolerance) << head_dim << " theta " << theta;
    backend_->rope(rope, nullptr, 0, heads, nullptr);
  }
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
  // A weight: placed on the backend's device before the capture (as prepare_weights does).
  backend_->place_host_weights(norm_weight.data(), dim * static_cast<int64_t>(sizeof(float)));
  const attention::RotaryEmbedding rope(8, 8, 10000.0);
  backend_->prepare_device_positions(rope, 64);
  Result<std::unique_ptr<Backend::StepGraph>> graph = backend_->capture([&] {
    backend_->add(x.ptr<float>(), y.ptr<float>(), rows * dim);
    backend_->rms_norm(x.ptr<float>(), rows, dim, norm_weight.data(), 1e-6f);
    Buffer scratch = backend_->allocate(DType::kF32, {rows, dim});
    backend_->copy(scratch.ptr<float>(), x.ptr<float>(), rows * dim);
    backend_->rope(rope, scratch.ptr<float>(), rows, dim / 8, positions.ptr<int64_t>());
    backend_->copy(x.ptr<float>(), scratch.ptr<float>(), rows * dim);
  });
  if (!graph.is_ok()) {
    EXPECT_NE(std::string(backend_->name()).find("cpu"), std::string::npos) << graph.status().message();
    EXPECT_NE(graph.status().message().find("no step graphs"), std::string::npos) << graph.status().message();
    return;
  }
  for (int replay = 0; replay < 3; ++replay) {
    const std::vector<float> x0 = random_floats(rows * dim), y0 = random_floats(rows * dim);
    const std::vector<int64_t> step_positions{replay, 7 + replay, 63 - replay};
    backend_->copy(x.ptr<float>(), x0, rows * dim);
    backend_->copy(y.ptr<float>(), y0, rows * dim);
    backend_->copy_bytes(positions.ptr<int64_t>(), step_positions, rows * 8);
    (*graph)->replay();
    std::vector<float> replayed(x0.size());
    backend_->to_host(x.ptr<float>(), rows * dim, replayed.data());
    // The same ops run eagerly, positions from the host.
    std::vector<float> eager = x0;
    backend_->add(eager, y0, rows * dim);
    backend_->rms_norm(eager, rows, dim, norm_weight.data(), 1e-6f);
    backend_->rope(rope, eager, rows, dim / 8, step_positions);
    EXPECT_EQ(replayed, eager) << "replay " << replay;
  }
  std::vector<float> host(static_cast<size_t>(rows * dim));
  for (const auto& [why, record] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"reads host memory", [&] { backend_->add(x.ptr<float>(), host, rows * dim); }},
           {"host", [&] { backend_->to_host(x.ptr<float>(), rows * dim, host.data()); }},
           {"synchronises", [&] { backend_->synchronize(); }}}) {
    Result<std::unique_ptr<Backend::StepGraph>> refused = backend_->capture(record);
    ASSERT_FALSE(refused.is_ok()) << why;
    EXPECT_NE(refused.status().message().find(why), std::string::npos) << refused.status().message();
  }
  // Nothing of a refused capture ran, and eager ops work after it.
  std::vector<float> before(host.size()), after(host.size());
  backend_->to_host(x.ptr<float>(), rows * dim, before.data());
  Result<std::unique_ptr<Backend::StepGraph>> refused = backend_->capture([&] {
    backend_->add(x.ptr<float>(), y.ptr<float>(), rows * dim);
    backend_->synchronize();
  });
  ASSERT_FALSE(refused.is_ok());
  backend_->to_host(x.ptr<float>(), rows * dim, after.data());
  EXPECT_EQ(before, after);
}

// The data-movement and combine ops: exact (they copy, or add in a fixed order that the
// float64 reference follows within F32 rounding).
// Arrays name their device (core/device.h); a backend refuses memory of a device it is not,
// naming the argument, instead of computing over it (or asking the driver what it is).
TEST_P(Conformance, RefusesArraysOfAnotherDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend's thread pool is running
  std::vector<float> x(4, 1.0f), y(4, 2.0f);
  const DevicePtr<float> elsewhere(x.data(), Device{DeviceKind::kCuda, 99});
  MOERT_EXPECT_DEATH(backend_->add(elsewhere, y, 4), "is memory of cuda:99, expected");
  MOERT_EXPECT_DEATH(backend_->copy_bytes(y, DevicePtr<const float>(elsewhere), 16), "is memory of cuda:99, expected");
  // Host arrays are every backend's to take (a device stages them): the sum is exact.
  backend_->add(x, y, 4);
  EXPECT_EQ(x, std::vector<float>(4, 3.0f));
}

TEST_P(Conformance, CopyGatherToHostCombineAndGatedAddMatchFloat64) {
  const int64_t rows = 7, dim = 13;
  const std::vector<float> src = random_floats(rows * dim);
  Buffer device = backend_->allocate(DType::kF32, {rows, dim});
  backend_->copy(device.ptr<float>(), src, rows * dim);
  std::vector<float> back(src.size(), -1.0f);
  backend_->to_host(device.ptr<float>(), rows * dim, back.data());
  EXPECT_EQ(back, src);
  const std::vector<int64_t> picked{6, 0, 3, 3};
  Buffer gathered = backend_->allocate(DType::kF32, {4, dim});
  backend_->gather_rows(device.ptr<float>(), dim, picked.data(), 4, gathered.ptr<float>());
  std::vector<float> host(static_cast<size_t>(4 * dim));
  backend_->to_host(gathered.ptr<float>(), 4 * dim, host.data());
  for (size_t r = 0; r < picked.size(); ++r) {
    for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(host[r * dim + i], src[static_cast<size_t>(picked[r] * dim + i)]);
  }
  backend_->gather_rows(device.ptr<float>(), dim, nullptr, 0, nullptr);  // empty batch

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
    backend_->gated_add(x, y, gated ? DevicePtr<const float>(gate) : nullptr, rows, dim);
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
  backend_->copy(src_device.ptr<float>(), src, rows * src_stride);
  const std::vector<float> before = random_floats(rows * dst_stride);
  backend_->copy(dst_device.ptr<float>(), before, rows * dst_stride);
  backend_->copy_rows(dst_device.ptr<float>() + 2, dst_stride, src_device.ptr<float>() + 3, src_stride, rows, width);
  std::vector<float> dst(before.size());
  backend_->to_host(dst_device.ptr<float>(), rows * dst_stride, dst.data());
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
    backend_->copy(w_device.ptr<float>(), w, heads * out * in);
    backend_->copy(x_device.ptr<float>(), x, tokens * heads * x_stride);
    backend_->copy(y_device.ptr<float>(), y_before, tokens * heads * y_stride);
    backend_->per_head_linear(w_device.data<float>(), heads, out, in, x_device.ptr<float>(), x_stride, tokens,
                              y_device.ptr<float>(), y_stride);
    std::vector<float> y(y_before.size());
    backend_->to_host(y_device.ptr<float>(), tokens * heads * y_stride, y.data());
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

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendCase& c : present_backends()) names.push_back(c.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backend_names()));

}  // namespace
}  // namespace moert::backend::conformance
