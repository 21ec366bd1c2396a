// The expert-parallel dispatch / combine plan: which token rows each rank sends to which
// rank, how the receiver groups them by expert, and how the results come back and are
// summed. Pure logic and plain data (counts, prefix sums, index lists), planned on the
// CPU; a transport (MPI, NCCL, the loopback in loopback.h) only moves the bytes.
//
// Shapes: T tokens on this rank, K experts per token, D hidden size, R ranks,
//   N_send rows this rank sends (all destinations), N_recv rows it receives,
//   N_ret contributions returned to this rank, N_c contributions it computes.
//
// Terms:
//   entry: one (token t, column k): expert expert_ids[t, k] with gate weight weights[t, k].
//   destination: the rank of the replica serving an entry,
//     placement.replica_rank(expert, source_rank + t) (round-robin over replicas).
//   send row: one token's hidden state for one destination. A token is sent ONCE to each
//     distinct destination of its entries, ascending token index within a destination.
//     With it go K expert ids and K weights; columns served by another rank carry
//     id -1 and weight 0 (DeepEP's recv_topk_idx convention).
//   contribution: weight * f(expert, x) for one entry, D floats, computed on the
//     destination. Contributions are returned SEPARATELY, never pre-summed per token, in
//     (received row, k) order; the source then sums each token's K contributions in
//     ascending expert id (ties: ascending k), starting from +0.0f.
//
// Bit-identity: since every contribution is the same float product wherever it is
// computed (f is a per-row function of (expert, x), identical on every replica) and the
// source adds them in an order fixed by the expert ids alone, the combined output is
// bit-identical for any R, any placement and any replica choice, and equals
// reference_moe_forward (loopback.h).
//
// One MoE layer, per rank:
//   1. plan = build_dispatch_plan(placement, rank, ids, weights, T, K)
//   2. send rows: gather_send_rows(plan, x) -> [N_send, D]; with send_expert_ids and
//      send_weights. Exchange send_row_counts (all-to-all of R counts) -> recv_row_counts.
//   3. all_to_all_v(rows, counts) -> [N_recv, D] ordered by source rank; same for ids
//      and weights ([N_recv, K] each).
//   4. compute = build_expert_compute_plan(placement, rank, recv_row_counts, recv ids,
//      recv weights, K); compute the N_c contributions (grouped by expert for a grouped
//      GEMM); contributions for source s are rows [cu_return_rows[s], cu_return_rows[s+1]).
//   5. all_to_all_v(contributions, compute.return_row_counts) back; the source receives
//      plan.return_row_counts[d] rows from each d, ordered by d.
//   6. combine_contributions(plan, returned) -> [T, D].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "experts/grouped/dispatch_layout.h"
#include "experts/placement/placement.h"
#include "core/status.h"

namespace moert::experts {

// The source side of one rank's dispatch and combine. Plain data.
struct DispatchPlan {
  int rank = 0;            // this rank
  int num_ranks = 0;       // R
  int top_k = 0;           // K
  int64_t num_tokens = 0;  // T

  // Dispatch. Rows for destination d are [cu_send_rows[d], cu_send_rows[d+1]).
  std::vector<int64_t> send_row_counts;  // [R]
  std::vector<int64_t> cu_send_rows;     // [R+1]
  std::vector<int64_t> send_token_idx;   // [N_send] send row i = x[send_token_idx[i]] (the pack permutation)
  std::vector<int32_t> send_expert_ids;  // [N_send, K] -1 for columns served elsewhere
  std::vector<float> send_weights;       // [N_send, K] 0 for columns served elsewhere

  // Combine. Contributions from destination d arrive as rows [cu_return_rows[d],
  // cu_return_rows[d+1]) of the returned buffer, in (send row, k) order.
  std::vector<int64_t> return_row_counts;  // [R] entries this rank sends to d
  std::vector<int64_t> cu_return_rows;     // [R+1]
  // [T, K]: row t lists the returned-buffer rows of token t's contributions, in
  // ascending expert id (ties: ascending k): the order combine_contributions sums them.
  std::vector<int64_t> combine_src_rows;

  int64_t num_send_rows() const { return cu_send_rows.back(); }
  int64_t num_return_rows() const { return cu_return_rows.back(); }
};

// Builds the source-side plan. expert_ids, weights: [T, K] from route_tokens.
// kInvalidArgument naming the value when rank is outside [0, R), K < 1, T < 0, the spans
// are not T * K long, or an expert id is outside [0, E).
Result<DispatchPlan> build_dispatch_plan(const LayerPlacement& placement, int rank,
                                         std::span<const int32_t> expert_ids, std::span<const float> weights,
                                         int64_t num_tokens, int top_k);

// send[i] = x[send_token_idx[i]]. x: [T, D], send: [N_send, D] (MOERT_CHECK on sizes).
void gather_send_rows(const DispatchPlan& plan, std::span<const float> x, int hidden_size, std::span<float> send);

// out[t] = sum of token t's contributions in ascending expert id, from +0.0f.
// returned: [N_ret, D], out: [T, D] (MOERT_CHECK on sizes).
void combine_contributions(const DispatchPlan& plan, std::span<const float> returned, int hidden_size,
                           std::span<float> out);

// The destination side: what arrived and what to compute. Plain data.
struct ExpertComputePlan {
  int rank = 0;
  int num_ranks = 0;
  int top_k = 0;
  // Rows from source s are [cu_recv_rows[s], cu_recv_rows[s+1]) of the received buffers.
  std::vector<int64_t> cu_recv_rows;  // [R+1]

  // Contributions = the layout's entries, in return order (received row ascending, then
  // k ascending), reading received rows; grouped by expert for the grouped expert FFN.
  ExpertDispatchLayout layout;
  // Contributions returned to source s are [cu_return_rows[s], cu_return_rows[s+1]).
  std::vector<int64_t> return_row_counts;  // [R]
  std::vector<int64_t> cu_return_rows;     // [R+1]

  int64_t num_recv_rows() const { return cu_recv_rows.back(); }
  int64_t num_contribs() const { return layout.num_entries(); }
};

// Builds the destination-side plan once the counts are exchanged.
//   recv_row_counts: [R] rows from each source. recv_expert_ids, recv_weights: [N_recv, K].
// kInvalidArgument naming the value when a count is negative, the spans do not hold
// N_recv * K values, or an id is neither -1 nor an expert this rank hosts.
Result<ExpertComputePlan> build_expert_compute_plan(const LayerPlacement& placement, int rank,
                                                    std::span<const int64_t> recv_row_counts,
                                                    std::span<const int32_t> recv_expert_ids,
                                                    std::span<const float> recv_weights, int top_k);

}  // namespace moert::experts
