#include "attention/rope.h"

#include <cmath>

#include "core/check.h"

namespace moert::attention {

RotaryEmbedding::RotaryEmbedding(int head_dim, int rotary_dim, double theta)
    : head_dim_(head_dim), rotary_dim_(rotary_dim) {
  MOERT_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim,
              "rotary_dim = " << rotary_dim << " must be even and in (0, " << head_dim << "]");
  const int half = rotary_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq_[static_cast<size_t>(i)] = std::pow(theta, -2.0 * i / rotary_dim);
}

void RotaryEmbedding::apply(float* heads, int num_heads, int64_t position) const {
  const int half = rotary_dim_ / 2;
  float cos_table[512];
  float sin_table[512];
  MOERT_CHECK(half <= 512, "rotary_dim = " << rotary_dim_ << " exceeds 1024");
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq_[static_cast<size_t>(i)];
    cos_table[i] = static_cast<float>(std::cos(angle));
    sin_table[i] = static_cast<float>(std::sin(angle));
  }
  for (int h = 0; h < num_heads; ++h) {
    float* head = heads + static_cast<int64_t>(h) * head_dim_;
    for (int i = 0; i < half; ++i) {
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * cos_table[i] - x2 * sin_table[i];
      head[i + half] = x2 * cos_table[i] + x1 * sin_table[i];
    }
  }
}

}  // namespace moert::attention
