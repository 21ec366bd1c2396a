// Accuracy of a reduced-precision KV cache (BF16, FP8): the model's next-token
// distributions through a paged cache of `dtype` against the same model through an F32
// cache, on the same schedule (docs/kv-cache.md). Each sequence is prefilled over its
// first half in one chunk, then decoded one token at a time, so both the prefill path and
// the decode path (reading K/V written in earlier steps, FP8 scales that grew) count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/model/eval.h"
#include "runtime/model/transformer.h"

namespace moert::engine {

// Every position of every sequence is compared (KL(f32 || dtype), top-1 agreement).
// Sequences need >= 1 token, ids inside the vocabulary (checked).
Result<DistributionComparison> compare_kv_cache_dtype(const TransformerForward& model, DType dtype,
                                                      const std::vector<std::vector<int32_t>>& sequences,
                                                      int block_size = 16);

}  // namespace moert::engine
