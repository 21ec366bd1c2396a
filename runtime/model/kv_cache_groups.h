// The KV cache groups of a model: its layers grouped by what the paged cache stores for
// them (attention/kv_cache_spec.h), from the per-layer specs of its architecture.
#pragma once

#include <vector>

#include "attention/kv_cache_spec.h"
#include "core/dtype.h"
#include "core/status.h"
#include "runtime/model/config.h"

namespace moert {

// One group per distinct (kind, window, latent width) in layer order of first appearance; every layer in
// exactly one group. `dtype` must be F32, BF16 or F8_E4M3. Unsupported: a layer kind whose
// cache this runtime cannot store yet (the error names it and the layer).
Result<std::vector<attention::KvCacheSpec>> kv_cache_groups(const ModelConfig& config, DType dtype);

}  // namespace moert
