// Placements the expert-parallel tests share.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "experts/placement/placement.h"

namespace moert::parallel {

// Expert e on rank e % R, and every third expert also on rank (e + 1) % R (replicas, as EPLB
// makes them; none on one rank).
inline experts::ExpertPlacement placement_with_replicas(int num_experts, int num_ranks) {
  std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
  for (int e = 0; e < num_experts; ++e) rank_experts[static_cast<size_t>(e % num_ranks)].push_back(e);
  if (num_ranks > 1) {
    for (int e = 0; e < num_experts; e += 3) rank_experts[static_cast<size_t>((e + 1) % num_ranks)].push_back(e);
  }
  std::vector<experts::LayerPlacement> layers{experts::LayerPlacement::create(num_experts, rank_experts).value()};
  return experts::ExpertPlacement::create(std::move(layers)).value();
}

}  // namespace moert::parallel
