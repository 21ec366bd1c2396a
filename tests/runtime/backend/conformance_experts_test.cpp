// Backend conformance (conformance_test.cpp): the SwiGLU and grouped expert FFNs, routed
// experts from device routing, FP4-rounded activations and expert counts, against float64.
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"

namespace moert::backend::conformance {
namespace {

TEST_P(Conformance, SwigluAndGroupedExpertFfnMatchFloat64) {
  const int64_t dim = 12, width = 20;
  const int num_experts = 5, top_k = 2;
  const RandomExperts experts(num_experts, dim, width, [&](int64_t n) { return random_floats(n, 0.3f); });
  const auto& [gates, ups, downs, gate_w, up_w, down_w] = experts;
  for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{11}}) {
    std::vector<float> x = random_floats(tokens * dim);
    std::vector<float> out(static_cast<size_t>(tokens * dim));
    backend_->swiglu_ffn(x, tokens, gate_w[0], up_w[0], down_w[0], out);
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
          backend_->place_host_weights(w->data(), static_cast<int64_t>(w->size() * sizeof(float)));
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
        backend_->copy_bytes(device_ids.ptr<int32_t>(), ids, entries * 4);
        backend_->copy(device_weights.ptr<float>(), weights, entries);
        backend_->copy(device_x.ptr<float>(), x, tokens * dim);
        routed_experts_on(*backend_, device_x.ptr<float>(), tokens, static_cast<int>(dim), device_ids.ptr<int32_t>(),
                          device_weights.ptr<float>(), top_k, num_experts, expert_weights, device_out.ptr<float>());
        std::vector<float> out(static_cast<size_t>(tokens * dim));
        backend_->to_host(device_out.ptr<float>(), tokens * dim, out.data());
        std::vector<float> host_planned(out.size());
        routed_experts_on(*backend_, device_x.ptr<float>(), tokens, static_cast<int>(dim), ids, weights,
                          top_k, num_experts, expert_weights, device_out.ptr<float>());
        backend_->to_host(device_out.ptr<float>(), tokens * dim, host_planned.data());
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
      backend.place_host_weights(w.packed.data(), static_cast<int64_t>(w.packed.size()));
      backend.place_host_weights(w.scales.data(), static_cast<int64_t>(w.scales.size()));
    };
    alive.push_back(std::make_unique<Fp4ActivationWeight>(format, random_floats(width * dim, 0.3f), width, dim));
    const Fp4ActivationWeight& linear = *alive.back();
    register_weight(linear);
    for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{20}}) {
      const std::vector<float> x = random_floats(rows * dim, 1.0f);
      std::vector<float> y(static_cast<size_t>(rows * width));
      backend.linear(linear.weight, x, rows, nullptr, y);
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
      backend.copy_bytes(device_ids.ptr<int32_t>(), ids, tokens * top_k * 4);
      backend.copy(device_weights.ptr<float>(), weights, tokens * top_k);
      backend.copy(device_x.ptr<float>(), x, tokens * dim);
      for (const bool routing_on_device : {true, false}) {
        routed_experts_on(backend, device_x.ptr<float>(), tokens, static_cast<int>(dim),
                                 routing_on_device ? DevicePtr<const int32_t>(device_ids.ptr<int32_t>())
                                                   : DevicePtr<const int32_t>(ids),
                                 routing_on_device ? DevicePtr<const float>(device_weights.ptr<float>())
                                                   : DevicePtr<const float>(weights),
                                 top_k,
                                 num_experts,
                                 expert_weights, device_out.ptr<float>());
        std::vector<float> out(static_cast<size_t>(tokens * dim));
        backend.to_host(device_out.ptr<float>(), tokens * dim, out.data());
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
  backend_->copy_bytes(device_ids.ptr<int32_t>(), ids, static_cast<int64_t>(ids.size() * 4));
  const std::vector<int64_t> start(num_experts, 5);
  backend_->copy_bytes(counts.ptr<int64_t>(), start, num_experts * 8);
  for (int pass = 0; pass < 2; ++pass) {
    backend_->count_experts(device_ids.ptr<int32_t>(), static_cast<int64_t>(ids.size()), num_experts,
                            counts.ptr<int64_t>());
  }
  backend_->count_experts(device_ids.ptr<int32_t>(), 0, num_experts, counts.ptr<int64_t>());
  std::vector<int64_t> got(num_experts);
  backend_->copy_bytes(got, counts.ptr<int64_t>(), num_experts * 8);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace moert::backend::conformance
