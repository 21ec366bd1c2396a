// A float64 reference of the Gated DeltaNet token mixer (docs/gated-deltanet.md), written from
// the layer's definition with no code shared with the kernels: the whole sequence from a zero
// state, every token's state recomputed in float64. Used by the kernel test
// (tests/attention/gated_delta_net_test.cpp) and the backend conformance test.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention/cpu/gated_delta_net.h"

namespace moert::testing {

using attention::GatedDeltaShape;

struct Case {
  GatedDeltaShape shape;
  int64_t num_tokens;
};

// The shapes a reference case should have (docs/gated-deltanet.md): R >= 2, DK != DV, W = 4;
// plus R = 1 and a narrow conv.
inline std::vector<Case> cases() {
  return {{{2, 32, 4, 24, 4}, 37}, {{1, 16, 1, 16, 2}, 20}, {{2, 8, 8, 12, 4}, 9}, {{4, 64, 8, 32, 4}, 5}};
}

struct Inputs {
  std::vector<float> u, conv_weight, a, b, a_log, dt_bias, z, norm_weight;
};

inline Inputs random_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int64_t channels = c.shape.conv_channels();
  const int nv = c.shape.num_value_heads;
  Inputs in;
  auto fill = [&](std::vector<float>& v, int64_t n, float scale, float offset = 0.0f) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = offset + scale * normal(rng);
  };
  fill(in.u, c.num_tokens * channels, 1.0f);
  fill(in.conv_weight, channels * c.shape.conv_width, 0.5f);
  fill(in.a, c.num_tokens * nv, 1.0f);
  fill(in.b, c.num_tokens * nv, 1.0f);
  fill(in.a_log, nv, 0.5f, -1.0f);
  fill(in.dt_bias, nv, 0.5f);
  fill(in.z, c.num_tokens * nv * c.shape.value_head_dim, 1.0f);
  fill(in.norm_weight, c.shape.value_head_dim, 0.2f, 1.0f);
  // One gate input far past softplus's threshold, one far below it.
  in.a[0] = 30.0f;
  if (in.a.size() > 1) in.a[1] = -30.0f;
  return in;
}

// The mixer's output before the output projection, [T, NV, DV], in float64.
inline std::vector<double> reference_mixer(const Case& c, const Inputs& in, double eps) {
  const GatedDeltaShape& s = c.shape;
  const int64_t channels = s.conv_channels(), T = c.num_tokens;
  const int nk = s.num_key_heads, dk = s.key_head_dim, nv = s.num_value_heads, dv = s.value_head_dim;
  const int W = s.conv_width;
  auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  // Convolution with zero history.
  std::vector<double> conv(static_cast<size_t>(T * channels));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t ch = 0; ch < channels; ++ch) {
      double sum = 0.0;
      for (int j = 0; j < W; ++j) {
        const int64_t src = t - (W - 1) + j;
        if (src >= 0) sum += static_cast<double>(in.conv_weight[ch * W + j]) * in.u[src * channels + ch];
      }
      conv[t * channels + ch] = silu(sum);
    }
  }
  std::vector<double> state(static_cast<size_t>(nv * dk * dv), 0.0), out(static_cast<size_t>(T * nv * dv));
  for (int64_t t = 0; t < T; ++t) {
    const double* row = conv.data() + t * channels;
    for (int j = 0; j < nv; ++j) {
      const int i = j / (nv / nk);
      std::vector<double> q(row + i * dk, row + (i + 1) * dk), k(row + (nk + i) * dk, row + (nk + i + 1) * dk);
      const double* v = row + 2 * nk * dk + j * dv;
      double qq = 0, kk = 0;
      for (int d = 0; d < dk; ++d) qq += q[d] * q[d], kk += k[d] * k[d];
      for (int d = 0; d < dk; ++d) q[d] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(dk)), k[d] /= std::sqrt(kk + 1e-6);
      const double x = static_cast<double>(in.a[t * nv + j]) + in.dt_bias[j];
      const double g = -std::exp(static_cast<double>(in.a_log[j])) * (x > 20.0 ? x : std::log1p(std::exp(x)));
      const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(in.b[t * nv + j])));
      double* S = state.data() + j * dk * dv;
      for (int n = 0; n < dk * dv; ++n) S[n] *= std::exp(g);
      for (int e = 0; e < dv; ++e) {
        double predicted = 0;
        for (int d = 0; d < dk; ++d) predicted += S[d * dv + e] * k[d];
        for (int d = 0; d < dk; ++d) S[d * dv + e] += k[d] * beta * (v[e] - predicted);
      }
      double* o = out.data() + (t * nv + j) * dv;
      double mean_sq = 0;
      for (int e = 0; e < dv; ++e) {
        o[e] = 0;
        for (int d = 0; d < dk; ++d) o[e] += S[d * dv + e] * q[d];
        mean_sq += o[e] * o[e] / dv;
      }
      const float* z = in.z.data() + (t * nv + j) * dv;
      for (int e = 0; e < dv; ++e) o[e] = o[e] / std::sqrt(mean_sq + eps) * in.norm_weight[e] * silu(z[e]);
    }
  }
  return out;
}

}  // namespace moert::testing
