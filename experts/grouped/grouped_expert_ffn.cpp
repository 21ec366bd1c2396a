#include "experts/grouped/grouped_expert_ffn.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/reused_buffer.h"

namespace moert::experts {

void grouped_expert_ffn(const ExpertDispatchLayout& layout, std::span<const float> x, int hidden_size,
                        const ExpertBatchFn& batch_fn, std::span<float> contributions) {
  const auto d = static_cast<size_t>(hidden_size);
  const auto num_entries = static_cast<size_t>(layout.num_entries());
  const size_t num_x_rows = x.size() / d;
  MOERT_CHECK(x.size() == num_x_rows * d, "x has " << x.size() << " values, not a multiple of D = " << hidden_size);
  MOERT_CHECK(contributions.size() == num_entries * d,
              "contributions has " << contributions.size() << " values, expected [N, D] = " << num_entries << " * "
                                   << hidden_size);
  MOERT_CHECK(layout.expert_entry_idx.size() == num_entries && layout.cu_expert_entries.size() == layout.experts.size() + 1,
              "layout is not grouped (call group_entries_by_expert)");
  thread_local ReusedBuffer rows_buffer, y_buffer;
  std::vector<ExpertGroup> groups;
  const size_t num_experts = layout.experts.size();
  for (size_t first = 0; first < num_experts;) {
    // Experts [first, last) with entries [begin, end): at least one expert, at most
    // kMaxEntriesPerExpertBatch entries otherwise.
    const int64_t begin = layout.cu_expert_entries[first];
    size_t last = first + 1;
    while (last < num_experts && layout.cu_expert_entries[last + 1] - begin <= kMaxEntriesPerExpertBatch) ++last;
    const int64_t end = layout.cu_expert_entries[last];
    const auto n = static_cast<size_t>(end - begin);
    float* rows = rows_buffer.get(n * d);
    float* y = y_buffer.get(n * d);
    groups.clear();
    for (size_t a = first; a < last; ++a) {
      const int64_t a_begin = layout.cu_expert_entries[a], a_end = layout.cu_expert_entries[a + 1];
      const auto offset = static_cast<size_t>(a_begin - begin) * d;
      if (a_end == a_begin) {
        groups.push_back({layout.experts[a], rows + offset, 0, y + offset});
        continue;
      }
      auto row_of = [&](int64_t entry) {
        const auto c = static_cast<size_t>(layout.expert_entry_idx[static_cast<size_t>(entry)]);
        const int64_t row = layout.entry_row[c];
        MOERT_CHECK(row >= 0 && static_cast<size_t>(row) < num_x_rows,
                    "entry " << c << " reads row " << row << " outside [0, " << num_x_rows << ")");
        return static_cast<size_t>(row);
      };
      // An expert whose rows are consecutive rows of x reads them in place (every expert of
      // a single token: one x for all of them, quantized once by apply_linears); else a copy.
      const size_t first_row = row_of(a_begin);
      bool in_place = true;
      for (int64_t e = a_begin + 1; e < a_end && in_place; ++e) {
        in_place = row_of(e) == first_row + static_cast<size_t>(e - a_begin);
      }
      const float* expert_x = x.data() + first_row * d;
      if (!in_place) {
        for (int64_t e = a_begin; e < a_end; ++e) {
          std::copy_n(x.data() + row_of(e) * d, d, rows + offset + static_cast<size_t>(e - a_begin) * d);
        }
        expert_x = rows + offset;
      }
      groups.push_back({layout.experts[a], expert_x, a_end - a_begin, y + offset});
    }
    batch_fn(groups);
    for (size_t j = 0; j < n; ++j) {
      const auto c = static_cast<size_t>(layout.expert_entry_idx[static_cast<size_t>(begin) + j]);
      const float w = layout.entry_weight[c];
      const float* src = y + j * d;
      float* dst = contributions.data() + c * d;
      for (size_t i = 0; i < d; ++i) dst[i] = w * src[i];
    }
    first = last;
  }
}

void grouped_expert_ffn(const ExpertDispatchLayout& layout, std::span<const float> x, int hidden_size,
                        const ExpertGroupFn& expert_fn, std::span<float> contributions) {
  grouped_expert_ffn(
      layout, x, hidden_size,
      ExpertBatchFn([&](std::span<const ExpertGroup> groups) {
        for (const ExpertGroup& g : groups) expert_fn(g.expert, g.x, g.num_rows, g.y);
      }),
      contributions);
}

}  // namespace moert::experts
