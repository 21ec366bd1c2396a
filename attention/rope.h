// Rotary position embedding over `rotary_dim` channels of each head starting at
// `first_channel` (0 unless the rotated part follows a pass-through part, as in MLA's
// [latent | rope] rows); the other channels pass through unchanged (partial rotary,
// GLM-4.5). Frequencies: inv_freq[j] = theta^(-2j / rotary_dim), j < rotary_dim / 2.
// Pairing (docs/rope.md): rotate-half (Hugging Face `rotate_half`, Llama/Qwen) rotates
// channels (j, j + rotary_dim / 2); interleaved (DeepSeek-V3) rotates (2j, 2j + 1). YaRN
// scaling changes the frequencies and multiplies cos and sin by its attention factor.
#pragma once

#include <cstdint>
#include <vector>

namespace moert::attention {

// `rope_scaling` of a config.json. kNone: plain frequencies, factor 1.
struct RopeScaling {
  enum class Kind { kNone, kYarn };
  Kind kind = Kind::kNone;
  double factor = 1.0;                   // s
  double original_max_positions = 0.0;   // L0
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;                  // floor / ceil the ramp ends
  double mscale = 0.0;                   // with mscale_all_dim: a = m(s, mscale) / m(s, mscale_all_dim)
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;         // > 0: a as given
  bool operator==(const RopeScaling&) const = default;
};

// The frequencies inv'_j (j < rotary_dim / 2) and the factor a that multiplies cos and sin.
struct RopeTables {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
RopeTables rope_tables(int rotary_dim, double theta, const RopeScaling& scaling);
// m(s, c) = 1 if s <= 1 else 0.1 * c * ln(s) + 1 (YaRN's magnitude correction).
double yarn_mscale(double factor, double c);

enum class RopePairing { kRotateHalf, kInterleaved };

class RotaryEmbedding {
 public:
  RotaryEmbedding(int head_dim, int rotary_dim, double theta, const RopeScaling& scaling = {},
                  RopePairing pairing = RopePairing::kRotateHalf, int first_channel = 0);

  int head_dim() const { return head_dim_; }
  int rotary_dim() const { return rotary_dim_; }
  RopePairing pairing() const { return pairing_; }
  int first_channel() const { return first_channel_; }

  // Rotates `num_heads` heads laid out contiguously ([num_heads, head_dim]) in place for
  // token position `position`. Angles are computed in float64 and rounded once to float.
  void apply(float* heads, int num_heads, int64_t position) const;
  // The factors apply() uses at `position`: cos[j], sin[j] for j < rotary_dim / 2 (float64
  // angle, times the attention factor, rounded once). Other backends rotate with these.
  void cos_sin(int64_t position, float* cos, float* sin) const;

 private:
  int head_dim_;
  int rotary_dim_;
  RopePairing pairing_;
  int first_channel_;  // rotated channels: [first_channel, first_channel + rotary_dim)
  std::vector<double> inv_freq_;  // [rotary_dim / 2]
  double attention_factor_ = 1.0;
};

}  // namespace moert::attention
