// EPLB tests. Expected vectors: the deepseek-ai/EPLB README example (docs/moe.md §2.3)
// and outputs of a float32 pure-python transcription of eplb.py (torch is not installed
// here) that reproduces that README example exactly, both rows.
// Shapes: L layers, E experts, P replicas, U GPUs.
#include "experts/placement/eplb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace moert::experts {
namespace {

const std::vector<float> kReadmeWeights = {
    90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86,       // layer 0
    20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27};  // layer 1

std::vector<int32_t> row(const std::vector<int32_t>& v, size_t r, size_t width) {
  return {v.begin() + static_cast<std::ptrdiff_t>(r * width), v.begin() + static_cast<std::ptrdiff_t>((r + 1) * width)};
}

TEST(BalancedPacking, HandCaseDescendingToLightestPack) {
  // Order 0(5) 2(4) 4(3) 5(3) 3(2) 1(1); pack weights end at [9, 9].
  const std::vector<float> w = {5, 1, 4, 2, 3, 3};
  const Packing p = balanced_packing(w, 2);
  EXPECT_EQ(p.pack_index, (std::vector<int32_t>{0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(p.rank_in_pack, (std::vector<int32_t>{0, 2, 0, 2, 1, 1}));
}

TEST(BalancedPacking, TiesGoToLowestPackAndLowestItemFirst) {
  const std::vector<float> w = {1, 1, 1, 1};
  const Packing p = balanced_packing(w, 2);
  EXPECT_EQ(p.pack_index, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(p.rank_in_pack, (std::vector<int32_t>{0, 0, 1, 1}));
}

TEST(BalancedPacking, OneItemPerPackIsIdentity) {
  const std::vector<float> w = {1, 3, 2};
  const Packing p = balanced_packing(w, 3);
  EXPECT_EQ(p.pack_index, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.rank_in_pack, (std::vector<int32_t>{0, 0, 0}));
}

TEST(BalancedPacking, EveryPackGetsExactlyNOverM) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(0.0f, 100.0f);
  std::vector<float> w(24);
  for (float& x : w) x = dist(rng);
  const Packing p = balanced_packing(w, 4);
  std::vector<std::set<int32_t>> ranks(4);
  for (size_t i = 0; i < w.size(); ++i) ranks[static_cast<size_t>(p.pack_index[i])].insert(p.rank_in_pack[i]);
  for (const auto& r : ranks) EXPECT_EQ(r, (std::set<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ReplicateExperts, ExtraSlotToLargestLoadPerReplica) {
  // Slot 3: loads 10, 6, 3 -> expert 0; slot 4: loads 5, 6, 3 -> expert 1.
  const std::vector<float> w = {10, 6, 3};
  const Replication r = replicate_experts(w, 5);
  EXPECT_EQ(r.phy2log, (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(r.replica_rank, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(r.logcnt, (std::vector<int32_t>{2, 2, 1}));
}

TEST(ReplicateExperts, TiesGoToLowestId) {
  // Slot 3 -> expert 1 (8); slot 4: loads 4, 4, 4 -> expert 0.
  const std::vector<float> w = {4, 8, 4};
  const Replication r = replicate_experts(w, 5);
  EXPECT_EQ(r.phy2log, (std::vector<int32_t>{0, 1, 2, 1, 0}));
  EXPECT_EQ(r.replica_rank, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(r.logcnt, (std::vector<int32_t>{2, 2, 1}));
}

TEST(RebalanceExperts, ReadmeExampleHierarchical) {
  const EplbConfig config{.num_replicas = 16, .num_groups = 4, .num_nodes = 2, .num_gpus = 8};
  ASSERT_TRUE(eplb_is_hierarchical(config));
  Result<EplbPlan> plan = rebalance_experts(kReadmeWeights, 2, 12, config);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_replicas, 16);
  EXPECT_EQ(plan->max_replicas, 2);
  EXPECT_EQ(row(plan->phy2log, 0, 16), (std::vector<int32_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1}));
  // The README's second row (the algorithm and the README agree on it).
  EXPECT_EQ(row(plan->phy2log, 1, 16), (std::vector<int32_t>{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}));
  EXPECT_EQ(row(plan->logcnt, 0, 12), (std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_EQ(row(plan->logcnt, 1, 12), (std::vector<int32_t>{1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1}));
  EXPECT_EQ(row(plan->log2phy, 0, 24), (std::vector<int32_t>{12, -1, 15, 13, 11, -1, 6, -1, 7, 5, 0, 2,
                                                              1, -1, 3, -1, 4, -1, 9, -1, 8, 10, 14, -1}));
  EXPECT_EQ(row(plan->log2phy, 1, 24), (std::vector<int32_t>{13, -1, 15, 11, 8, -1, 14, -1, 9, -1, 10, 12,
                                                              2, 4, 0, -1, 6, 3, 7, -1, 1, -1, 5, -1}));
}

TEST(RebalanceExperts, ReadmeWeightsGlobalPolicy) {
  // num_groups % num_nodes != 0 -> the global policy (groups = nodes = 1).
  const EplbConfig config{.num_replicas = 16, .num_groups = 3, .num_nodes = 2, .num_gpus = 8};
  ASSERT_FALSE(eplb_is_hierarchical(config));
  Result<EplbPlan> plan = rebalance_experts(kReadmeWeights, 2, 12, config);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(row(plan->phy2log, 0, 16), (std::vector<int32_t>{10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1}));
  // Both replicas of expert 8 land on GPU 6 (slots 12, 13).
  EXPECT_EQ(row(plan->phy2log, 1, 16), (std::vector<int32_t>{1, 10, 2, 4, 5, 11, 5, 0, 6, 7, 6, 3, 8, 8, 9, 7}));
  EXPECT_EQ(row(plan->log2phy, 1, 24), (std::vector<int32_t>{7, -1, 0, -1, 2, -1, 11, -1, 3, -1, 4, 6,
                                                              8, 10, 15, 9, 12, 13, 14, -1, 1, -1, 5, -1}));
}

// Fractional float32 weights (and a tie in layer 2), compared with the python transcription.
const std::vector<float> kFractionalWeights = {
    16.1916389f, 7.54245853f, 32.5467224f, 3.62181425f, 26.7940998f, 18.2844467f, 2.89994621f, 25.3717861f,
    1.87478292f, 21.6822834f, 3.49277115f, 4.53565073f, 21.2259598f, 41.3426056f, 6.19009829f, 11.1619482f,
    31.3716602f, 47.3854485f, 28.8551483f, 19.8340244f, 48.8127556f, 2.32913399f, 42.9234238f, 14.480464f,
    7.21275425f, 5.88961172f, 15.4240913f, 40.8063164f, 9.03631878f, 29.0800076f, 31.945673f, 18.6198769f,
    27.3872242f, 3.13944864f, 2.98005843f, 21.3796158f, 34.0200005f, 21.3796158f, 15.7073584f, 29.2780933f,
    22.6592197f, 14.9883499f, 39.7189751f, 34.9497223f, 12.2048254f, 28.7211857f, 26.2598248f, 43.7568741f};

TEST(RebalanceExperts, FractionalWeightsMatchReference) {
  Result<EplbPlan> hier = rebalance_experts(kFractionalWeights, 3, 16,
                                            {.num_replicas = 24, .num_groups = 4, .num_nodes = 2, .num_gpus = 4});
  ASSERT_TRUE(hier.is_ok()) << hier.status().to_string();
  EXPECT_EQ(hier->max_replicas, 3);
  EXPECT_EQ(row(hier->phy2log, 0, 24),
            (std::vector<int32_t>{13, 13, 9, 12, 11, 8, 13, 15, 9, 12, 14, 10, 2, 0, 7, 5, 5, 6, 2, 4, 4, 7, 1, 3}));
  EXPECT_EQ(row(hier->phy2log, 1, 24),
            (std::vector<int32_t>{1, 11, 3, 10, 2, 9, 1, 11, 0, 0, 2, 8, 4, 6, 15, 13, 7, 5, 4, 6, 14, 14, 13, 12}));
  EXPECT_EQ(row(hier->phy2log, 2, 24),
            (std::vector<int32_t>{3, 11, 11, 0, 8, 2, 10, 10, 9, 0, 8, 1, 14, 5, 4, 7, 13, 12, 15, 15, 4, 6, 7, 13}));
  EXPECT_EQ(row(hier->logcnt, 0, 16), (std::vector<int32_t>{1, 1, 2, 1, 2, 2, 1, 2, 1, 2, 1, 1, 2, 3, 1, 1}));

  Result<EplbPlan> global = rebalance_experts(kFractionalWeights, 3, 16,
                                              {.num_replicas = 24, .num_groups = 4, .num_nodes = 3, .num_gpus = 6});
  ASSERT_TRUE(global.is_ok()) << global.status().to_string();
  EXPECT_EQ(row(global->phy2log, 0, 24),
            (std::vector<int32_t>{2, 15, 5, 3, 2, 9, 12, 6, 0, 7, 1, 11, 13, 4, 12, 8, 13, 4, 5, 14, 13, 7, 9, 10}));
  EXPECT_EQ(row(global->phy2log, 1, 24),
            (std::vector<int32_t>{4, 14, 0, 2, 4, 14, 0, 2, 1, 3, 7, 5, 1, 15, 13, 8, 6, 11, 10, 9, 6, 11, 13, 12}));
  EXPECT_EQ(row(global->phy2log, 2, 24),
            (std::vector<int32_t>{8, 6, 9, 14, 15, 4, 13, 0, 15, 4, 13, 14, 3, 11, 7, 1, 5, 11, 7, 2, 10, 10, 0, 12}));
  EXPECT_EQ(row(global->logcnt, 2, 16), (std::vector<int32_t>{2, 1, 1, 1, 2, 1, 1, 2, 1, 1, 2, 2, 1, 2, 2, 2}));
}

TEST(RebalanceExperts, InvariantsOnRandomLoads) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> dist(0, 1000);
  const int num_layers = 4, num_experts = 32;
  std::vector<float> w(static_cast<size_t>(num_layers * num_experts));
  for (float& x : w) x = static_cast<float>(dist(rng));
  const EplbConfig config{.num_replicas = 48, .num_groups = 8, .num_nodes = 2, .num_gpus = 8};
  Result<EplbPlan> plan = rebalance_experts(w, num_layers, num_experts, config);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const int x = plan->max_replicas;
  for (int l = 0; l < num_layers; ++l) {
    int total = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int cnt = plan->logcnt[static_cast<size_t>(l * num_experts + e)];
      EXPECT_GE(cnt, 1);
      total += cnt;
      for (int i = 0; i < x; ++i) {
        const int p = plan->log2phy[static_cast<size_t>((l * num_experts + e) * x + i)];
        if (i >= cnt) {
          EXPECT_EQ(p, -1);
          continue;
        }
        ASSERT_GE(p, 0);
        EXPECT_EQ(plan->phy2log[static_cast<size_t>(l * 48 + p)], e);
        // Hierarchical: every replica stays on the node of the expert's group
        // (slots 0..23 on node 0, 24..47 on node 1).
        const int node_of_first = plan->log2phy[static_cast<size_t>((l * num_experts + e) * x)] / 24;
        EXPECT_EQ(p / 24, node_of_first) << "layer " << l << " expert " << e;
      }
    }
    EXPECT_EQ(total, 48);
  }
}

TEST(RebalanceExperts, InvalidConfigsNameTheValue) {
  const std::vector<float> w(12, 1.0f);
  auto message = [&](const EplbConfig& c) {
    Result<EplbPlan> r = rebalance_experts(w, 1, 12, c);
    EXPECT_FALSE(r.is_ok());
    return r.status().message();
  };
  EXPECT_EQ(message({.num_replicas = 18, .num_groups = 4, .num_nodes = 2, .num_gpus = 8}),
            "num_replicas = 18 must be a multiple of num_gpus = 8");
  EXPECT_EQ(message({.num_replicas = 8, .num_groups = 4, .num_nodes = 2, .num_gpus = 8}),
            "num_replicas = 8 must be >= num_experts = 12");
  EXPECT_EQ(message({.num_replicas = 16, .num_groups = 4, .num_nodes = 3, .num_gpus = 8}),
            "num_gpus = 8 must be a multiple of num_nodes = 3");
  EXPECT_EQ(message({.num_replicas = 16, .num_groups = 8, .num_nodes = 2, .num_gpus = 8}),
            "num_experts = 12 must be a multiple of num_groups = 8");
  std::vector<float> bad = kReadmeWeights;
  bad[13] = -1.0f;
  Result<EplbPlan> r = rebalance_experts(bad, 2, 12, {.num_replicas = 16, .num_groups = 4, .num_nodes = 2, .num_gpus = 8});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "weights[1, 1] = -1.000000 must be finite and >= 0");
}

TEST(PlacementFromEplb, ReadmeSlotsPerGpu) {
  Result<EplbPlan> plan =
      rebalance_experts(kReadmeWeights, 2, 12, {.num_replicas = 16, .num_groups = 4, .num_nodes = 2, .num_gpus = 8});
  ASSERT_TRUE(plan.is_ok());
  Result<ExpertPlacement> placement = placement_from_eplb(*plan, 8);
  ASSERT_TRUE(placement.is_ok()) << placement.status().to_string();
  EXPECT_EQ(placement->num_layers(), 2);
  EXPECT_EQ(placement->num_ranks(), 8);
  const LayerPlacement& l0 = placement->layer(0);
  EXPECT_EQ(std::vector<int32_t>(l0.rank_experts(0).begin(), l0.rank_experts(0).end()), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(std::vector<int32_t>(l0.rank_experts(7).begin(), l0.rank_experts(7).end()), (std::vector<int32_t>{11, 1}));
  EXPECT_EQ(l0.slot_to_expert(), row(plan->phy2log, 0, 16));  // slot ids equal EPLB's
  // log2phy (without padding) equals the placement's replicas, in ascending slot order.
  for (int e = 0; e < 12; ++e) {
    std::vector<int32_t> expected;
    for (int i = 0; i < plan->max_replicas; ++i) {
      const int32_t p = plan->log2phy[static_cast<size_t>(e * plan->max_replicas + i)];
      if (p >= 0) expected.push_back(p);
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(std::vector<int32_t>(l0.replicas(e).begin(), l0.replicas(e).end()), expected) << "expert " << e;
  }
  EXPECT_FALSE(placement_from_eplb(*plan, 3).is_ok());
}

}  // namespace
}  // namespace moert::experts
