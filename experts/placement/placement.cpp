#include "experts/placement/placement.h"

#include "core/regular_file.h"
#include "core/strict_json.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace moert::experts {

Result<LayerPlacement> LayerPlacement::create(int num_experts,
                                              const std::vector<std::vector<int32_t>>& rank_experts) {
  if (num_experts < 1) {
    return invalid_argument("num_experts = " + std::to_string(num_experts) + " must be >= 1");
  }
  if (rank_experts.empty()) return invalid_argument("num_ranks = 0 must be >= 1");
  LayerPlacement p;
  p.num_experts_ = num_experts;
  p.cu_rank_slots_.push_back(0);
  for (size_t r = 0; r < rank_experts.size(); ++r) {
    for (size_t j = 0; j < rank_experts[r].size(); ++j) {
      const int32_t e = rank_experts[r][j];
      if (e < 0 || e >= num_experts) {
        return invalid_argument("rank_experts[" + std::to_string(r) + "][" + std::to_string(j) +
                                "] = " + std::to_string(e) + " must be in [0, " +
                                std::to_string(num_experts) + ")");
      }
      p.slot_to_expert_.push_back(e);
      p.slot_to_rank_.push_back(static_cast<int32_t>(r));
    }
    p.cu_rank_slots_.push_back(static_cast<int32_t>(p.slot_to_expert_.size()));
  }
  // Counting sort of slots by expert: replicas ascending by slot id.
  std::vector<int32_t> counts(static_cast<size_t>(num_experts), 0);
  for (int32_t e : p.slot_to_expert_) ++counts[static_cast<size_t>(e)];
  for (int e = 0; e < num_experts; ++e) {
    if (counts[static_cast<size_t>(e)] == 0) {
      return invalid_argument("expert " + std::to_string(e) + " has no slot: every expert in [0, " +
                              std::to_string(num_experts) + ") must be placed at least once");
    }
  }
  p.cu_expert_replicas_.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int e = 0; e < num_experts; ++e) {
    p.cu_expert_replicas_[static_cast<size_t>(e) + 1] =
        p.cu_expert_replicas_[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
  }
  p.expert_replica_slots_.assign(p.slot_to_expert_.size(), -1);
  std::vector<int32_t> fill(p.cu_expert_replicas_.begin(), p.cu_expert_replicas_.end() - 1);
  for (size_t s = 0; s < p.slot_to_expert_.size(); ++s) {
    p.expert_replica_slots_[static_cast<size_t>(fill[static_cast<size_t>(p.slot_to_expert_[s])]++)] =
        static_cast<int32_t>(s);
  }
  return p;
}

std::span<const int32_t> LayerPlacement::rank_experts(int rank) const {
  MOERT_CHECK(rank >= 0 && rank < num_ranks(), "rank = " << rank << " must be in [0, " << num_ranks() << ")");
  const auto begin = static_cast<size_t>(cu_rank_slots_[static_cast<size_t>(rank)]);
  const auto end = static_cast<size_t>(cu_rank_slots_[static_cast<size_t>(rank) + 1]);
  return std::span<const int32_t>(slot_to_expert_).subspan(begin, end - begin);
}

std::span<const int32_t> LayerPlacement::replicas(int expert) const {
  MOERT_CHECK(expert >= 0 && expert < num_experts_,
              "expert = " << expert << " must be in [0, " << num_experts_ << ")");
  const auto begin = static_cast<size_t>(cu_expert_replicas_[static_cast<size_t>(expert)]);
  const auto end = static_cast<size_t>(cu_expert_replicas_[static_cast<size_t>(expert) + 1]);
  return std::span<const int32_t>(expert_replica_slots_).subspan(begin, end - begin);
}

bool LayerPlacement::rank_hosts(int rank, int expert) const {
  for (int32_t slot : replicas(expert)) {
    if (slot_rank(slot) == rank) return true;
  }
  return false;
}

int32_t LayerPlacement::replica_choice(int expert, int64_t key) const {
  MOERT_CHECK(key >= 0, "replica key = " << key << " must be >= 0");
  const std::span<const int32_t> slots = replicas(expert);
  return slots[static_cast<size_t>(key % static_cast<int64_t>(slots.size()))];
}

Result<ExpertPlacement> ExpertPlacement::create(std::vector<LayerPlacement> layers) {
  if (layers.empty()) return invalid_argument("num_layers = 0 must be >= 1");
  for (size_t l = 1; l < layers.size(); ++l) {
    if (layers[l].num_experts() != layers[0].num_experts()) {
      return invalid_argument("layer " + std::to_string(l) + " has num_experts = " +
                              std::to_string(layers[l].num_experts()) + ", layer 0 has " +
                              std::to_string(layers[0].num_experts()));
    }
    if (layers[l].num_ranks() != layers[0].num_ranks()) {
      return invalid_argument("layer " + std::to_string(l) + " has num_ranks = " +
                              std::to_string(layers[l].num_ranks()) + ", layer 0 has " +
                              std::to_string(layers[0].num_ranks()));
    }
  }
  ExpertPlacement p;
  p.layers_ = std::move(layers);
  return p;
}

std::string ExpertPlacement::to_json() const {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlacement& layer : layers_) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < layer.num_ranks(); ++r) {
      const std::span<const int32_t> experts = layer.rank_experts(r);
      ranks.push_back(std::vector<int32_t>(experts.begin(), experts.end()));
    }
    layers.push_back({{"rank_experts", std::move(ranks)}});
  }
  nlohmann::json doc = {{"num_experts", num_experts()}, {"num_ranks", num_ranks()}, {"layers", std::move(layers)}};
  return doc.dump();
}

Result<ExpertPlacement> contiguous_placement(int num_experts, int num_ranks, int num_layers) {
  if (num_experts < 1) return invalid_argument("num_experts = " + std::to_string(num_experts) + " must be >= 1");
  if (num_ranks < 1) return invalid_argument("num_ranks = " + std::to_string(num_ranks) + " must be >= 1");
  if (num_layers < 1) return invalid_argument("num_layers = " + std::to_string(num_layers) + " must be >= 1");
  std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
  const int base = num_experts / num_ranks;
  const int extra = num_experts % num_ranks;
  int32_t next = 0;
  for (int r = 0; r < num_ranks; ++r) {
    const int count = base + (r < extra ? 1 : 0);
    for (int j = 0; j < count; ++j) rank_experts[static_cast<size_t>(r)].push_back(next++);
  }
  MOERT_ASSIGN_OR_RETURN(LayerPlacement layer, LayerPlacement::create(num_experts, rank_experts));
  return ExpertPlacement::create(std::vector<LayerPlacement>(static_cast<size_t>(num_layers), layer));
}

namespace {

std::string json_value_text(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// An integer JSON value that fits int32, or kCorrupt naming where and what it is.
Result<int32_t> json_int(const nlohmann::json& v, const std::string& where) {
  // Not an integer: corrupt; an integer past 64 bits (parsed as a double) is named below.
  if (!v.is_number_integer() && !(v.is_number_float() && std::fabs(v.get<double>()) >= 0x1p63)) {
    return corrupt(where + " = " + json_value_text(v) + " must be an integer");
  }
  MOERT_ASSIGN_OR_RETURN(const int64_t x, json_integer_in_range(v, where, std::numeric_limits<int32_t>::min(),
                                                                 std::numeric_limits<int32_t>::max()));
  return static_cast<int32_t>(x);
}

}  // namespace

Result<ExpertPlacement> parse_placement_json(const std::string& text, int num_experts) {
  if (num_experts < 1) return invalid_argument("num_experts = " + std::to_string(num_experts) + " must be >= 1");
  Result<nlohmann::json> parsed = parse_strict_json(text, "placement file");
  if (!parsed.is_ok()) return corrupt(parsed.status().message());
  const nlohmann::json& doc = *parsed;
  if (!doc.is_object()) return corrupt("placement file must be a JSON object, got " + json_value_text(doc));
  if (doc.contains("num_experts")) {
    MOERT_ASSIGN_OR_RETURN(const int32_t file_experts, json_int(doc["num_experts"], "num_experts"));
    if (file_experts != num_experts) {
      return invalid_argument("num_experts = " + std::to_string(file_experts) +
                              " does not match the model's " + std::to_string(num_experts));
    }
  }
  if (!doc.contains("num_ranks")) return corrupt("placement file has no \"num_ranks\"");
  MOERT_ASSIGN_OR_RETURN(const int32_t num_ranks, json_int(doc["num_ranks"], "num_ranks"));
  if (num_ranks < 1) return invalid_argument("num_ranks = " + std::to_string(num_ranks) + " must be >= 1");
  if (!doc.contains("layers")) return corrupt("placement file has no \"layers\"");
  const nlohmann::json& layers_json = doc["layers"];
  if (!layers_json.is_array()) return corrupt("layers = " + json_value_text(layers_json) + " must be an array");
  if (layers_json.empty()) return invalid_argument("layers is empty: at least one layer is needed");

  std::vector<LayerPlacement> layers;
  for (size_t l = 0; l < layers_json.size(); ++l) {
    const std::string lwhere = "layers[" + std::to_string(l) + "]";
    const nlohmann::json& layer_json = layers_json[l];
    if (!layer_json.is_object() || !layer_json.contains("rank_experts")) {
      return corrupt(lwhere + " = " + json_value_text(layer_json) + " must be an object with \"rank_experts\"");
    }
    const nlohmann::json& ranks_json = layer_json["rank_experts"];
    const std::string rwhere = lwhere + ".rank_experts";
    if (!ranks_json.is_array()) return corrupt(rwhere + " = " + json_value_text(ranks_json) + " must be an array");
    if (ranks_json.size() != static_cast<size_t>(num_ranks)) {
      return invalid_argument(rwhere + " has " + std::to_string(ranks_json.size()) +
                              " ranks, num_ranks = " + std::to_string(num_ranks));
    }
    std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
    for (size_t r = 0; r < ranks_json.size(); ++r) {
      const std::string where = rwhere + "[" + std::to_string(r) + "]";
      if (!ranks_json[r].is_array()) return corrupt(where + " = " + json_value_text(ranks_json[r]) + " must be an array");
      for (size_t j = 0; j < ranks_json[r].size(); ++j) {
        const std::string ewhere = where + "[" + std::to_string(j) + "]";
        MOERT_ASSIGN_OR_RETURN(const int32_t e, json_int(ranks_json[r][j], ewhere));
        if (e < 0 || e >= num_experts) {
          return invalid_argument(ewhere + " = " + std::to_string(e) + " must be in [0, " +
                                  std::to_string(num_experts) + ")");
        }
        rank_experts[r].push_back(e);
      }
    }
    Result<LayerPlacement> layer = LayerPlacement::create(num_experts, rank_experts);
    if (!layer.is_ok()) return layer.status().with_context(lwhere);
    layers.push_back(std::move(layer).value());
  }
  return ExpertPlacement::create(std::move(layers));
}

Result<ExpertPlacement> load_placement_json(const std::string& path, int num_experts) {
  MOERT_ASSIGN_OR_RETURN(const std::string text, read_regular_file(path, kMaxPlacementBytes, "a placement file"));
  Result<ExpertPlacement> placement = parse_placement_json(text, num_experts);
  if (!placement.is_ok()) return placement.status().with_context(path);
  return placement;
}

}  // namespace moert::experts
