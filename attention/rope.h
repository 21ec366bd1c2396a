// Rotary position embedding, rotate-half form (Hugging Face `rotate_half`), applied to the
// first `rotary_dim` channels of each head; the remaining channels pass through unchanged
// (partial rotary, GLM-4.5). Frequencies: inv_freq[i] = theta^(-2i / rotary_dim),
// i < rotary_dim / 2; channel i pairs with channel i + rotary_dim / 2.
#pragma once

#include <cstdint>
#include <vector>

namespace moert::attention {

class RotaryEmbedding {
 public:
  RotaryEmbedding(int head_dim, int rotary_dim, double theta);

  int head_dim() const { return head_dim_; }
  int rotary_dim() const { return rotary_dim_; }

  // Rotates `num_heads` heads laid out contiguously ([num_heads, head_dim]) in place for
  // token position `position`. Angles are computed in float64 and rounded once to float.
  void apply(float* heads, int num_heads, int64_t position) const;

 private:
  int head_dim_;
  int rotary_dim_;
  std::vector<double> inv_freq_;  // [rotary_dim / 2]
};

}  // namespace moert::attention
