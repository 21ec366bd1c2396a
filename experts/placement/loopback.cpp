#include "experts/placement/loopback.h"

#include "experts/grouped/grouped_expert_ffn.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace moert::experts {

namespace {

// out = weight * y, one rounding per element; shared by the distributed path and the
// reference so both produce the same bits.
void weighted_contribution(float weight, std::span<const float> y, float* out) {
  for (size_t i = 0; i < y.size(); ++i) out[i] = weight * y[i];
}

}  // namespace

std::vector<std::vector<int64_t>> loopback_exchange_counts(const std::vector<std::vector<int64_t>>& send_counts) {
  const size_t num_ranks = send_counts.size();
  std::vector<std::vector<int64_t>> recv(num_ranks, std::vector<int64_t>(num_ranks, 0));
  for (size_t s = 0; s < num_ranks; ++s) {
    MOERT_CHECK(send_counts[s].size() == num_ranks, "send_counts[" << s << "] must have R entries");
    for (size_t d = 0; d < num_ranks; ++d) recv[d][s] = send_counts[s][d];
  }
  return recv;
}

void compute_contributions(const ExpertComputePlan& plan, std::span<const float> recv_x, int hidden_size,
                           const ExpertFn& expert_fn, std::span<float> contributions) {
  const auto d = static_cast<size_t>(hidden_size);
  MOERT_CHECK(recv_x.size() == static_cast<size_t>(plan.num_recv_rows()) * d,
              "recv_x has " << recv_x.size() << " values, expected [N_recv, D] = " << plan.num_recv_rows() << " * "
                            << hidden_size);
  // The row function applied to each row of a group: the grouped FFN's test double.
  auto per_row = [&](int expert, const float* x, int64_t num_rows, float* y) {
    for (size_t r = 0; r < static_cast<size_t>(num_rows); ++r) {
      expert_fn(expert, std::span<const float>(x + r * d, d), std::span<float>(y + r * d, d));
    }
  };
  grouped_expert_ffn(plan.layout, recv_x, hidden_size, per_row, contributions);
}

Result<LoopbackResult> loopback_moe_forward(const LayerPlacement& placement, const std::vector<RankTokens>& ranks,
                                            int top_k, int hidden_size, const ExpertFn& expert_fn) {
  const int num_ranks = placement.num_ranks();
  if (static_cast<int>(ranks.size()) != num_ranks) {
    return invalid_argument("ranks has " + std::to_string(ranks.size()) + " inputs, placement has num_ranks = " +
                            std::to_string(num_ranks));
  }
  if (hidden_size < 1) return invalid_argument("hidden_size = " + std::to_string(hidden_size) + " must be >= 1");
  const auto d = static_cast<size_t>(hidden_size);
  const auto nr = static_cast<size_t>(num_ranks);

  // 1-2. Source plans and send buffers.
  std::vector<DispatchPlan> plans;
  std::vector<std::vector<float>> send_x(nr), send_w(nr);
  std::vector<std::vector<int32_t>> send_ids(nr);
  std::vector<std::vector<int64_t>> cu_send(nr), send_counts(nr);
  for (int r = 0; r < num_ranks; ++r) {
    const RankTokens& in = ranks[static_cast<size_t>(r)];
    if (in.hidden.size() != static_cast<size_t>(in.num_tokens) * d) {
      return invalid_argument("rank " + std::to_string(r) + ": hidden has " + std::to_string(in.hidden.size()) +
                              " values, expected [T, D] = " + std::to_string(in.num_tokens) + " * " +
                              std::to_string(hidden_size));
    }
    Result<DispatchPlan> plan = build_dispatch_plan(placement, r, in.expert_ids, in.weights, in.num_tokens, top_k);
    if (!plan.is_ok()) return plan.status().with_context("rank " + std::to_string(r));
    plans.push_back(std::move(plan).value());
    const DispatchPlan& p = plans.back();
    send_x[static_cast<size_t>(r)].resize(static_cast<size_t>(p.num_send_rows()) * d);
    gather_send_rows(p, in.hidden, hidden_size, send_x[static_cast<size_t>(r)]);
    send_ids[static_cast<size_t>(r)] = p.send_expert_ids;
    send_w[static_cast<size_t>(r)] = p.send_weights;
    cu_send[static_cast<size_t>(r)] = p.cu_send_rows;
    send_counts[static_cast<size_t>(r)] = p.send_row_counts;
  }

  // 3. Dispatch all-to-alls.
  const std::vector<std::vector<int64_t>> recv_counts = loopback_exchange_counts(send_counts);
  const auto recv_x = loopback_all_to_all_v(send_x, cu_send, hidden_size);
  const auto recv_ids = loopback_all_to_all_v(send_ids, cu_send, top_k);
  const auto recv_w = loopback_all_to_all_v(send_w, cu_send, top_k);

  // 4. Local experts.
  LoopbackResult result;
  std::vector<std::vector<float>> contribs(nr);
  std::vector<std::vector<int64_t>> cu_return(nr);
  for (int r = 0; r < num_ranks; ++r) {
    const auto ru = static_cast<size_t>(r);
    Result<ExpertComputePlan> compute =
        build_expert_compute_plan(placement, r, recv_counts[ru], recv_ids[ru], recv_w[ru], top_k);
    if (!compute.is_ok()) return compute.status().with_context("rank " + std::to_string(r));
    contribs[ru].resize(static_cast<size_t>(compute->num_contribs()) * d);
    compute_contributions(*compute, recv_x[ru], hidden_size, expert_fn, contribs[ru]);
    cu_return[ru] = compute->cu_return_rows;
    result.rank_recv_rows.push_back(compute->num_recv_rows());
    result.rank_contribs.push_back(compute->num_contribs());
  }

  // 5-6. Combine all-to-all and the fixed-order sum.
  const auto returned = loopback_all_to_all_v(contribs, cu_return, hidden_size);
  for (int r = 0; r < num_ranks; ++r) {
    const auto ru = static_cast<size_t>(r);
    const DispatchPlan& p = plans[ru];
    MOERT_CHECK(returned[ru].size() == static_cast<size_t>(p.num_return_rows()) * d,
                "rank " << r << " got " << returned[ru].size() / d << " contributions back, expected "
                        << p.num_return_rows());
    std::vector<float> out(static_cast<size_t>(p.num_tokens) * d);
    combine_contributions(p, returned[ru], hidden_size, out);
    result.outputs.push_back(std::move(out));
  }
  return result;
}

std::vector<float> reference_moe_forward(const RankTokens& tokens, int top_k, int hidden_size,
                                         const ExpertFn& expert_fn) {
  const auto d = static_cast<size_t>(hidden_size);
  const auto k_count = static_cast<size_t>(top_k);
  MOERT_CHECK(tokens.expert_ids.size() == static_cast<size_t>(tokens.num_tokens) * k_count &&
                  tokens.weights.size() == tokens.expert_ids.size() &&
                  tokens.hidden.size() == static_cast<size_t>(tokens.num_tokens) * d,
              "reference_moe_forward: inputs do not match T = " << tokens.num_tokens << ", K = " << top_k
                                                               << ", D = " << hidden_size);
  std::vector<float> out(static_cast<size_t>(tokens.num_tokens) * d, 0.0f);
  std::vector<float> y(d), c(d);
  std::vector<int> order(k_count);
  for (size_t t = 0; t < static_cast<size_t>(tokens.num_tokens); ++t) {
    const size_t base = t * k_count;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return tokens.expert_ids[base + static_cast<size_t>(a)] < tokens.expert_ids[base + static_cast<size_t>(b)];
    });
    const std::span<const float> x = std::span<const float>(tokens.hidden).subspan(t * d, d);
    float* acc = out.data() + t * d;
    for (int k : order) {
      const size_t j = base + static_cast<size_t>(k);
      expert_fn(tokens.expert_ids[j], x, y);
      weighted_contribution(tokens.weights[j], y, c.data());
      for (size_t i = 0; i < d; ++i) acc[i] += c[i];
    }
  }
  return out;
}

}  // namespace moert::experts
