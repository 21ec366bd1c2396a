// Expert placement: which rank holds which routed experts, per MoE layer, with replicas.
// Pure logic: no device code, no MPI.
//
// Shapes: L MoE layers, E logical experts, S physical slots in a layer, R ranks.
//
// Terms:
//   logical expert: an expert of the model, id in [0, E).
//   physical slot:  one copy of a logical expert's weights on one rank. A layer has S >= E
//                   slots; an expert with n > 1 slots has n replicas (any of them computes
//                   the same function, so the choice only moves load).
//   rank slice:     the slots of rank r are the contiguous range [cu_rank_slots[r],
//                   cu_rank_slots[r+1]); ranks may hold different numbers of slots, and a
//                   rank may hold none.
//
// Placement file (JSON), read by parse_placement_json / load_placement_json:
//   {
//     "num_experts": 12,          // optional; when present must equal the caller's E
//     "num_ranks": 2,             // R >= 1
//     "layers": [                 // L >= 1 entries, one per MoE layer in model order
//       {"rank_experts": [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11, 0]]},
//       ...
//     ]
//   }
// rank_experts[r] lists rank r's slots in order; slot ids are assigned rank by rank
// (rank 0's first entry is slot 0). Every id must be an integer in [0, E) and every
// expert must appear at least once per layer. An expert may appear twice on one rank
// (EPLB can produce that); it is legal but wasteful.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace moert::experts {

// One layer's placement. Immutable once built; build with LayerPlacement::create.
class LayerPlacement {
 public:
  // rank_experts[r] = logical expert of each of rank r's slots, in slot order.
  // kInvalidArgument naming the value when R < 1, E < 1, an id is outside [0, E), or an
  // expert has no slot.
  static Result<LayerPlacement> create(int num_experts,
                                       const std::vector<std::vector<int32_t>>& rank_experts);

  int num_experts() const { return num_experts_; }
  int num_ranks() const { return static_cast<int>(cu_rank_slots_.size()) - 1; }
  int num_slots() const { return static_cast<int>(slot_to_expert_.size()); }

  const std::vector<int32_t>& slot_to_expert() const { return slot_to_expert_; }  // [S]
  const std::vector<int32_t>& slot_to_rank() const { return slot_to_rank_; }      // [S]
  const std::vector<int32_t>& cu_rank_slots() const { return cu_rank_slots_; }    // [R+1]

  int32_t slot_expert(int slot) const { return slot_to_expert_[static_cast<size_t>(slot)]; }
  int32_t slot_rank(int slot) const { return slot_to_rank_[static_cast<size_t>(slot)]; }
  // Logical experts of rank r's slots, in slot order (may repeat).
  std::span<const int32_t> rank_experts(int rank) const;
  // Slots holding expert e, ascending. Never empty.
  std::span<const int32_t> replicas(int expert) const;
  int num_replicas(int expert) const { return static_cast<int>(replicas(expert).size()); }
  // True when rank r holds at least one slot of expert e.
  bool rank_hosts(int rank, int expert) const;

  // The slot that serves (expert, key): round-robin, replicas(expert)[key % n]. Callers
  // pass key = source_rank + token_idx (dispatch_plan.h does), so consecutive tokens and
  // the same token index on different ranks spread over the replicas. key >= 0.
  // Deterministic; every replica computes the same function, so outputs do not depend on
  // the choice.
  int32_t replica_choice(int expert, int64_t key) const;
  int32_t replica_rank(int expert, int64_t key) const { return slot_rank(replica_choice(expert, key)); }

 private:
  int num_experts_ = 0;
  std::vector<int32_t> slot_to_expert_;       // [S]
  std::vector<int32_t> slot_to_rank_;         // [S]
  std::vector<int32_t> cu_rank_slots_;        // [R+1]
  std::vector<int32_t> cu_expert_replicas_;   // [E+1]
  std::vector<int32_t> expert_replica_slots_; // [S], expert e: [cu[e], cu[e+1]), ascending
};

// All MoE layers. Every layer has the same E and R (slot counts may differ per layer).
class ExpertPlacement {
 public:
  // kInvalidArgument when layers is empty or the layers disagree on E or R.
  static Result<ExpertPlacement> create(std::vector<LayerPlacement> layers);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  int num_experts() const { return layers_.front().num_experts(); }
  int num_ranks() const { return layers_.front().num_ranks(); }
  const LayerPlacement& layer(int layer_idx) const { return layers_[static_cast<size_t>(layer_idx)]; }
  // The placement model layer `model_layer` uses: the one shared by every layer, or its own.
  const LayerPlacement& for_model_layer(int model_layer) const { return layer(num_layers() == 1 ? 0 : model_layer); }
  const std::vector<LayerPlacement>& layers() const { return layers_; }

  // Serialises to the placement-file schema above (one line, with "num_experts").
  std::string to_json() const;

 private:
  std::vector<LayerPlacement> layers_;
};

// No replicas: expert e on one rank, contiguous slices, slot = expert id. With
// E % R != 0 the first E % R ranks get one expert more (E = 10, R = 4: 3, 3, 2, 2).
// R > E leaves the last ranks without experts. kInvalidArgument when E < 1, R < 1 or
// num_layers < 1.
Result<ExpertPlacement> contiguous_placement(int num_experts, int num_ranks, int num_layers = 1);

// Parses the placement-file schema above. num_experts is the model's E. Errors
// (kCorrupt for malformed JSON or wrong types, kInvalidArgument for bad values) name the
// offending path and value, e.g. "layers[1].rank_experts[0][2] = 12 must be in [0, 12)".
Result<ExpertPlacement> parse_placement_json(const std::string& text, int num_experts);
// Reads the file (kNotFound / kIoError) then parse_placement_json; errors carry the path.
Result<ExpertPlacement> load_placement_json(const std::string& path, int num_experts);

}  // namespace moert::experts
