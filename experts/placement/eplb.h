// Expert-parallel load balancer: DeepSeek EPLB (deepseek-ai/EPLB eplb.py, docs/moe.md
// §2.3), re-implemented step for step so its outputs match the reference bit for bit.
// Pure logic: no device code, no MPI.
//
// Shapes: L MoE layers, E logical experts, P physical replicas (slots) per layer,
// G expert groups (E / G contiguous experts each), N nodes, U GPUs (= ranks),
// X = maxcnt, the largest replica count of any expert in any layer.
//
// Terms:
//   weight: the predicted load of a logical expert (e.g. a moving average of the tokens
//     routed to it); predicting it is the caller's business. Finite and >= 0.
//   phy2log[l, p]:    logical expert of physical slot p; slot p lives on GPU p / (P / U).
//   log2phy[l, e, i]: slot of replica i of expert e, padded with -1 up to X.
//   logcnt[l, e]:     number of replicas of expert e (>= 1).
//
// Arithmetic is float32, as in the reference (it calls weight.float()): sums, loads per
// replica (weight / count) and comparisons. Ties: a descending sort is stable (equal
// weights keep ascending index order), the lightest pack is the lowest index among
// equals, and the expert with the largest weight / count is the lowest id among equals.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "experts/placement/placement.h"
#include "core/status.h"

namespace moert::experts {

struct Packing {
  std::vector<int32_t> pack_index;    // [n] pack of item i
  std::vector<int32_t> rank_in_pack;  // [n] position of item i in its pack, in packing order
};

// Packs n items into m packs of exactly n / m items each: items in descending weight,
// each to the lightest pack that still has room (ties: lowest pack index). When
// n / m == 1, item i goes to pack i (the reference's shortcut, which the sort would not
// always reproduce). Preconditions (MOERT_CHECK): m >= 1, n % m == 0.
Packing balanced_packing(std::span<const float> weights, int num_packs);

struct Replication {
  std::vector<int32_t> phy2log;       // [P] slot p < E holds expert p; later slots as chosen
  std::vector<int32_t> replica_rank;  // [P] which replica of its expert slot p is (0-based)
  std::vector<int32_t> logcnt;        // [E]
};

// Replicates E experts into P >= E slots: slot p < E holds expert p, and each extra slot
// goes to the expert with the largest weight / logcnt (float32; ties: lowest id).
// Precondition (MOERT_CHECK): P >= E >= 1.
Replication replicate_experts(std::span<const float> weights, int num_replicas);

// Validated once, up front, by rebalance_experts.
struct EplbConfig {
  int num_replicas = 0;  // P: slots per layer; a multiple of num_gpus, >= E.
  int num_groups = 1;    // G: expert groups; E % G == 0.
  int num_nodes = 1;     // N: nodes; the hierarchical policy keeps each group on one node.
  int num_gpus = 1;      // U: GPUs (ranks); a multiple of num_nodes.
};

struct EplbPlan {
  int num_layers = 0;    // L
  int num_experts = 0;   // E
  int num_replicas = 0;  // P
  int max_replicas = 0;  // X
  std::vector<int32_t> phy2log;  // [L, P]
  std::vector<int32_t> log2phy;  // [L, E, X], -1 padded
  std::vector<int32_t> logcnt;   // [L, E]
};

// True when rebalance_experts uses the hierarchical policy (G % N == 0); otherwise it
// uses the global policy, the same routine with G = N = 1.
bool eplb_is_hierarchical(const EplbConfig& config);

// EPLB's rebalance_experts. weights: [L, E] row-major. Hierarchical policy: (1) pack
// groups by summed weight onto nodes, (2) replicate each node's experts into P / N slots,
// (3) pack the node's replicas (weight / logcnt each) onto its U / N GPUs, (4) map back
// to global ids. kInvalidArgument naming the value when L < 1, E < 1, a weight is
// negative or not finite, P % U != 0, P < E, U % N != 0, or (hierarchical) E % G != 0.
Result<EplbPlan> rebalance_experts(std::span<const float> weights, int num_layers, int num_experts,
                                   const EplbConfig& config);

// The placement EPLB describes: layer l, rank r holds slots [r * P / U, (r + 1) * P / U)
// with experts phy2log[l, ...] in slot order, so slot ids of the placement equal EPLB's.
// kInvalidArgument when num_ranks < 1 or P % num_ranks != 0.
Result<ExpertPlacement> placement_from_eplb(const EplbPlan& plan, int num_ranks);

}  // namespace moert::experts
