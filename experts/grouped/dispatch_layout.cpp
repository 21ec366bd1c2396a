#include "experts/grouped/dispatch_layout.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/check.h"

namespace moert::experts {

void group_entries_by_expert(ExpertDispatchLayout& layout, int num_experts) {
  std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
  for (int32_t e : layout.entry_expert) {
    MOERT_CHECK(e >= 0 && e < num_experts, "entry expert " << e << " outside [0, " << num_experts << ")");
    ++counts[static_cast<size_t>(e)];
  }
  layout.experts.clear();
  layout.cu_expert_entries.assign(1, 0);
  std::vector<int64_t> cursor(static_cast<size_t>(num_experts), -1);
  for (int e = 0; e < num_experts; ++e) {
    if (counts[static_cast<size_t>(e)] == 0) continue;
    cursor[static_cast<size_t>(e)] = layout.cu_expert_entries.back();
    layout.experts.push_back(e);
    layout.cu_expert_entries.push_back(layout.cu_expert_entries.back() + counts[static_cast<size_t>(e)]);
  }
  layout.expert_entry_idx.assign(layout.entry_expert.size(), -1);
  for (size_t c = 0; c < layout.entry_expert.size(); ++c) {
    layout.expert_entry_idx[static_cast<size_t>(cursor[static_cast<size_t>(layout.entry_expert[c])]++)] =
        static_cast<int64_t>(c);
  }
}

Result<ExpertDispatchLayout> layout_from_routing(std::span<const int32_t> expert_ids, std::span<const float> weights,
                                                 int64_t num_tokens, int top_k, int num_experts) {
  if (num_tokens < 0 || top_k < 1) {
    return invalid_argument("routing of T = " + std::to_string(num_tokens) + ", K = " + std::to_string(top_k) +
                            " must have T >= 0 and K >= 1");
  }
  const auto num_entries = static_cast<size_t>(num_tokens) * static_cast<size_t>(top_k);
  if (expert_ids.size() != num_entries || weights.size() != num_entries) {
    return invalid_argument("routing has " + std::to_string(expert_ids.size()) + " ids and " +
                            std::to_string(weights.size()) + " weights, expected [T, K] = " +
                            std::to_string(num_tokens) + " * " + std::to_string(top_k));
  }
  ExpertDispatchLayout layout;
  layout.entry_row.reserve(num_entries);
  layout.entry_expert.reserve(num_entries);
  layout.entry_weight.reserve(num_entries);
  for (size_t j = 0; j < num_entries; ++j) {
    if (expert_ids[j] < 0 || expert_ids[j] >= num_experts) {
      return invalid_argument("expert_ids[" + std::to_string(j / static_cast<size_t>(top_k)) + ", " +
                              std::to_string(j % static_cast<size_t>(top_k)) + "] = " + std::to_string(expert_ids[j]) +
                              " is outside [0, " + std::to_string(num_experts) + ")");
    }
    layout.add_entry(static_cast<int64_t>(j / static_cast<size_t>(top_k)), expert_ids[j], weights[j]);
  }
  group_entries_by_expert(layout, num_experts);
  return layout;
}

std::vector<int64_t> expert_order_of_tokens(std::span<const int32_t> expert_ids, int64_t num_tokens, int top_k) {
  const auto k_count = static_cast<size_t>(top_k);
  MOERT_CHECK(expert_ids.size() == static_cast<size_t>(num_tokens) * k_count,
              "expert_ids has " << expert_ids.size() << " values, expected [T, K] = " << num_tokens << " * " << top_k);
  std::vector<int64_t> order(expert_ids.size());
  for (size_t t = 0; t < static_cast<size_t>(num_tokens); ++t) {
    const auto row = std::span<int64_t>(order).subspan(t * k_count, k_count);
    std::iota(row.begin(), row.end(), static_cast<int64_t>(t * k_count));
    std::stable_sort(row.begin(), row.end(), [&](int64_t a, int64_t b) {
      return expert_ids[static_cast<size_t>(a)] < expert_ids[static_cast<size_t>(b)];
    });
  }
  return order;
}

void sum_rows_in_order(std::span<const int64_t> src_rows, int top_k, std::span<const float> rows, int hidden_size,
                       std::span<float> out) {
  const auto d = static_cast<size_t>(hidden_size);
  const auto k_count = static_cast<size_t>(top_k);
  const size_t num_tokens = src_rows.size() / k_count;
  MOERT_CHECK(src_rows.size() == num_tokens * k_count && out.size() == num_tokens * d,
              "src_rows has " << src_rows.size() << " values and out " << out.size() << ", expected [T, K] and [T, D]"
                              << " with K = " << top_k << ", D = " << hidden_size);
  const size_t num_rows = rows.size() / d;
  for (size_t t = 0; t < num_tokens; ++t) {
    float* acc = out.data() + t * d;
    std::fill_n(acc, d, 0.0f);
    for (size_t j = 0; j < k_count; ++j) {
      const int64_t src = src_rows[t * k_count + j];
      MOERT_CHECK(src >= 0 && static_cast<size_t>(src) < num_rows,
                  "src_rows[" << t << ", " << j << "] = " << src << " outside [0, " << num_rows << ")");
      const float* c = rows.data() + static_cast<size_t>(src) * d;
      for (size_t i = 0; i < d; ++i) acc[i] += c[i];
    }
  }
}

}  // namespace moert::experts
