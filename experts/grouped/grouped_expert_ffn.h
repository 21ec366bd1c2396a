// The grouped expert computation of a MoE layer, written once for the single-rank forward,
// the expert-parallel executor (MPI or NCCL) and the in-memory test doubles: for each
// expert with work, gather its input rows, run the expert once over the group, and write
// each entry's weighted contribution into its own slot.
//
// Shapes: as dispatch_layout.h (N entries, D hidden); X input rows.
//
// Invariant: contribution c is exactly entry_weight[c] * y (one float multiply per element)
// where y = f(expert, x[entry_row[c]]) and f is row-invariant, so a contribution has the
// same bits wherever and in whatever group it is computed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "experts/grouped/dispatch_layout.h"

namespace moert::experts {

// Runs routed expert `expert` over a group of rows: x [R, D] -> y [R, D]. Must compute
// each row independently of the others (row invariance).
using ExpertGroupFn = std::function<void(int expert, const float* x, int64_t num_rows, float* y)>;

// contributions[c] = entry_weight[c] * f(entry_expert[c], x[entry_row[c]]) for every entry
// of `layout` (which must be grouped). x: [X, D]; contributions: [N, D] (MOERT_CHECK on
// sizes and row indices).
void grouped_expert_ffn(const ExpertDispatchLayout& layout, std::span<const float> x, int hidden_size,
                        const ExpertGroupFn& expert_fn, std::span<float> contributions);

}  // namespace moert::experts
