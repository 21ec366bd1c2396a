// The gated activation of an expert MLP, h = act(gate) * up, as plain data (docs/moe.md §1):
//   kSilu           h = silu(g) * u                          (Mixtral, Qwen, GLM, DeepSeek)
//   kClampedSwiglu  g = min(g, limit); u = clamp(u, -limit, limit);
//                   h = (u + 1) * g * sigmoid(alpha * g)       (gpt-oss: limit 7, alpha 1.702)
#pragma once

#include <cmath>

namespace moert::experts {

struct GluActivation {
  enum class Kind { kSilu, kClampedSwiglu };
  Kind kind = Kind::kSilu;
  float limit = 7.0f;
  float alpha = 1.702f;
  bool operator==(const GluActivation&) const = default;
};

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// h for one (gate, up) pair.
inline float glu(const GluActivation& act, float g, float u) {
  if (act.kind == GluActivation::Kind::kSilu) return silu(g) * u;
  g = std::fmin(g, act.limit);
  u = std::fmin(std::fmax(u, -act.limit), act.limit);
  return (u + 1.0f) * g * (1.0f / (1.0f + std::exp(-act.alpha * g)));
}

}  // namespace moert::experts
