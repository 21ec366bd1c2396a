// What the backend conformance files share (conformance_test.cpp and conformance_*_test.cpp
// beside it): the backends present in this binary, the Conformance fixture (one backend per
// parameter; conformance_test.cpp instantiates it), the float64 references of a linear and a
// SwiGLU MLP, random routings and random routed experts.
#pragma once

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

namespace moert::backend::conformance {

using moert::testing::relative_l2_error;

inline constexpr double kTolerance = 2e-6;  // relative L2 error of F32 ops against float64

// The backends built into this binary that can run here.
struct BackendCase {
  std::string name;
  std::function<std::unique_ptr<Backend>(ThreadPool&)> make;
};
// This binary links the CUDA backend emulated on the CPU (core/cuda/emulation): it runs
// beside the CPU backend here. The `cuda` build of this file links the real one instead and
// skips without a GPU (tests/support/cuda_test_main.cpp).
inline std::unique_ptr<Backend> make_cuda(ThreadPool&) {
  Result<std::unique_ptr<Backend>> backend = MOERT_CUDA_NS::make_cuda_backend(0);
  MOERT_CHECK(backend.is_ok(), "" << backend.status().message());
  return std::move(*backend);
}
inline std::vector<BackendCase> present_backends() {
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
inline std::vector<double> reference_linear(const std::vector<float>& x, int64_t rows, const std::vector<float>& w,
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

inline std::vector<double> reference_swiglu(const std::vector<float>& x, int64_t rows, int64_t dim, int64_t width,
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
inline TwoExpertRouting random_two_expert_routing(std::mt19937& rng, int64_t tokens, int num_experts, float first,
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

inline TensorView f32_view(std::vector<float>& v, Shape shape) { return TensorView::contiguous(DType::kF32, std::move(shape), v.data()); }

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

}  // namespace moert::backend::conformance
