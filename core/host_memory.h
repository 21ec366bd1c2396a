// What this node can give: memory available to new allocations (Linux MemAvailable), for
// checks made before allocating (KV pools, generated checkpoints) so that a request for more
// than there is becomes one clear error instead of bad_alloc, an abort or the OOM killer.
#pragma once

#include <cstdint>
#include <optional>

namespace moert {

// MemAvailable from /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<int64_t> available_memory_bytes();

// a * b, or nullopt when it overflows int64 (or either is negative).
std::optional<int64_t> checked_mul(int64_t a, int64_t b);

}  // namespace moert
