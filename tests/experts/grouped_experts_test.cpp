// The dispatch layout and the grouped expert FFN: exact grouping, contributions equal to
// the per-entry product, and the combined output bit-identical to the simple reference.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "experts/grouped/dispatch_layout.h"
#include "experts/grouped/grouped_expert_ffn.h"
#include "experts/placement/loopback.h"

namespace moert::experts {
namespace {

TEST(DispatchLayout, GroupsEntriesByAscendingExpertStably) {
  // T = 3, K = 2: token 0 -> {2, 0}, token 1 -> {2, 1}, token 2 -> {0, 2}.
  const std::vector<int32_t> ids{2, 0, 2, 1, 0, 2};
  const std::vector<float> w{0.5f, 0.25f, 1.0f, 2.0f, 3.0f, 4.0f};
  Result<ExpertDispatchLayout> layout = layout_from_routing(ids, w, 3, 2, 4);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EXPECT_EQ(layout->entry_row, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(layout->experts, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(layout->cu_expert_entries, (std::vector<int64_t>{0, 2, 3, 6}));
  EXPECT_EQ(layout->expert_entry_idx, (std::vector<int64_t>{1, 4, 3, 0, 2, 5}));
  // Per token, entries by ascending expert id (ties: ascending k).
  EXPECT_EQ(expert_order_of_tokens(ids, 3, 2), (std::vector<int64_t>{1, 0, 3, 2, 4, 5}));
  const std::vector<int32_t> tie{1, 1};
  EXPECT_EQ(expert_order_of_tokens(tie, 1, 2), (std::vector<int64_t>{0, 1}));
}

TEST(DispatchLayout, RejectsIdsOutsideTheExpertsAndWrongSizes) {
  const std::vector<float> w{1.0f, 1.0f};
  Result<ExpertDispatchLayout> bad = layout_from_routing(std::vector<int32_t>{0, 4}, w, 1, 2, 4);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("expert_ids[0, 1] = 4 is outside [0, 4)"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(layout_from_routing(std::vector<int32_t>{0, -1}, w, 1, 2, 4).is_ok());
  EXPECT_FALSE(layout_from_routing(std::vector<int32_t>{0}, w, 1, 2, 4).is_ok());
  Result<ExpertDispatchLayout> empty = layout_from_routing({}, {}, 0, 2, 4);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->experts.empty());
  EXPECT_EQ(empty->cu_expert_entries, (std::vector<int64_t>{0}));
}

// y = tanh(scale_e * x) with scales over orders of magnitude: the summation order matters.
void test_expert(int expert, std::span<const float> x, std::span<float> y) {
  const float scale = std::pow(10.0f, static_cast<float>(expert % 5) - 2.0f);
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::tanh(scale * x[i]) * (1.0f + 0.37f * static_cast<float>(expert));
}

TEST(GroupedExpertFfn, CombinedOutputIsBitIdenticalToTheReferenceForOddShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [tokens, top_k, hidden, experts] : {std::tuple{1, 1, 1, 1}, {5, 3, 7, 6}, {33, 2, 13, 9}, {0, 4, 5, 8}}) {
    RankTokens in;
    in.num_tokens = tokens;
    for (int t = 0; t < tokens; ++t) {
      for (int k = 0; k < top_k; ++k) {
        in.expert_ids.push_back(static_cast<int32_t>(rng() % static_cast<unsigned>(experts)));
        in.weights.push_back(std::abs(normal(rng)));
      }
    }
    for (int i = 0; i < tokens * hidden; ++i) in.hidden.push_back(normal(rng));
    Result<ExpertDispatchLayout> layout = layout_from_routing(in.expert_ids, in.weights, tokens, top_k, experts);
    ASSERT_TRUE(layout.is_ok());
    int calls = 0;
    auto group_fn = [&](int expert, const float* x, int64_t rows, float* y) {
      ++calls;
      for (int64_t r = 0; r < rows; ++r) {
        test_expert(expert, {x + r * hidden, static_cast<size_t>(hidden)}, {y + r * hidden, static_cast<size_t>(hidden)});
      }
    };
    std::vector<float> contributions(static_cast<size_t>(tokens * top_k * hidden), std::nanf(""));
    grouped_expert_ffn(*layout, in.hidden, hidden, group_fn, contributions);
    EXPECT_EQ(calls, static_cast<int>(layout->experts.size())) << "one call per expert with work";
    std::vector<float> y(static_cast<size_t>(hidden));
    for (int64_t c = 0; c < layout->num_entries(); ++c) {
      test_expert(layout->entry_expert[static_cast<size_t>(c)],
                  std::span<const float>(in.hidden).subspan(static_cast<size_t>(layout->entry_row[static_cast<size_t>(c)] * hidden),
                                                            static_cast<size_t>(hidden)),
                  y);
      for (int i = 0; i < hidden; ++i) {
        ASSERT_EQ(contributions[static_cast<size_t>(c * hidden + i)], layout->entry_weight[static_cast<size_t>(c)] * y[static_cast<size_t>(i)])
            << "entry " << c;
      }
    }
    std::vector<float> out(static_cast<size_t>(tokens * hidden), std::nanf(""));
    sum_rows_in_order(expert_order_of_tokens(in.expert_ids, tokens, top_k), top_k, contributions, hidden, out);
    const std::vector<float> reference = reference_moe_forward(in, top_k, hidden, test_expert);
    ASSERT_EQ(out.size(), reference.size());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], reference[i]) << "value " << i;
  }
}

// The batch form: calls take whole experts in layout order, at most kMaxEntriesPerExpertBatch
// entries each (one for a small layout, several for a long prefill, an oversized expert
// alone), and the contributions have the per-expert form's bits.
TEST(GroupedExpertFfn, BatchFormCoversEveryExpertOnceWithinTheEntryCap) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hidden = 3;
  // {tokens, top_k, experts, skew}: skew sends most entries to expert 0 (one oversized group).
  for (auto [tokens, top_k, experts, skew] :
       {std::tuple{7, 2, 5, false}, {1500, 4, 16, false}, {3000, 2, 8, true}, {2100, 4, 3, false}}) {
    RankTokens in;
    in.num_tokens = tokens;
    for (int t = 0; t < tokens; ++t) {
      for (int k = 0; k < top_k; ++k) {
        const bool to_zero = skew && k == 0 && t < 2500;
        in.expert_ids.push_back(to_zero ? 0 : static_cast<int32_t>(1 + rng() % static_cast<unsigned>(experts - 1)));
        in.weights.push_back(std::abs(normal(rng)));
      }
    }
    for (int i = 0; i < tokens * hidden; ++i) in.hidden.push_back(normal(rng));
    Result<ExpertDispatchLayout> layout = layout_from_routing(in.expert_ids, in.weights, tokens, top_k, experts);
    ASSERT_TRUE(layout.is_ok());
    std::vector<int> experts_seen;
    int calls = 0;
    auto batch_fn = [&](std::span<const ExpertGroup> groups) {
      ++calls;
      int64_t entries = 0;
      for (const ExpertGroup& g : groups) {
        experts_seen.push_back(g.expert);
        entries += g.num_rows;
        for (int64_t r = 0; r < g.num_rows; ++r) {
          test_expert(g.expert, {g.x + r * hidden, static_cast<size_t>(hidden)},
                      {g.y + r * hidden, static_cast<size_t>(hidden)});
        }
      }
      EXPECT_TRUE(entries <= kMaxEntriesPerExpertBatch || groups.size() == 1)
          << groups.size() << " experts with " << entries << " entries in one call";
    };
    const size_t size = static_cast<size_t>(tokens * top_k * hidden);
    std::vector<float> batched(size, std::nanf("")), per_expert(size, std::nanf(""));
    grouped_expert_ffn(*layout, in.hidden, hidden, ExpertBatchFn(batch_fn), batched);
    grouped_expert_ffn(
        *layout, in.hidden, hidden,
        ExpertGroupFn([&](int expert, const float* x, int64_t rows, float* y) {
          for (int64_t r = 0; r < rows; ++r) {
            test_expert(expert, {x + r * hidden, static_cast<size_t>(hidden)}, {y + r * hidden, static_cast<size_t>(hidden)});
          }
        }),
        per_expert);
    EXPECT_EQ(experts_seen, std::vector<int>(layout->experts.begin(), layout->experts.end()));
    EXPECT_EQ(calls == 1, layout->num_entries() <= kMaxEntriesPerExpertBatch) << calls << " calls";
    for (size_t i = 0; i < size; ++i) ASSERT_EQ(batched[i], per_expert[i]) << "value " << i << " of " << tokens;
  }
}

}  // namespace
}  // namespace moert::experts
