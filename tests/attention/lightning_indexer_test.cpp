// The lightning indexer's scoring, selection and key LayerNorm against float64 references
// (docs/sparse-attention.md): scores with negative head weights and ReLU zeros, selections with
// exact ties (broken toward the lower position), and every L up to and past top_k.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attention/cpu/lightning_indexer.h"

namespace moert::attention {
namespace {

std::vector<float> normal_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(LightningIndexer, ScoresMatchFloat64Reference) {
  int relu_zeros = 0;
  for (auto [heads, dim, keys] : {std::tuple{8, 32, 40}, {1, 16, 1}, {32, 128, 70}}) {
    const std::vector<float> q = normal_values(static_cast<size_t>(heads * dim), 1);
    std::vector<float> w = normal_values(static_cast<size_t>(heads), 2);  // some negative
    const std::vector<float> k = normal_values(static_cast<size_t>(keys * dim), 3);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
    std::vector<float> got(static_cast<size_t>(keys));
    lightning_index_scores(q.data(), w.data(), heads, dim, k.data(), keys, scale, got.data());
    double diff = 0, norm = 0;
    for (int t = 0; t < keys; ++t) {
      double want = 0;
      for (int h = 0; h < heads; ++h) {
        double dot = 0;
        for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[h * dim + d]) * k[t * dim + d];
        relu_zeros += dot <= 0;
        want += w[h] * std::max(dot * scale, 0.0);
      }
      diff += (got[t] - want) * (got[t] - want);
      norm += want * want;
    }
    ASSERT_GT(norm, 0.0);
    EXPECT_LT(std::sqrt(diff / norm), 1e-6) << heads << " x " << dim << ", " << keys << " keys";
  }
  EXPECT_GT(relu_zeros, 0) << "the cases must exercise the ReLU";
}

// The selection by brute force: sort every position by (score desc, position asc).
std::vector<int32_t> brute_force_top(const std::vector<float>& scores, int top_k) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  order.resize(std::min(order.size(), static_cast<size_t>(top_k)));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(LightningIndexer, SelectionKeepsTheBestAndBreaksTiesTowardTheLowerPosition) {
  // Scores quantised to a few values: many exact ties (ReLU zeros look like this).
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(0, 3);
  for (int64_t keys : {1, 3, 8, 9, 40, 200}) {
    std::vector<float> scores(static_cast<size_t>(keys));
    for (float& s : scores) s = 0.5f * static_cast<float>(level(rng));
    for (int top_k : {1, 4, 8, 64}) {
      EXPECT_EQ(select_top_keys(scores.data(), keys, top_k), brute_force_top(scores, top_k))
          << keys << " keys, top " << top_k;
    }
  }
  const std::vector<float> tied = {1.0f, 2.0f, 1.0f, 2.0f, 1.0f};
  EXPECT_EQ(select_top_keys(tied.data(), 5, 3), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(select_top_keys(tied.data(), 5, 9), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(LightningIndexer, LayerNormWithBiasMatchesFloat64Reference) {
  const int dim = 128, rows = 3;
  std::vector<float> x = normal_values(rows * dim, 7);
  for (float& v : x) v = 3.0f + 2.0f * v;  // a mean far from zero
  const std::vector<float> w = normal_values(dim, 8), b = normal_values(dim, 9);
  std::vector<float> y(x.size());
  layer_norm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, y.data());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < dim; ++i) mean += x[r * dim + i] / static_cast<double>(dim);
    for (int i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean) / dim;
    for (int i = 0; i < dim; ++i) {
      const double want = (x[r * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
      EXPECT_NEAR(y[r * dim + i], want, 1e-5 * (1 + std::abs(want)));
    }
  }
}

}  // namespace
}  // namespace moert::attention
