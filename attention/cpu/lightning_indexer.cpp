#include "attention/cpu/lightning_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert::attention {

void lightning_index_scores(const float* q, const float* weights, int num_heads, int head_dim, const float* keys,
                            int64_t num_keys, float scale, float* scores) {
  for (int64_t t = 0; t < num_keys; ++t) {
    const float* key = keys + t * head_dim;
    float score = 0.0f;
    for (int h = 0; h < num_heads; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * head_dim;
      float dot = 0.0f;
      for (int d = 0; d < head_dim; ++d) dot += qh[d] * key[d];
      score += weights[h] * std::max(scale * dot, 0.0f);
    }
    scores[t] = score;
  }
}

std::vector<int32_t> select_top_keys(const float* scores, int64_t num_keys, int top_k) {
  std::vector<int32_t> positions(static_cast<size_t>(num_keys));
  std::iota(positions.begin(), positions.end(), 0);
  if (num_keys > top_k) {
    // A strict total order (score descending, then position ascending): the same set on every
    // rank and backend whatever the sort's internals.
    std::nth_element(positions.begin(), positions.begin() + top_k, positions.end(), [&](int32_t a, int32_t b) {
      return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
    });
    positions.resize(static_cast<size_t>(top_k));
    std::sort(positions.begin(), positions.end());
  }
  return positions;
}

void layer_norm(const float* x, int64_t num_rows, int dim, const float* weight, const float* bias, float eps,
                float* y) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float mean = 0.0f;
    for (int i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<float>(dim);
    float var = 0.0f;
    for (int i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv_std = 1.0f / std::sqrt(var / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] - mean) * inv_std * weight[i] + bias[i];
  }
}

}  // namespace moert::attention
