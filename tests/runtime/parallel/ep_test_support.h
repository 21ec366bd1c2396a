// What the expert-parallel tests share: a placement with replicas, each rank's own prompt.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "experts/placement/placement.h"
#include "runtime/model/transformer.h"

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

// Rank `rank`'s prompt: first_length + growth * rank tokens at positions 0.., every row's
// logits wanted (ranks differ in length and tokens, so batches are uneven).
inline ForwardBatch batch_for_rank(int rank, int vocab, int first_length, int growth) {
  ForwardBatch batch;
  for (int i = 0; i < first_length + growth * rank; ++i) {
    batch.tokens.push_back((rank * 211 + i * 29 + 5) % vocab);
    batch.positions.push_back(i);
    batch.logit_rows.push_back(i);
  }
  return batch;
}

}  // namespace moert::parallel
