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

namespace moert::attention {
namespace {

// YaRN frequencies and attention factor against float64 values worked out from the
// published formulas (docs/rope.md): a gpt-oss-like config (truncate false) and a
// DeepSeek-V3-like one (truncate true, mscale = mscale_all_dim).
TEST(Yarn, FrequenciesAndAttentionFactorMatchTheFormulas) {
  RopeScaling oss;
  oss.kind = RopeScaling::Kind::kYarn;
  oss.factor = 32.0;
  oss.original_max_positions = 256.0;
  oss.truncate = false;
  const RopeTables a = rope_tables(64, 150000.0, oss);
  const double expected_oss[] = {1.0, 0.66383539754, 0.40798341532, 0.24706016391, 0.14676759378};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(a.inv_freq[static_cast<size_t>(j)] / expected_oss[j], 1.0, 1e-10) << j;
  EXPECT_NEAR(a.inv_freq[31] / 3.0235114281e-7, 1.0, 1e-9);
  EXPECT_NEAR(a.attention_factor, 1.3465735903, 1e-9);
  // truncate = true moves the ramp: the same config gives other frequencies.
  RopeScaling truncated = oss;
  truncated.truncate = true;
  EXPECT_GT(std::fabs(rope_tables(64, 150000.0, truncated).inv_freq[1] - a.inv_freq[1]), 1e-3);

  RopeScaling ds;
  ds.kind = RopeScaling::Kind::kYarn;
  ds.factor = 4.0;
  ds.original_max_positions = 256.0;
  ds.mscale = ds.mscale_all_dim = 1.0;
  const RopeTables b = rope_tables(16, 10000.0, ds);
  const double expected_ds[] = {1, 0.25693505989, 0.0625, 0.013834964763, 0.0025, 7.9056941504e-4, 2.5e-4,
                                7.9056941504e-5};
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(b.inv_freq[static_cast<size_t>(j)] / expected_ds[j], 1.0, 1e-10) << j;
  EXPECT_DOUBLE_EQ(b.attention_factor, 1.0);

  // The factor multiplies cos and sin: a rotated vector's norm grows by a.
  RotaryEmbedding rope(64, 64, 150000.0, oss);
  std::vector<float> head(64);
  for (int i = 0; i < 64; ++i) head[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  double before = 0, after = 0;
  for (float v : head) before += static_cast<double>(v) * v;
  rope.apply(head.data(), 1, 37);
  for (float v : head) after += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(after / before), 1.3465735903, 1e-5);
}

}  // namespace
}  // namespace moert::attention
