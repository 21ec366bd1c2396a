// Internal to core/cpu/dot.cpp and core/cpu/x86/dot_x86.cpp: the canonical lanes
// and the scalar weight decode that every instruction-set path shares.
//
// The canonical dot product, which every instruction-set path reproduces bit for bit:
// 16 lanes; element i of each full 16-element group goes to lane i % 16 as
// lane = fma(a, b, lane); the tail elements go to lanes 0..r-1 the same way; then the lanes
// are summed by the tree lane[l] += lane[l + w] for w = 8, 4, 2, 1. (AVX-512 holds the 16
// lanes in one register, AVX2 in two; the portable path uses std::fma.)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace moert::cpu::dot_detail {

constexpr int kLanes = 16;
constexpr int kMaxRows = 4;  // x rows sharing one pass over a weight row
// x rows a linear keeps in cache while the weights stream past (every CPU linear's row tile).
constexpr int64_t kRowTile = 64;

inline float reduce_lanes(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

enum class WeightKind { kF32, kBF16, kF16 };

template <WeightKind kind>
float scalar_weight(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) return static_cast<const float*>(w)[i];
  else if constexpr (kind == WeightKind::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
}

// The tail elements [i, k) of one x row against weight row w into lanes 0.. (fma, in order),
// then the tree: how every SIMD path finishes an accumulator it has stored to `lanes`.
template <WeightKind kind>
float reduce_with_tail(float* lanes, const float* x_row, const void* w, int64_t i, int64_t k) {
  for (int64_t l = 0; i < k; ++i, ++l) lanes[l] = std::fma(x_row[i], scalar_weight<kind>(w, i), lanes[l]);
  return reduce_lanes(lanes);
}

}  // namespace moert::cpu::dot_detail
