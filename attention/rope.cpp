#include "attention/rope.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace moert::attention {

double yarn_mscale(double factor, double c) { return factor <= 1.0 ? 1.0 : 0.1 * c * std::log(factor) + 1.0; }

RopeTables rope_tables(int rotary_dim, double theta, const RopeScaling& scaling) {
  const int half = rotary_dim / 2;
  RopeTables tables;
  tables.inv_freq.resize(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) tables.inv_freq[static_cast<size_t>(i)] = std::pow(theta, -2.0 * i / rotary_dim);
  if (scaling.kind != RopeScaling::Kind::kYarn) return tables;
  // docs/rope.md: the ramp between the dimensions that rotate beta_fast and beta_slow times
  // over the original context keeps fast ones, divides slow ones by the factor.
  const double d = rotary_dim;
  auto correction_dim = [&](double rotations) {
    return d * std::log(scaling.original_max_positions / (2.0 * M_PI * rotations)) / (2.0 * std::log(theta));
  };
  double low = correction_dim(scaling.beta_fast), high = correction_dim(scaling.beta_slow);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;
  for (int j = 0; j < half; ++j) {
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    double& inv = tables.inv_freq[static_cast<size_t>(j)];
    inv = inv / scaling.factor * ramp + inv * (1.0 - ramp);
  }
  if (scaling.attention_factor > 0.0) {
    tables.attention_factor = scaling.attention_factor;
  } else if (scaling.mscale != 0.0 && scaling.mscale_all_dim != 0.0) {
    tables.attention_factor =
        yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(scaling.factor, scaling.mscale_all_dim);
  } else {
    tables.attention_factor = yarn_mscale(scaling.factor, 1.0);
  }
  return tables;
}

RotaryEmbedding::RotaryEmbedding(int head_dim, int rotary_dim, double theta, const RopeScaling& scaling,
                                 RopePairing pairing, int first_channel)
    : head_dim_(head_dim), rotary_dim_(rotary_dim), pairing_(pairing), first_channel_(first_channel) {
  MOERT_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && first_channel >= 0 && first_channel + rotary_dim <= head_dim,
              "rotary channels [" << first_channel << ", " << first_channel + rotary_dim
                                  << ") must be an even count inside the head of " << head_dim);
  RopeTables tables = rope_tables(rotary_dim, theta, scaling);
  inv_freq_ = std::move(tables.inv_freq);
  attention_factor_ = tables.attention_factor;
}

void RotaryEmbedding::cos_sin(int64_t position, float* cos, float* sin) const {
  for (int i = 0; i < rotary_dim_ / 2; ++i) {
    const double angle = static_cast<double>(position) * inv_freq_[static_cast<size_t>(i)];
    cos[i] = static_cast<float>(std::cos(angle) * attention_factor_);
    sin[i] = static_cast<float>(std::sin(angle) * attention_factor_);
  }
}

void RotaryEmbedding::apply(float* heads, int num_heads, int64_t position) const {
  const int half = rotary_dim_ / 2;
  float cos_table[512];
  float sin_table[512];
  MOERT_CHECK(half <= 512, "rotary_dim = " << rotary_dim_ << " exceeds 1024");
  cos_sin(position, cos_table, sin_table);
  // Channel pair j: (j, j + half) rotate-half, (2j, 2j + 1) interleaved.
  const int second_offset = pairing_ == RopePairing::kRotateHalf ? half : 1;
  const int stride = pairing_ == RopePairing::kRotateHalf ? 1 : 2;
  for (int h = 0; h < num_heads; ++h) {
    float* rotated = heads + static_cast<int64_t>(h) * head_dim_ + first_channel_;
    for (int i = 0; i < half; ++i) {
      float* first = rotated + i * stride;
      float* second = first + second_offset;
      const float x1 = *first;
      const float x2 = *second;
      *first = x1 * cos_table[i] - x2 * sin_table[i];
      *second = x2 * cos_table[i] + x1 * sin_table[i];
    }
  }
}

}  // namespace moert::attention
