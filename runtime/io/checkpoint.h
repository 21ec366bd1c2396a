// A model directory: one model.safetensors, or model.safetensors.index.json plus shards
// (docs/quant-formats.md §6, "Sharding").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/io/safetensors.h"

namespace moert::io {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

// Read-only view of every tensor of a checkpoint. Each shard is mapped once; views and
// TensorInfo pointers stay valid while the Checkpoint (or what it was moved into) lives.
class Checkpoint {
 public:
  // Opens `dir`. If dir/model.safetensors exists it is used (as transformers does);
  // otherwise dir/model.safetensors.index.json, whose "weight_map" names each tensor's
  // shard and whose optional "metadata" is not required to hold total_size.
  // Errors: kNotFound if neither file exists or a shard is missing; kCorrupt if the index
  // is not JSON, has no "weight_map" object, names a shard that is not a plain file name,
  // maps a tensor to a shard whose header lacks it, or if a tensor is in two shards'
  // headers; and any error of SafetensorsFile::open. Tensors that a shard holds but the
  // weight_map does not list are not exposed.
  static Result<Checkpoint> open(const std::string& dir);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // nullptr if absent.
  const TensorInfo* find(std::string_view name) const;
  // kNotFound "tensor 'x' not found in checkpoint DIR" if absent.
  Result<TensorView> get(std::string_view name) const;
  // Sorted.
  std::vector<std::string> tensor_names() const;
  // Sum of the data bytes of every exposed tensor.
  uint64_t total_bytes() const;
  // The shards, in the order they were opened (one entry for a single-file checkpoint).
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  Checkpoint() = default;

  struct Entry {
    const SafetensorsFile* shard;
    const TensorInfo* info;  // points into shard->tensors()
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> index_;
};

// Writes model-00001-of-0000N.safetensors ... and model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {...}}) into `dir` (created if
// needed). Tensors are split in the given order: a shard is closed when the next tensor
// would take it past max_shard_bytes of tensor data, so a single larger tensor gets a shard
// of its own. The index is always written (even for one shard), last, so it never names a
// shard that has not been written. kInvalidArgument for duplicate names (and the writer's
// own checks), kIoError if the OS refuses.
Status write_sharded_checkpoint(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                uint64_t max_shard_bytes);

}  // namespace moert::io
