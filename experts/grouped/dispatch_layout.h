// The dispatch layout of one MoE layer on one rank: the (input row, expert, gate weight)
// entries this rank computes, grouped by expert for a grouped expert FFN. The single-rank
// forward builds it from its own routing; the expert-parallel executor builds it from the
// rows it received (experts/placement/dispatch_plan.h). Pure logic and plain data.
//
// Shapes: T tokens, K experts per token, D hidden, E experts, N entries, A experts with
// at least one entry.
//
// Terms:
//   entry c: contribution c = entry_weight[c] * expert entry_expert[c] applied to input row
//     entry_row[c], D floats. Entries keep the order they were added in (the order their
//     contributions are returned in); the grouping is a permutation on top of it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace moert::experts {

struct ExpertDispatchLayout {
  std::vector<int64_t> entry_row;     // [N] input row read by entry c
  std::vector<int32_t> entry_expert;  // [N]
  std::vector<float> entry_weight;    // [N]

  // Grouping (filled by group_entries_by_expert): expert experts[a] computes entries
  // expert_entry_idx[cu_expert_entries[a] .. cu_expert_entries[a+1]), ascending.
  // Only experts with work are listed, ascending.
  std::vector<int32_t> experts;            // [A]
  std::vector<int64_t> cu_expert_entries;  // [A+1]
  std::vector<int64_t> expert_entry_idx;   // [N]

  int64_t num_entries() const { return static_cast<int64_t>(entry_expert.size()); }
  void add_entry(int64_t row, int32_t expert, float weight) {
    entry_row.push_back(row);
    entry_expert.push_back(expert);
    entry_weight.push_back(weight);
  }
};

// Fills the grouping of `layout` from its entries (a counting sort: stable, O(N + E)).
// Precondition: every entry_expert is in [0, num_experts) (MOERT_CHECK).
void group_entries_by_expert(ExpertDispatchLayout& layout, int num_experts);

// The layout of a rank's own routing: entry t * K + k = (t, expert_ids[t, k], weights[t, k]),
// grouped. kInvalidArgument naming the entry when an id is outside [0, E) or the spans are
// not T * K long.
Result<ExpertDispatchLayout> layout_from_routing(std::span<const int32_t> expert_ids, std::span<const float> weights,
                                                 int64_t num_tokens, int top_k, int num_experts);

// For each token t, the K entries t * K + k ordered by ascending expert id (ties:
// ascending k): the order in which a token's contributions are summed everywhere, so
// results are bit-identical for any rank count and placement. [T, K].
std::vector<int64_t> expert_order_of_tokens(std::span<const int32_t> expert_ids, int64_t num_tokens, int top_k);

// out[t] = sum over j of rows[src_rows[t * K + j]], j ascending, starting from +0.0f.
// rows: [N, D]; src_rows: [T, K]; out: [T, D] (MOERT_CHECK on sizes and indices).
void sum_rows_in_order(std::span<const int64_t> src_rows, int top_k, std::span<const float> rows, int hidden_size,
                       std::span<float> out);

}  // namespace moert::experts
