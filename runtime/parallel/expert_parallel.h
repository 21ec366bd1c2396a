// Expert parallelism as a layer over the single-rank transformer: each rank computes only
// the routed experts its placement gives it. Per MoE layer and step:
//   dispatch plan (experts/placement) -> exchange row counts -> DISPATCH all-to-all of
//   [hidden row | K expert ids | K weights] -> local grouped expert FFN, one weighted output
//   per (row, expert) -> COMBINE all-to-all back -> sum per token in ascending expert id.
// Because the combine sums the same products in the same order as LocalRoutedExperts,
// outputs are bit-identical for any number of ranks and any placement.
// Every rank must call run() for every MoE layer in the same order (empty batches too).
//
// STATUS: compiles, not yet wired into `moert run` and not yet tested across ranks. A first
// 2-rank run (rank 0 with one request, rank 1 idle through Engine::forward_when_idle)
// blocked with both ranks inside all_to_all_counts of layer 0; see the issue notes.
#pragma once

#include <cstdint>
#include <vector>

#include "experts/placement/placement.h"
#include "runtime/comm/transport.h"
#include "runtime/model/transformer.h"

namespace moert::parallel {

struct ExpertParallelStats {
  int64_t dispatch_bytes_sent = 0;
  int64_t combine_bytes_sent = 0;
  double all_to_all_s = 0.0;  // time inside the exchanges (including waiting for peers)
  double expert_compute_s = 0.0;
};

class ExpertParallelExperts : public RoutedExperts {
 public:
  // placement: one LayerPlacement per model layer (dense layers' entries are unused), or a
  // single one used for every layer; all arguments must outlive this object.
  ExpertParallelExperts(const ModelConfig& config, const experts::ExpertPlacement& placement,
                        comm::Transport& transport, ThreadPool& pool);
  // A transport failure aborts the whole job with a message naming this rank (no hang).
  void run(int layer, const MoeWeights& moe, const float* h, int64_t num_tokens, const int32_t* expert_ids,
           const float* weights, float* out) override;
  const ExpertParallelStats& stats() const { return stats_; }

 private:
  const ModelConfig& config_;
  const experts::ExpertPlacement& placement_;
  comm::Transport& transport_;
  ThreadPool& pool_;
  ExpertParallelStats stats_;
};

}  // namespace moert::parallel
