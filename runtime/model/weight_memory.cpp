#include "runtime/model/weight_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "runtime/model/weight_regions.h"

namespace moert {
namespace {

constexpr int64_t kCopyAlignment = 64;  // each copied region starts on a cache line

// Bytes a region of `bytes` takes in the copy buffer, the next region starting aligned.
int64_t copy_footprint(int64_t bytes) { return (bytes + kCopyAlignment - 1) / kCopyAlignment * kCopyAlignment; }

// Rounded up: a size never reads smaller than it is.
std::string mib_text(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

// The checkpoint's regions the forward reads: start -> bytes (the largest when two weights
// start at one address, as a tied LM head and the embedding do).
class MappedRegions {
 public:
  explicit MappedRegions(const io::Checkpoint& checkpoint) {
    for (const auto& shard : checkpoint.shards()) {
      if (!shard->mapped_bytes().empty()) mappings_.push_back(shard->mapped_bytes());
    }
  }

  bool mapped(const void* pointer) const {
    const auto* p = static_cast<const uint8_t*>(pointer);
    return std::any_of(mappings_.begin(), mappings_.end(),
                       [&](std::span<const uint8_t> m) { return p >= m.data() && p < m.data() + m.size(); });
  }

  void add(const void* pointer, int64_t bytes) {
    if (bytes <= 0 || !mapped(pointer)) return;
    int64_t& size = regions_[static_cast<const uint8_t*>(pointer)];
    size = std::max(size, bytes);
  }

  const std::map<const uint8_t*, int64_t>& regions() const { return regions_; }

 private:
  std::vector<std::span<const uint8_t>> mappings_;
  std::map<const uint8_t*, int64_t> regions_;
};

template <typename Visit>
void walk_computed_here(ModelWeights& weights, const std::function<bool(int, int)>& routed_expert_computed_here,
                        Visit&& visit) {
  weight_regions::walk(weights, visit, [&](int layer, int expert) {
    return routed_expert_computed_here && !routed_expert_computed_here(layer, expert);
  });
}

Status lock_regions(const std::map<const uint8_t*, int64_t>& regions, int64_t total) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& [start, bytes] : regions) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(start) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(start) + static_cast<uintptr_t>(bytes);
    if (::mlock(reinterpret_cast<const void*>(begin), end - begin) == 0) continue;
    const std::string error = std::strerror(errno);
    rlimit limit{};
    std::string limit_text = "unknown";
    if (::getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
      const std::string kib = std::to_string(limit.rlim_cur / 1024);
      limit_text = limit.rlim_cur == RLIM_INFINITY ? "unlimited" : kib + " KiB (ulimit -l " + kib + ")";
    }
    return {StatusCode::kResourceExhausted, "cannot lock " + mib_text(total) + " of weights in memory (mlock: " + error +
                                                "; RLIMIT_MEMLOCK " + limit_text +
                                                "): raise the limit or use --weight-memory copy"};
  }
  return Status::ok();
}

}  // namespace

Result<WeightMemory> parse_weight_memory(std::string_view value) {
  for (WeightMemory memory : {WeightMemory::kCopy, WeightMemory::kMmap, WeightMemory::kMlock}) {
    if (value == weight_memory_name(memory)) return memory;
  }
  return Status{StatusCode::kInvalidArgument,
                "weight memory '" + std::string(value) + "' is not one of copy, mmap, mlock"};
}

const char* weight_memory_name(WeightMemory memory) {
  switch (memory) {
    case WeightMemory::kCopy: return "copy";
    case WeightMemory::kMmap: return "mmap";
    case WeightMemory::kMlock: return "mlock";
  }
  return "?";
}

Status copy_fits_in_memory(int64_t bytes, std::optional<int64_t> available) {
  if (!available.has_value() || bytes <= *available) return Status::ok();
  return {StatusCode::kResourceExhausted, "copying " + mib_text(bytes) + " of weights into memory needs more than the " +
                                              std::to_string(*available >> 20) + " MiB" +
                                              " available: use --weight-memory mmap (read in place) or more ranks"};
}

Result<int64_t> hold_weights_in_memory(ModelWeights& weights, const io::Checkpoint& checkpoint, WeightMemory memory,
                                       const std::function<bool(int, int)>& routed_expert_computed_here) {
  if (memory == WeightMemory::kMmap) return int64_t{0};
  MappedRegions mapped(checkpoint);
  walk_computed_here(weights, routed_expert_computed_here,
                     [&](const auto& pointer, int64_t bytes) { mapped.add(pointer, bytes); });
  int64_t total = 0;
  for (const auto& [start, bytes] : mapped.regions()) total += bytes;
  if (total == 0) return int64_t{0};
  if (memory == WeightMemory::kMlock) {
    MOERT_RETURN_IF_ERROR(lock_regions(mapped.regions(), total));
    return total;
  }
  // kCopy: one buffer (huge pages, core/tensor.h), each region at a 64-byte boundary.
  int64_t padded_total = 0;
  for (const auto& [start, bytes] : mapped.regions()) padded_total += copy_footprint(bytes);
  MOERT_RETURN_IF_ERROR(copy_fits_in_memory(padded_total, available_memory_bytes()));
  uint8_t* destination = weights.owned.emplace_back(Buffer::uninitialized(DType::kU8, Shape{padded_total})).data<uint8_t>();
  std::map<const uint8_t*, uint8_t*> copy_of;
  for (const auto& [start, bytes] : mapped.regions()) {
    std::memcpy(destination, start, static_cast<size_t>(bytes));
    copy_of.emplace(start, destination);
    destination += copy_footprint(bytes);
  }
  walk_computed_here(weights, routed_expert_computed_here, [&](auto& pointer, int64_t /*bytes*/) {
    const auto found = copy_of.find(static_cast<const uint8_t*>(static_cast<const void*>(pointer)));
    if (found == copy_of.end()) return;
    using Pointer = std::remove_reference_t<decltype(pointer)>;
    pointer = static_cast<Pointer>(static_cast<void*>(found->second));
  });
  return total;
}

}  // namespace moert
