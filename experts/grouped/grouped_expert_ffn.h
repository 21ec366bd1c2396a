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

// One expert's rows, gathered: x [num_rows, D] in, y [num_rows, D] out.
struct ExpertGroup {
  int expert = 0;
  const float* x = nullptr;
  int64_t num_rows = 0;
  float* y = nullptr;
};
// Runs several groups at once (a CPU backend splits all their matrices over one wake-up of
// its threads); each group as ExpertGroupFn would.
using ExpertBatchFn = std::function<void(std::span<const ExpertGroup> groups)>;

// Entries gathered per call of an ExpertBatchFn at most (whole experts: one expert with more
// entries gets a call alone). Bounds the gather buffers of a long prefill.
inline constexpr int64_t kMaxEntriesPerExpertBatch = 4096;

// contributions[c] = entry_weight[c] * f(entry_expert[c], x[entry_row[c]]) for every entry
// of `layout` (which must be grouped). x: [X, D]; contributions: [N, D] (MOERT_CHECK on
// sizes and row indices). The expert_fn form calls it once per expert with work, in layout
// order; the batch form once per run of consecutive experts of at most
// kMaxEntriesPerExpertBatch entries (a single call for a decode step).
void grouped_expert_ffn(const ExpertDispatchLayout& layout, std::span<const float> x, int hidden_size,
                        const ExpertGroupFn& expert_fn, std::span<float> contributions);
void grouped_expert_ffn(const ExpertDispatchLayout& layout, std::span<const float> x, int hidden_size,
                        const ExpertBatchFn& batch_fn, std::span<float> contributions);

}  // namespace moert::experts
