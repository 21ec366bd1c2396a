// Where the weights the CPU computes with live (docs/architecture.md "Weight memory").
//
// A checkpoint is mapped read-only (runtime/io/safetensors.h), so by default its pages are
// the kernel's page cache: clean file pages that reclaim may drop at any time (memory
// pressure, or proactive reclaim such as DAMON's pageout scheme), after which every access
// faults and re-reads. Decode streams every weight once per token, so a model whose pages
// keep being dropped runs several times slower with no error anywhere. Copying the weights
// into the process's own memory (anonymous pages: without swap the kernel cannot drop them)
// or locking the mapping keeps them resident.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "runtime/backend/backend.h"
#include "runtime/io/checkpoint.h"

namespace moert {

struct ModelWeights;  // runtime/model/weights.h (which includes this header for LoadOptions)

using backend::WeightMemory;

// "copy", "mmap", "mlock"; anything else is kInvalidArgument naming the value and the choices.
Result<WeightMemory> parse_weight_memory(std::string_view value);
const char* weight_memory_name(WeightMemory memory);

// Applies `memory` to every region the forward reads (for_each_weight_region) that lies in a
// mapping of `checkpoint`; regions the weights own already (repacked FP4 codes, F32 vectors,
// flushed BF16 copies) are left as they are, and so are the routed experts for which
// routed_expert_computed_here(layer, expert) is false (an expert-parallel rank holds only
// its own; none skipped when it is empty). kCopy points the regions at their copies in a new
// buffer of `weights.owned` (same bytes, so the same results; a region that two weights share,
// as a tied LM head and embedding, is copied once); kMlock locks the pages under them; kMmap
// does nothing. Returns the bytes copied or locked. Errors: kResourceExhausted when the copy
// would not fit (copy_fits_in_memory with this node's MemAvailable) or mlock is refused (the
// message names the size, the error and RLIMIT_MEMLOCK).
Result<int64_t> hold_weights_in_memory(ModelWeights& weights, const io::Checkpoint& checkpoint, WeightMemory memory,
                                       const std::function<bool(int layer, int expert)>& routed_expert_computed_here = {});

// OK when `bytes` of weights fit in `available` bytes (MemAvailable; nullopt: unknown, taken
// as fitting), else kResourceExhausted naming both sizes and --weight-memory mmap.
Status copy_fits_in_memory(int64_t bytes, std::optional<int64_t> available);

}  // namespace moert
