// RoPE and the dense causal attention against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "attention/cpu/dense_attention.h"
#include "attention/rope.h"

namespace moert::attention {
namespace {

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(Rope, RotateHalfWithPartialRotary) {
  for (auto [head_dim, rotary_dim] : {std::pair{64, 64}, {64, 32}, {16, 8}}) {
    RotaryEmbedding rope(head_dim, rotary_dim, 10000.0);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    const int heads = 3;
    for (int64_t position : {0, 1, 17, 4095}) {
      std::vector<float> x(static_cast<size_t>(heads * head_dim));
      for (float& v : x) v = normal(rng);
      std::vector<double> expected(x.begin(), x.end());
      const int half = rotary_dim / 2;
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < half; ++i) {
          const double angle = position * std::pow(10000.0, -2.0 * i / rotary_dim);
          const double x1 = x[h * head_dim + i], x2 = x[h * head_dim + i + half];
          expected[h * head_dim + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          expected[h * head_dim + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
      rope.apply(x.data(), heads, position);
      EXPECT_LT(rel_error(x, expected), 1e-6) << head_dim << "/" << rotary_dim << " pos " << position;
      // Channels past rotary_dim pass through untouched.
      for (int h = 0; h < heads; ++h) {
        for (int i = rotary_dim; i < head_dim; ++i) EXPECT_EQ(x[h * head_dim + i], static_cast<float>(expected[h * head_dim + i]));
      }
    }
  }
}

TEST(DenseAttention, GqaMatchesFloat64Reference) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (auto [heads, kv_heads, head_dim, length] : {std::tuple{4, 2, 64, 1}, {4, 2, 64, 37}, {8, 1, 16, 100}, {2, 2, 32, 5}}) {
    std::vector<float> q(static_cast<size_t>(heads * head_dim));
    std::vector<float> keys(static_cast<size_t>(length * kv_heads * head_dim)), values(keys.size());
    for (float& v : q) v = normal(rng) * 2.0f;
    for (float& v : keys) v = normal(rng);
    for (float& v : values) v = normal(rng);
    std::vector<float> out(q.size());
    causal_attention_one_token(q.data(), keys.data(), values.data(), length - 1, heads, kv_heads, head_dim, out.data());
    std::vector<double> expected(q.size(), 0.0);
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads);
      std::vector<double> scores(static_cast<size_t>(length));
      double max_score = -1e300, total = 0;
      for (int j = 0; j < length; ++j) {
        double s = 0;
        for (int d = 0; d < head_dim; ++d) s += static_cast<double>(q[h * head_dim + d]) * keys[(j * kv_heads + kvh) * head_dim + d];
        scores[j] = s / std::sqrt(static_cast<double>(head_dim));
        max_score = std::max(max_score, scores[j]);
      }
      for (double& s : scores) total += (s = std::exp(s - max_score));
      for (int j = 0; j < length; ++j) {
        for (int d = 0; d < head_dim; ++d) expected[h * head_dim + d] += scores[j] / total * values[(j * kv_heads + kvh) * head_dim + d];
      }
    }
    EXPECT_LT(rel_error(out, expected), 1e-5) << heads << "/" << kv_heads << " L=" << length;
  }
}

}  // namespace
}  // namespace moert::attention
