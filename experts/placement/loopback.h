// In-memory simulation of one expert-parallel MoE layer over R ranks: dispatch ->
// local expert compute -> combine, through the plans of dispatch_plan.h, with the
// all-to-alls done by copying buffers. It is the test double for a transport and the
// proof that the plans compose; real runs replace loopback_all_to_all_v with MPI/NCCL.
// Pure logic: no device code, no MPI.
//
// Shapes: as dispatch_plan.h (T tokens of one rank, K, D, R).
//
// This library is compiled with -ffp-contract=off, so contribution = weight * y and the
// running sums are separate float roundings here as in reference_moe_forward, whatever
// the target's FMA support.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "experts/placement/dispatch_plan.h"
#include "experts/placement/placement.h"
#include "core/check.h"
#include "core/status.h"

namespace moert::experts {

// The routed expert e applied to one row: x [D] -> y [D]. Must be a function of
// (e, x) only, so that every replica computes the same bits.
using ExpertFn = std::function<void(int expert, std::span<const float> x, std::span<float> y)>;

// One rank's input to a MoE layer.
struct RankTokens {
  int64_t num_tokens = 0;          // T
  std::vector<int32_t> expert_ids;  // [T, K] from route_tokens
  std::vector<float> weights;       // [T, K]
  std::vector<float> hidden;        // [T, D]
};

// Loopback all-to-all-v of rows of row_width elements. send[s] holds rank s's rows,
// rows for rank d are [cu_send_rows[s][d], cu_send_rows[s][d+1]). Returns recv[d]: the
// rows every source sent to d, sources ascending (MPI_Alltoallv's order).
template <typename T>
std::vector<std::vector<T>> loopback_all_to_all_v(const std::vector<std::vector<T>>& send,
                                                  const std::vector<std::vector<int64_t>>& cu_send_rows,
                                                  int64_t row_width) {
  const size_t num_ranks = send.size();
  MOERT_CHECK(cu_send_rows.size() == num_ranks, "cu_send_rows has " << cu_send_rows.size() << " ranks, send has " << num_ranks);
  const auto width = static_cast<size_t>(row_width);
  std::vector<std::vector<T>> recv(num_ranks);
  for (size_t d = 0; d < num_ranks; ++d) {
    for (size_t s = 0; s < num_ranks; ++s) {
      MOERT_CHECK(cu_send_rows[s].size() == num_ranks + 1, "cu_send_rows[" << s << "] must have R + 1 entries");
      MOERT_CHECK(send[s].size() == static_cast<size_t>(cu_send_rows[s].back()) * width,
                  "send[" << s << "] has " << send[s].size() << " values, expected " << cu_send_rows[s].back() << " rows");
      const auto begin = static_cast<size_t>(cu_send_rows[s][d]) * width;
      const auto end = static_cast<size_t>(cu_send_rows[s][d + 1]) * width;
      recv[d].insert(recv[d].end(), send[s].begin() + static_cast<std::ptrdiff_t>(begin),
                     send[s].begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
  return recv;
}

// Loopback all-to-all of counts: send_counts[s][d] -> recv_counts[d][s].
std::vector<std::vector<int64_t>> loopback_exchange_counts(const std::vector<std::vector<int64_t>>& send_counts);

// The local expert step on one rank: contributions [N_c, D], contribution c =
// entry_weight[c] * f(entry_expert[c], recv_x[entry_row[c]]) over plan.layout, through the
// grouped expert FFN with f applied row by row. recv_x: [N_recv, D] (MOERT_CHECK on sizes).
void compute_contributions(const ExpertComputePlan& plan, std::span<const float> recv_x, int hidden_size,
                           const ExpertFn& expert_fn, std::span<float> contributions);

struct LoopbackResult {
  std::vector<std::vector<float>> outputs;  // [R], outputs[r]: [T_r, D]
  std::vector<int64_t> rank_recv_rows;      // [R] rows each rank received (dispatch traffic)
  std::vector<int64_t> rank_contribs;       // [R] contributions each rank computed (its expert load)
};

// Runs the layer for all R = placement.num_ranks() ranks; ranks[r] is rank r's input.
// Errors from the plan builders are returned with "rank r" context.
Result<LoopbackResult> loopback_moe_forward(const LayerPlacement& placement, const std::vector<RankTokens>& ranks,
                                            int top_k, int hidden_size, const ExpertFn& expert_fn);

// The single-rank reference: out[t] = sum over token t's K experts in ascending expert
// id (ties: ascending k), from +0.0f, of weight * f(e, x_t). [T, D].
std::vector<float> reference_moe_forward(const RankTokens& tokens, int top_k, int hidden_size,
                                         const ExpertFn& expert_fn);

}  // namespace moert::experts
