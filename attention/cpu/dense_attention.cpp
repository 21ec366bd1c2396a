#include "attention/cpu/dense_attention.h"

#include <cmath>
#include <vector>

#include "core/cpu/dot.h"
#include "core/cpu/exp.h"

namespace moert::attention {

void causal_attention_one_token(const float* q, const float* keys, const float* values, int64_t position,
                                int num_heads, int num_kv_heads, int head_dim, float* out,
                                const AttentionVariant& variant) {
  const int group = num_heads / num_kv_heads;
  const int64_t kv_stride = static_cast<int64_t>(num_kv_heads) * head_dim;
  const float scale =
      variant.softmax_scale > 0.0f ? variant.softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t first = variant.sliding_window > 0 ? std::max<int64_t>(0, position + 1 - variant.sliding_window) : 0;
  std::vector<float> scores(static_cast<size_t>(position + 1));
  for (int h = 0; h < num_heads; ++h) {
    const float* q_head = q + static_cast<int64_t>(h) * head_dim;
    const int64_t kv_offset = static_cast<int64_t>(h / group) * head_dim;
    float max_score = -INFINITY;
    for (int64_t j = first; j <= position; ++j) {
      float score = cpu::dot_f32(q_head, keys + j * kv_stride + kv_offset, head_dim) * scale;
      if (variant.soft_cap > 0.0f) score = variant.soft_cap * std::tanh(score / variant.soft_cap);
      scores[static_cast<size_t>(j)] = score;
      max_score = std::max(max_score, score);
    }
    const float* sink = variant.sinks != nullptr ? variant.sinks + h : nullptr;
    if (sink != nullptr) max_score = std::max(max_score, *sink);
    double denominator = 0.0;
    for (int64_t j = first; j <= position; ++j) {
      const float p = cpu::exp_f32(scores[static_cast<size_t>(j)] - max_score);
      scores[static_cast<size_t>(j)] = p;
      denominator += p;
    }
    if (sink != nullptr) denominator += cpu::exp_f32(*sink - max_score);
    const float inv_denominator = static_cast<float>(1.0 / denominator);
    float* out_head = out + static_cast<int64_t>(h) * head_dim;
    for (int d = 0; d < head_dim; ++d) out_head[d] = 0.0f;
    for (int64_t j = first; j <= position; ++j) {
      const float p = scores[static_cast<size_t>(j)] * inv_denominator;
      const float* v_row = values + j * kv_stride + kv_offset;
      for (int d = 0; d < head_dim; ++d) out_head[d] += p * v_row[d];
    }
  }
}

}  // namespace moert::attention
