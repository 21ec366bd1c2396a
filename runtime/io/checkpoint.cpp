#include "runtime/io/checkpoint.h"

#include "core/regular_file.h"
#include "core/strict_json.h"
#include <cstring>
#include <cerrno>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

namespace moert::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

std::string shard_file_name(size_t shard_idx, size_t num_shards) {
  char text[64];
  std::snprintf(text, sizeof(text), "model-%05zu-of-%05zu.safetensors", shard_idx + 1, num_shards);
  return text;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  const std::string single_path = (fs::path(dir) / kSingleFileName).string();
  const std::string index_path = (fs::path(dir) / kIndexFileName).string();
  std::error_code ec;
  // The directory itself first, so that "cannot read" says why instead of "no checkpoint".
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    if (errno == ENOENT) return not_found("model directory " + dir + " does not exist");
    return io_error("cannot read model directory " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(info.st_mode)) return invalid_argument("model path " + dir + " is not a directory");
  if (::access(dir.c_str(), R_OK | X_OK) != 0) {
    return io_error("cannot read model directory " + dir + ": " + std::strerror(errno));
  }

  if (fs::exists(single_path, ec)) {
    MOERT_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(single_path));
    for (const TensorInfo& info : file->tensors()) checkpoint.index_.emplace(info.name, Entry{file.get(), &info});
    checkpoint.shards_.push_back(std::move(file));
    return checkpoint;
  }
  if (!fs::exists(index_path, ec)) {
    return not_found("no checkpoint in " + dir + ": neither " + kSingleFileName + " nor " + kIndexFileName +
                     " exists");
  }

  MOERT_ASSIGN_OR_RETURN(std::string index_text,
                         read_regular_file(index_path, kMaxCheckpointIndexBytes, "a checkpoint index"));
  Result<json> parsed_index = parse_strict_json(index_text, "index");
  if (!parsed_index.is_ok()) return corrupt(index_path + ": " + parsed_index.status().message());
  const json& index = *parsed_index;
  if (!index.is_object()) return corrupt(index_path + ": index is not a JSON object");
  if (const auto meta = index.find("metadata"); meta != index.end() && !meta->is_null() && !meta->is_object()) {
    return corrupt(index_path + ": \"metadata\" is not an object: " + meta->dump());
  }
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) return corrupt(index_path + ": index has no \"weight_map\"");
  if (!weight_map->is_object()) return corrupt(index_path + ": \"weight_map\" is not an object");

  // Group tensor names by shard; std::map keeps shard opening order deterministic.
  std::map<std::string, std::vector<std::string>> tensors_per_shard;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return corrupt(index_path + ": weight_map entry of tensor '" + tensor + "' is not a string: " + shard.dump());
    }
    const std::string shard_name = shard.get<std::string>();
    if (!is_plain_file_name(shard_name)) {
      return corrupt(index_path + ": tensor '" + tensor + "' is mapped to '" + shard_name +
                     "', which is not a file name inside " + dir);
    }
    tensors_per_shard[shard_name].push_back(tensor);
  }

  std::unordered_map<std::string, std::string> shard_of;  // tensor -> shard whose header holds it
  for (const auto& [shard_name, names] : tensors_per_shard) {
    const std::string shard_path = (fs::path(dir) / shard_name).string();
    if (!fs::exists(shard_path, ec)) {
      return not_found(index_path + ": shard " + shard_name + " does not exist in " + dir);
    }
    MOERT_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(shard_path));
    for (const TensorInfo& info : file->tensors()) {
      const auto [it, inserted] = shard_of.emplace(info.name, shard_name);
      if (!inserted) {
        return corrupt(dir + ": tensor '" + info.name + "' is in both shard " + it->second + " and shard " +
                       shard_name);
      }
    }
    for (const std::string& name : names) {
      const TensorInfo* info = file->find(name);
      if (info == nullptr) {
        return corrupt(index_path + ": tensor '" + name + "' is mapped to shard " + shard_name +
                       ", whose header lacks it");
      }
      checkpoint.index_.emplace(name, Entry{file.get(), info});
    }
    checkpoint.shards_.push_back(std::move(file));
  }
  return checkpoint;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.info;
}

Result<TensorView> Checkpoint::get(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return not_found("tensor '" + std::string(name) + "' not found in checkpoint " + dir_);
  return it->second.shard->view(*it->second.info);
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, entry] : index_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, entry] : index_) total += entry.info->size_bytes();
  return total;
}

Status write_sharded_checkpoint(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                uint64_t max_shard_bytes) {
  // Plan the split first so every shard name knows the shard count.
  std::vector<std::vector<NamedTensor>> shards;
  std::set<std::string_view> names;
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const NamedTensor& t : tensors) {
    if (!names.insert(t.name).second) {
      return invalid_argument("writing checkpoint " + dir + ": tensor '" + t.name + "' appears twice");
    }
    const std::optional<uint64_t> bytes = dtype_storage_bytes(t.view.dtype, static_cast<uint64_t>(t.view.numel()));
    if (!bytes) {
      return invalid_argument("writing checkpoint " + dir + ": tensor '" + t.name + "' of shape " +
                              shape_to_string(t.view.shape) + " is not a whole number of bytes");
    }
    if (shards.empty() || (!shards.back().empty() && shard_bytes + *bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += *bytes;
    total_bytes += *bytes;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create checkpoint directory " + dir + ": " + ec.message());

  json weight_map = json::object();
  for (size_t shard_idx = 0; shard_idx < shards.size(); ++shard_idx) {
    const std::string name = shard_file_name(shard_idx, shards.size());
    MOERT_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / name).string(), shards[shard_idx]));
    for (const NamedTensor& t : shards[shard_idx]) weight_map[t.name] = name;
  }
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  const std::string index_text = index.dump(2) + "\n";
  return write_file_atomically((fs::path(dir) / kIndexFileName).string(), {index_text});
}

}  // namespace moert::io
