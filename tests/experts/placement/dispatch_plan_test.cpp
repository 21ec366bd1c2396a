// Dispatch / combine plan tests: a hand case with exact indices, a DeepEP-style payload
// test (each row carries its (source rank, token index)), bit-identity of the combined
// output for R = 1..4 and placements with replicas, and MaxVio from the plan's counts.
// Shapes: T tokens, K experts per token, D hidden size, R ranks, E experts.
#include "experts/placement/dispatch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "experts/placement/eplb.h"
#include "experts/placement/loopback.h"
#include "experts/router.h"

namespace moert::experts {
namespace {

LayerPlacement layer_of(Result<ExpertPlacement> p) {
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p->layer(0);
}

TEST(DispatchPlan, HandCaseSendsEachTokenOncePerRank) {
  // E = 4 on R = 2: rank 0 holds experts 0 1, rank 1 holds 2 3.
  const LayerPlacement placement = layer_of(contiguous_placement(4, 2));
  const std::vector<int32_t> ids = {0, 1,   // t0 -> rank 0 only
                                    1, 2,   // t1 -> both
                                    3, 2};  // t2 -> rank 1 only
  const std::vector<float> w = {0.5f, 0.25f, 0.75f, 0.125f, 0.375f, 0.625f};
  Result<DispatchPlan> plan = build_dispatch_plan(placement, 0, ids, w, 3, 2);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->send_row_counts, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(plan->cu_send_rows, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plan->send_token_idx, (std::vector<int64_t>{0, 1, 1, 2}));
  EXPECT_EQ(plan->send_expert_ids, (std::vector<int32_t>{0, 1, 1, -1, -1, 2, 3, 2}));
  EXPECT_EQ(plan->send_weights, (std::vector<float>{0.5f, 0.25f, 0.75f, 0.0f, 0.0f, 0.125f, 0.375f, 0.625f}));
  EXPECT_EQ(plan->return_row_counts, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(plan->cu_return_rows, (std::vector<int64_t>{0, 3, 6}));
  // Returned rows: 0 (t0,e0) 1 (t0,e1) 2 (t1,e1) | 3 (t1,e2) 4 (t2,e3) 5 (t2,e2).
  // Token 2 sums expert 2 (row 5) before expert 3 (row 4).
  EXPECT_EQ(plan->combine_src_rows, (std::vector<int64_t>{0, 1, 2, 3, 5, 4}));

  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [T=3, D=2]
  std::vector<float> send(8);
  gather_send_rows(*plan, x, 2, send);
  EXPECT_EQ(send, (std::vector<float>{1, 2, 3, 4, 3, 4, 5, 6}));
}

TEST(DispatchPlan, EmptyBatchStillHasCounts) {
  const LayerPlacement placement = layer_of(contiguous_placement(4, 2));
  Result<DispatchPlan> plan = build_dispatch_plan(placement, 1, {}, {}, 0, 2);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->send_row_counts, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(plan->cu_return_rows, (std::vector<int64_t>{0, 0, 0}));
}

TEST(DispatchPlan, RejectsBadInputWithTheValue) {
  const LayerPlacement placement = layer_of(contiguous_placement(4, 2));
  const std::vector<int32_t> ids = {0, 1, 9, 2};
  const std::vector<float> w(4, 0.5f);
  EXPECT_EQ(build_dispatch_plan(placement, 0, ids, w, 2, 2).status().message(),
            "expert_ids[1, 0] = 9 must be in [0, 4)");
  EXPECT_EQ(build_dispatch_plan(placement, 2, ids, w, 2, 2).status().message(), "rank = 2 must be in [0, 2)");
  EXPECT_EQ(build_dispatch_plan(placement, 0, ids, w, 3, 2).status().message(),
            "expert_ids has 4 and weights 4 values, expected [T, K] = 3 * 2");
  // The receiver refuses an expert it does not host.
  const std::vector<int64_t> counts = {1, 0};
  const std::vector<int32_t> recv_ids = {2, -1};
  const std::vector<float> recv_w = {0.5f, 0.0f};
  EXPECT_EQ(build_expert_compute_plan(placement, 0, counts, recv_ids, recv_w, 2).status().message(),
            "recv_expert_ids[0, 0] = 2 (from rank 0) is not an expert of rank 0 and not -1");
}

// Distinct top-k ids per token, drawn uniformly; weights uniform in (0, 1).
RankTokens random_tokens(std::mt19937& rng, int64_t num_tokens, int num_experts, int top_k, int hidden_size) {
  RankTokens tokens;
  tokens.num_tokens = num_tokens;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<int32_t> all(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) all[static_cast<size_t>(e)] = e;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int k = 0; k < top_k; ++k) {
      tokens.expert_ids.push_back(all[static_cast<size_t>(k)]);
      tokens.weights.push_back(unit(rng));
    }
  }
  tokens.hidden.resize(static_cast<size_t>(num_tokens * hidden_size));
  for (float& v : tokens.hidden) v = unit(rng) * 2.0f - 1.0f;
  return tokens;
}

TEST(DispatchPlan, DeepEpStylePayloadReachesExactlyTheExpectedRanks) {
  // E = 6 on R = 3 with replicas: expert 0 on ranks 0 and 1, expert 1 on ranks 0 and 2.
  Result<LayerPlacement> placement = LayerPlacement::create(6, {{0, 1, 2}, {3, 4, 0}, {5, 1}});
  ASSERT_TRUE(placement.is_ok());
  const int num_ranks = 3, top_k = 2, hidden = 4;
  const std::vector<int64_t> num_tokens = {5, 0, 7};  // rank 1 has no tokens this step
  std::mt19937 rng(5);
  std::vector<RankTokens> inputs;
  std::vector<DispatchPlan> plans;
  std::vector<std::vector<float>> send_x(3);
  std::vector<std::vector<int32_t>> send_ids(3);
  std::vector<std::vector<int64_t>> cu_send(3), send_counts(3);
  for (int s = 0; s < num_ranks; ++s) {
    RankTokens in = random_tokens(rng, num_tokens[static_cast<size_t>(s)], 6, top_k, hidden);
    // Payload: (source rank, token index, 0, 0).
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      in.hidden[static_cast<size_t>(t * hidden)] = static_cast<float>(s);
      in.hidden[static_cast<size_t>(t * hidden + 1)] = static_cast<float>(t);
    }
    Result<DispatchPlan> plan = build_dispatch_plan(*placement, s, in.expert_ids, in.weights, in.num_tokens, top_k);
    ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
    send_x[static_cast<size_t>(s)].resize(static_cast<size_t>(plan->num_send_rows() * hidden));
    gather_send_rows(*plan, in.hidden, hidden, send_x[static_cast<size_t>(s)]);
    send_ids[static_cast<size_t>(s)] = plan->send_expert_ids;
    cu_send[static_cast<size_t>(s)] = plan->cu_send_rows;
    send_counts[static_cast<size_t>(s)] = plan->send_row_counts;
    plans.push_back(std::move(plan).value());
    inputs.push_back(std::move(in));
  }
  const auto recv_counts = loopback_exchange_counts(send_counts);
  const auto recv_x = loopback_all_to_all_v(send_x, cu_send, hidden);
  const auto recv_ids = loopback_all_to_all_v(send_ids, cu_send, top_k);

  for (int d = 0; d < num_ranks; ++d) {
    // Expected rows, built from the routing rule alone: (s, t) once per destination,
    // sources ascending then tokens ascending, and its K-wide id row.
    std::vector<std::pair<int, int64_t>> expected_rows;
    std::vector<int32_t> expected_ids;
    std::vector<int64_t> expected_counts(3, 0);
    int64_t expected_contribs = 0;
    for (int s = 0; s < num_ranks; ++s) {
      const RankTokens& in = inputs[static_cast<size_t>(s)];
      for (int64_t t = 0; t < in.num_tokens; ++t) {
        std::vector<int32_t> id_row(top_k, -1);
        bool any = false;
        for (int k = 0; k < top_k; ++k) {
          const int32_t e = in.expert_ids[static_cast<size_t>(t * top_k + k)];
          const auto replicas = placement->replicas(e);
          const int32_t slot = replicas[static_cast<size_t>((s + t) % static_cast<int64_t>(replicas.size()))];
          if (placement->slot_rank(slot) == d) {
            id_row[static_cast<size_t>(k)] = e;
            any = true;
            ++expected_contribs;
          }
        }
        if (!any) continue;
        expected_rows.emplace_back(s, t);
        expected_ids.insert(expected_ids.end(), id_row.begin(), id_row.end());
        ++expected_counts[static_cast<size_t>(s)];
      }
    }
    const auto du = static_cast<size_t>(d);
    EXPECT_EQ(recv_counts[du], expected_counts) << "destination " << d;
    ASSERT_EQ(recv_x[du].size(), expected_rows.size() * hidden) << "destination " << d;
    for (size_t i = 0; i < expected_rows.size(); ++i) {
      EXPECT_EQ(recv_x[du][i * hidden], static_cast<float>(expected_rows[i].first)) << "dest " << d << " row " << i;
      EXPECT_EQ(recv_x[du][i * hidden + 1], static_cast<float>(expected_rows[i].second)) << "dest " << d << " row " << i;
    }
    EXPECT_EQ(recv_ids[du], expected_ids) << "destination " << d;

    // The receiver's view: its return counts mirror what each source expects back.
    std::vector<float> recv_w(recv_ids[du].size(), 1.0f);
    Result<ExpertComputePlan> compute =
        build_expert_compute_plan(*placement, d, recv_counts[du], recv_ids[du], recv_w, top_k);
    ASSERT_TRUE(compute.is_ok()) << compute.status().to_string();
    EXPECT_EQ(compute->num_contribs(), expected_contribs);
    for (int s = 0; s < num_ranks; ++s) {
      EXPECT_EQ(compute->return_row_counts[static_cast<size_t>(s)], plans[static_cast<size_t>(s)].return_row_counts[du])
          << "source " << s << " destination " << d;
    }
    for (int32_t e : compute->layout.experts) EXPECT_TRUE(placement->rank_hosts(d, e));
    EXPECT_TRUE(std::is_sorted(compute->layout.experts.begin(), compute->layout.experts.end()));
  }
}

// A per-expert function with real rounding: y = tanh(W_e x) * scale_e, scales spread over
// orders of magnitude so the summation order matters.
struct TestExperts {
  int num_experts, hidden;
  std::vector<float> w;      // [E, D, D]
  std::vector<float> scale;  // [E]
  TestExperts(int e, int d, uint32_t seed) : num_experts(e), hidden(d) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    w.resize(static_cast<size_t>(e * d * d));
    for (float& v : w) v = normal(rng);
    for (int i = 0; i < e; ++i) scale.push_back(std::ldexp(1.0f + 0.37f * static_cast<float>(i), (i % 5) * 6 - 12));
  }
  ExpertFn fn() const {
    return [this](int e, std::span<const float> x, std::span<float> y) {
      for (int i = 0; i < hidden; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < hidden; ++j) acc += w[static_cast<size_t>((e * hidden + i) * hidden + j)] * x[static_cast<size_t>(j)];
        y[static_cast<size_t>(i)] = std::tanh(acc) * scale[static_cast<size_t>(e)];
      }
    };
  }
};

// Splits all tokens into R uneven contiguous chunks: rank r gets tokens
// [cut(r), cut(r+1)) with cut(r) = T r (r+1) / (R (R+1)), growing with r.
std::vector<RankTokens> split(const RankTokens& all, int num_ranks, int top_k, int hidden) {
  std::vector<RankTokens> out(static_cast<size_t>(num_ranks));
  auto cut = [&](int64_t r) { return all.num_tokens * r * (r + 1) / (num_ranks * (num_ranks + 1)); };
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t begin = cut(r), end = cut(r + 1);
    RankTokens& o = out[static_cast<size_t>(r)];
    o.num_tokens = end - begin;
    o.expert_ids.assign(all.expert_ids.begin() + begin * top_k, all.expert_ids.begin() + end * top_k);
    o.weights.assign(all.weights.begin() + begin * top_k, all.weights.begin() + end * top_k);
    o.hidden.assign(all.hidden.begin() + begin * hidden, all.hidden.begin() + end * hidden);
  }
  return out;
}

TEST(Loopback, CombineIsBitIdenticalForAnyRanksAndPlacement) {
  const int num_experts = 16, top_k = 4, hidden = 8;
  const TestExperts experts(num_experts, hidden, 17);
  std::mt19937 rng(23);
  const RankTokens all = random_tokens(rng, 96, num_experts, top_k, hidden);
  const std::vector<float> reference = reference_moe_forward(all, top_k, hidden, experts.fn());

  // The test means something: summing in k order differs from ascending expert order.
  {
    bool differs = false;
    std::vector<float> y(hidden);
    for (int64_t t = 0; t < all.num_tokens && !differs; ++t) {
      std::vector<float> acc(hidden, 0.0f);
      for (int k = 0; k < top_k; ++k) {
        const size_t j = static_cast<size_t>(t * top_k + k);
        experts.fn()(all.expert_ids[j], std::span<const float>(all.hidden).subspan(static_cast<size_t>(t * hidden), hidden), y);
        for (int i = 0; i < hidden; ++i) {
          const float c = all.weights[j] * y[static_cast<size_t>(i)];
          acc[static_cast<size_t>(i)] += c;
        }
      }
      differs = std::memcmp(acc.data(), reference.data() + t * hidden, sizeof(float) * hidden) != 0;
    }
    EXPECT_TRUE(differs) << "k-order and expert-order sums agree everywhere: the test is too weak";
  }

  std::vector<float> weights_for_eplb(num_experts);
  for (int e = 0; e < num_experts; ++e) weights_for_eplb[static_cast<size_t>(e)] = static_cast<float>((e * 37) % 11 + 1);

  for (int num_ranks = 1; num_ranks <= 4; ++num_ranks) {
    std::vector<std::pair<std::string, LayerPlacement>> placements;
    placements.emplace_back("contiguous", layer_of(contiguous_placement(num_experts, num_ranks)));
    // Replicas: every expert once, contiguous, plus experts 0..R+1 again on rank (e+1) % R.
    {
      std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
      const LayerPlacement base = layer_of(contiguous_placement(num_experts, num_ranks));
      for (int r = 0; r < num_ranks; ++r) {
        for (int32_t e : base.rank_experts(r)) rank_experts[static_cast<size_t>(r)].push_back(e);
      }
      for (int e = 0; e < num_ranks + 2; ++e) rank_experts[static_cast<size_t>((e + 1) % num_ranks)].push_back(e);
      Result<LayerPlacement> p = LayerPlacement::create(num_experts, rank_experts);
      ASSERT_TRUE(p.is_ok());
      placements.emplace_back("replicated", std::move(p).value());
    }
    // EPLB: 24 slots (divisible by 1..4), global policy.
    {
      Result<EplbPlan> plan = rebalance_experts(weights_for_eplb, 1, num_experts,
                                                {.num_replicas = 24, .num_groups = 1, .num_nodes = 1, .num_gpus = num_ranks});
      ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
      Result<ExpertPlacement> p = placement_from_eplb(*plan, num_ranks);
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      placements.emplace_back("eplb", p->layer(0));
    }
    const std::vector<RankTokens> inputs = split(all, num_ranks, top_k, hidden);
    for (const auto& [name, placement] : placements) {
      Result<LoopbackResult> result = loopback_moe_forward(placement, inputs, top_k, hidden, experts.fn());
      ASSERT_TRUE(result.is_ok()) << result.status().to_string();
      std::vector<float> gathered;
      for (const auto& out : result->outputs) gathered.insert(gathered.end(), out.begin(), out.end());
      ASSERT_EQ(gathered.size(), reference.size());
      EXPECT_EQ(std::memcmp(gathered.data(), reference.data(), sizeof(float) * reference.size()), 0)
          << "R = " << num_ranks << ", placement " << name;
      int64_t contribs = 0;
      for (int64_t c : result->rank_contribs) contribs += c;
      EXPECT_EQ(contribs, all.num_tokens * top_k);
    }
  }
}

TEST(Loopback, MaxVioFromCountsImprovesWithEplb) {
  // README layer 0 loads: expert e receives exactly load[e] tokens (K = 1) spread over
  // 8 ranks; compare the expert load per rank of a contiguous placement and of EPLB's.
  const std::vector<float> load = {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86};
  const int num_experts = 12, num_ranks = 8, hidden = 1;
  std::vector<int32_t> ids;
  for (int e = 0; e < num_experts; ++e) ids.insert(ids.end(), static_cast<size_t>(load[static_cast<size_t>(e)]), e);
  std::mt19937 rng(29);
  std::shuffle(ids.begin(), ids.end(), rng);
  RankTokens all;
  all.num_tokens = static_cast<int64_t>(ids.size());  // 1033
  all.expert_ids = ids;
  all.weights.assign(ids.size(), 1.0f);
  all.hidden.assign(ids.size(), 1.0f);
  const std::vector<RankTokens> inputs = split(all, num_ranks, 1, hidden);
  const ExpertFn identity = [](int, std::span<const float> x, std::span<float> y) { y[0] = x[0]; };

  auto rank_loads = [&](const LayerPlacement& placement) {
    Result<LoopbackResult> r = loopback_moe_forward(placement, inputs, 1, hidden, identity);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    // The same counts from the source plans: sum over sources of return_row_counts.
    std::vector<int64_t> from_plans(num_ranks, 0);
    for (int s = 0; s < num_ranks; ++s) {
      const RankTokens& in = inputs[static_cast<size_t>(s)];
      Result<DispatchPlan> plan = build_dispatch_plan(placement, s, in.expert_ids, in.weights, in.num_tokens, 1);
      for (int d = 0; d < num_ranks; ++d) from_plans[static_cast<size_t>(d)] += plan->return_row_counts[static_cast<size_t>(d)];
    }
    EXPECT_EQ(from_plans, r->rank_contribs);
    return r->rank_contribs;
  };

  // Contiguous: ranks hold {0,1} {2,3} {4,5} {6,7} {8} {9} {10} {11}.
  const std::vector<int64_t> contiguous = rank_loads(layer_of(contiguous_placement(num_experts, num_ranks)));
  EXPECT_EQ(contiguous, (std::vector<int64_t>{222, 101, 269, 43, 73, 56, 183, 86}));
  const double mean = 1033.0 / 8;  // the perfectly balanced load
  EXPECT_DOUBLE_EQ(max_violation(contiguous), (269.0 - mean) / mean);  // 1.083

  Result<EplbPlan> plan =
      rebalance_experts(load, 1, num_experts, {.num_replicas = 16, .num_groups = 4, .num_nodes = 2, .num_gpus = 8});
  ASSERT_TRUE(plan.is_ok());
  Result<ExpertPlacement> eplb_placement = placement_from_eplb(*plan, num_ranks);
  ASSERT_TRUE(eplb_placement.is_ok());
  const std::vector<int64_t> balanced = rank_loads(eplb_placement->layer(0));
  int64_t total = 0;
  for (int64_t c : balanced) total += c;
  EXPECT_EQ(total, 1033);
  // EPLB predicts per-GPU loads 121.5 86.5 125 113 147.5 131.5 156 152 (max 156: MaxVio
  // 0.208); round-robin over replicas splits each replicated expert within a token or two.
  EXPECT_NEAR(max_violation(balanced), (156.0 - mean) / mean, 2.0 / mean);
  EXPECT_LT(max_violation(balanced), max_violation(contiguous) / 4);
}

}  // namespace
}  // namespace moert::experts
