#include "experts/placement/dispatch_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/check.h"

namespace moert::experts {

namespace {

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& counts) {
  std::vector<int64_t> cu(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) cu[i + 1] = cu[i] + counts[i];
  return cu;
}

std::string entry_name(const char* what, int64_t row, int k) {
  return std::string(what) + "[" + std::to_string(row) + ", " + std::to_string(k) + "]";
}

}  // namespace

Result<DispatchPlan> build_dispatch_plan(const LayerPlacement& placement, int rank,
                                         std::span<const int32_t> expert_ids, std::span<const float> weights,
                                         int64_t num_tokens, int top_k) {
  const int num_ranks = placement.num_ranks();
  const int num_experts = placement.num_experts();
  if (rank < 0 || rank >= num_ranks) {
    return invalid_argument("rank = " + std::to_string(rank) + " must be in [0, " + std::to_string(num_ranks) + ")");
  }
  if (top_k < 1) return invalid_argument("top_k = " + std::to_string(top_k) + " must be >= 1");
  if (num_tokens < 0) return invalid_argument("num_tokens = " + std::to_string(num_tokens) + " must be >= 0");
  const auto num_entries = static_cast<size_t>(num_tokens) * static_cast<size_t>(top_k);
  if (expert_ids.size() != num_entries || weights.size() != num_entries) {
    return invalid_argument("expert_ids has " + std::to_string(expert_ids.size()) + " and weights " +
                            std::to_string(weights.size()) + " values, expected [T, K] = " +
                            std::to_string(num_tokens) + " * " + std::to_string(top_k));
  }
  const auto k_count = static_cast<size_t>(top_k);

  // Destination rank of every entry.
  std::vector<int32_t> entry_dest(num_entries);  // [T, K]
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int k = 0; k < top_k; ++k) {
      const size_t j = static_cast<size_t>(t) * k_count + static_cast<size_t>(k);
      const int32_t e = expert_ids[j];
      if (e < 0 || e >= num_experts) {
        return invalid_argument(entry_name("expert_ids", t, k) + " = " + std::to_string(e) + " must be in [0, " +
                                std::to_string(num_experts) + ")");
      }
      entry_dest[j] = placement.replica_rank(e, static_cast<int64_t>(rank) + t);
    }
  }
  // True when column k of token t is the first to go to its destination.
  auto first_to_dest = [&](size_t row_base, int k) {
    for (int kk = 0; kk < k; ++kk) {
      if (entry_dest[row_base + static_cast<size_t>(kk)] == entry_dest[row_base + static_cast<size_t>(k)]) return false;
    }
    return true;
  };

  DispatchPlan plan;
  plan.rank = rank;
  plan.num_ranks = num_ranks;
  plan.top_k = top_k;
  plan.num_tokens = num_tokens;
  plan.send_row_counts.assign(static_cast<size_t>(num_ranks), 0);
  plan.return_row_counts.assign(static_cast<size_t>(num_ranks), 0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const size_t base = static_cast<size_t>(t) * k_count;
    for (int k = 0; k < top_k; ++k) {
      const auto d = static_cast<size_t>(entry_dest[base + static_cast<size_t>(k)]);
      ++plan.return_row_counts[d];
      if (first_to_dest(base, k)) ++plan.send_row_counts[d];
    }
  }
  plan.cu_send_rows = prefix_sums(plan.send_row_counts);
  plan.cu_return_rows = prefix_sums(plan.return_row_counts);

  const auto num_send = static_cast<size_t>(plan.cu_send_rows.back());
  plan.send_token_idx.assign(num_send, -1);
  plan.send_expert_ids.assign(num_send * k_count, -1);
  plan.send_weights.assign(num_send * k_count, 0.0f);
  std::vector<int64_t> row_cursor(plan.cu_send_rows.begin(), plan.cu_send_rows.end() - 1);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const size_t base = static_cast<size_t>(t) * k_count;
    for (int k = 0; k < top_k; ++k) {
      if (!first_to_dest(base, k)) continue;
      const int32_t d = entry_dest[base + static_cast<size_t>(k)];
      const auto row = static_cast<size_t>(row_cursor[static_cast<size_t>(d)]++);
      plan.send_token_idx[row] = t;
      for (int kk = k; kk < top_k; ++kk) {
        if (entry_dest[base + static_cast<size_t>(kk)] != d) continue;
        plan.send_expert_ids[row * k_count + static_cast<size_t>(kk)] = expert_ids[base + static_cast<size_t>(kk)];
        plan.send_weights[row * k_count + static_cast<size_t>(kk)] = weights[base + static_cast<size_t>(kk)];
      }
    }
  }

  // Returned-buffer row of every entry: destinations ascending, then (send row, k), the
  // order build_expert_compute_plan emits contributions in.
  std::vector<int64_t> entry_return_row(num_entries, -1);  // [T, K]
  int64_t next_return_row = 0;
  for (size_t row = 0; row < num_send; ++row) {
    const auto t = static_cast<size_t>(plan.send_token_idx[row]);
    for (size_t k = 0; k < k_count; ++k) {
      if (plan.send_expert_ids[row * k_count + k] < 0) continue;
      entry_return_row[t * k_count + k] = next_return_row++;
    }
  }
  MOERT_CHECK(next_return_row == plan.cu_return_rows.back(),
              "return rows " << next_return_row << " != " << plan.cu_return_rows.back());

  // The same summation order as the single-rank forward (dispatch_layout.h).
  plan.combine_src_rows = expert_order_of_tokens(expert_ids, num_tokens, top_k);
  for (int64_t& entry : plan.combine_src_rows) entry = entry_return_row[static_cast<size_t>(entry)];
  return plan;
}

void gather_send_rows(const DispatchPlan& plan, std::span<const float> x, int hidden_size, std::span<float> send) {
  const auto d = static_cast<size_t>(hidden_size);
  MOERT_CHECK(x.size() == static_cast<size_t>(plan.num_tokens) * d,
              "x has " << x.size() << " values, expected [T, D] = " << plan.num_tokens << " * " << hidden_size);
  MOERT_CHECK(send.size() == static_cast<size_t>(plan.num_send_rows()) * d,
              "send has " << send.size() << " values, expected [N_send, D] = " << plan.num_send_rows() << " * "
                          << hidden_size);
  for (size_t row = 0; row < plan.send_token_idx.size(); ++row) {
    const auto t = static_cast<size_t>(plan.send_token_idx[row]);
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(t * d), d, send.begin() + static_cast<std::ptrdiff_t>(row * d));
  }
}

void combine_contributions(const DispatchPlan& plan, std::span<const float> returned, int hidden_size,
                           std::span<float> out) {
  const auto d = static_cast<size_t>(hidden_size);
  MOERT_CHECK(returned.size() == static_cast<size_t>(plan.num_return_rows()) * d,
              "returned has " << returned.size() << " values, expected [N_ret, D] = " << plan.num_return_rows()
                              << " * " << hidden_size);
  MOERT_CHECK(out.size() == static_cast<size_t>(plan.num_tokens) * d,
              "out has " << out.size() << " values, expected [T, D] = " << plan.num_tokens << " * " << hidden_size);
  sum_rows_in_order(plan.combine_src_rows, plan.top_k, returned, hidden_size, out);
}

Result<ExpertComputePlan> build_expert_compute_plan(const LayerPlacement& placement, int rank,
                                                    std::span<const int64_t> recv_row_counts,
                                                    std::span<const int32_t> recv_expert_ids,
                                                    std::span<const float> recv_weights, int top_k) {
  const int num_ranks = placement.num_ranks();
  const int num_experts = placement.num_experts();
  if (rank < 0 || rank >= num_ranks) {
    return invalid_argument("rank = " + std::to_string(rank) + " must be in [0, " + std::to_string(num_ranks) + ")");
  }
  if (top_k < 1) return invalid_argument("top_k = " + std::to_string(top_k) + " must be >= 1");
  if (recv_row_counts.size() != static_cast<size_t>(num_ranks)) {
    return invalid_argument("recv_row_counts has " + std::to_string(recv_row_counts.size()) +
                            " values, expected num_ranks = " + std::to_string(num_ranks));
  }
  ExpertComputePlan plan;
  plan.rank = rank;
  plan.num_ranks = num_ranks;
  plan.top_k = top_k;
  plan.cu_recv_rows.assign(static_cast<size_t>(num_ranks) + 1, 0);
  for (size_t s = 0; s < recv_row_counts.size(); ++s) {
    if (recv_row_counts[s] < 0) {
      return invalid_argument("recv_row_counts[" + std::to_string(s) + "] = " + std::to_string(recv_row_counts[s]) +
                              " must be >= 0");
    }
    plan.cu_recv_rows[s + 1] = plan.cu_recv_rows[s] + recv_row_counts[s];
  }
  const auto num_recv = static_cast<size_t>(plan.cu_recv_rows.back());
  const auto k_count = static_cast<size_t>(top_k);
  if (recv_expert_ids.size() != num_recv * k_count || recv_weights.size() != num_recv * k_count) {
    return invalid_argument("recv_expert_ids has " + std::to_string(recv_expert_ids.size()) + " and recv_weights " +
                            std::to_string(recv_weights.size()) + " values, expected [N_recv, K] = " +
                            std::to_string(num_recv) + " * " + std::to_string(top_k));
  }

  plan.return_row_counts.assign(static_cast<size_t>(num_ranks), 0);
  for (int s = 0; s < num_ranks; ++s) {
    for (int64_t row = plan.cu_recv_rows[static_cast<size_t>(s)]; row < plan.cu_recv_rows[static_cast<size_t>(s) + 1];
         ++row) {
      for (int k = 0; k < top_k; ++k) {
        const size_t j = static_cast<size_t>(row) * k_count + static_cast<size_t>(k);
        const int32_t e = recv_expert_ids[j];
        if (e == -1) continue;
        if (e < 0 || e >= num_experts || !placement.rank_hosts(rank, e)) {
          return invalid_argument(entry_name("recv_expert_ids", row, k) + " = " + std::to_string(e) +
                                  " (from rank " + std::to_string(s) + ") is not an expert of rank " +
                                  std::to_string(rank) + " and not -1");
        }
        plan.layout.add_entry(row, e, recv_weights[j]);
        ++plan.return_row_counts[static_cast<size_t>(s)];
      }
    }
  }
  plan.cu_return_rows = prefix_sums(plan.return_row_counts);

  group_entries_by_expert(plan.layout, num_experts);
  return plan;
}

}  // namespace moert::experts
