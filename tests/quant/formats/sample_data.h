// Deterministic, portable test data for the format round-trip tests: splitmix64 draws,
// Box-Muller normals and inverse-CDF Laplace samples (no <random> distributions, whose
// output differs between standard libraries), plus the relative MSE of spec §5b.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace moert::quant::test {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

inline std::vector<float> normal_samples(int64_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double angle = 2.0 * std::numbers::pi * rng.uniform();
    out[static_cast<size_t>(i)] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < n) out[static_cast<size_t>(i + 1)] = static_cast<float>(radius * std::sin(angle));
  }
  return out;
}

// Laplace(0, 1): sign * -log(u).
inline std::vector<float> laplace_samples(int64_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) {
    const double sign = (rng.next() & 1) ? 1.0 : -1.0;
    v = static_cast<float>(sign * -std::log(rng.uniform()));
  }
  return out;
}

// sum(err^2) / sum(x^2) in double.
inline double relative_mse(const std::vector<float>& x, const std::vector<float>& x_hat) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = static_cast<double>(x_hat[i]) - x[i];
    num += err * err;
    den += static_cast<double>(x[i]) * x[i];
  }
  return num / den;
}

}  // namespace moert::quant::test
