#include "experts/placement/eplb.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/check.h"

namespace moert::experts {

Packing balanced_packing(std::span<const float> weights, int num_packs) {
  const auto num_items = static_cast<int>(weights.size());
  MOERT_CHECK(num_packs >= 1, "num_packs = " << num_packs << " must be >= 1");
  MOERT_CHECK(num_items % num_packs == 0,
              "num_items = " << num_items << " must be a multiple of num_packs = " << num_packs);
  const int items_per_pack = num_items / num_packs;
  Packing out;
  out.pack_index.assign(weights.size(), -1);
  out.rank_in_pack.assign(weights.size(), -1);
  if (items_per_pack == 1) {
    std::iota(out.pack_index.begin(), out.pack_index.end(), 0);
    std::fill(out.rank_in_pack.begin(), out.rank_in_pack.end(), 0);
    return out;
  }
  std::vector<int32_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return weights[static_cast<size_t>(a)] > weights[static_cast<size_t>(b)];
  });
  std::vector<float> pack_weights(static_cast<size_t>(num_packs), 0.0f);
  std::vector<int> pack_items(static_cast<size_t>(num_packs), 0);
  for (int32_t item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {
      if (pack_items[static_cast<size_t>(p)] >= items_per_pack) continue;
      if (best < 0 || pack_weights[static_cast<size_t>(p)] < pack_weights[static_cast<size_t>(best)]) best = p;
    }
    MOERT_CHECK(best >= 0, "no pack has room for item " << item);
    out.pack_index[static_cast<size_t>(item)] = best;
    out.rank_in_pack[static_cast<size_t>(item)] = pack_items[static_cast<size_t>(best)];
    pack_weights[static_cast<size_t>(best)] += weights[static_cast<size_t>(item)];
    ++pack_items[static_cast<size_t>(best)];
  }
  return out;
}

Replication replicate_experts(std::span<const float> weights, int num_replicas) {
  const auto num_experts = static_cast<int>(weights.size());
  MOERT_CHECK(num_experts >= 1, "num_experts = " << num_experts << " must be >= 1");
  MOERT_CHECK(num_replicas >= num_experts,
              "num_replicas = " << num_replicas << " must be >= num_experts = " << num_experts);
  Replication out;
  out.phy2log.resize(static_cast<size_t>(num_replicas));
  out.replica_rank.assign(static_cast<size_t>(num_replicas), 0);
  out.logcnt.assign(static_cast<size_t>(num_experts), 1);
  std::iota(out.phy2log.begin(), out.phy2log.begin() + num_experts, 0);
  for (int slot = num_experts; slot < num_replicas; ++slot) {
    int best = 0;
    float best_load = weights[0] / static_cast<float>(out.logcnt[0]);
    for (int e = 1; e < num_experts; ++e) {
      const float load = weights[static_cast<size_t>(e)] / static_cast<float>(out.logcnt[static_cast<size_t>(e)]);
      if (load > best_load) {
        best = e;
        best_load = load;
      }
    }
    out.phy2log[static_cast<size_t>(slot)] = best;
    out.replica_rank[static_cast<size_t>(slot)] = out.logcnt[static_cast<size_t>(best)];
    ++out.logcnt[static_cast<size_t>(best)];
  }
  return out;
}

bool eplb_is_hierarchical(const EplbConfig& config) {
  return config.num_nodes >= 1 && config.num_groups % config.num_nodes == 0;
}

namespace {

std::vector<int32_t> inverse_permutation(const std::vector<int32_t>& perm) {
  std::vector<int32_t> inv(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int32_t>(i);
  return inv;
}

struct LayerResult {
  std::vector<int32_t> phy2log;       // [P]
  std::vector<int32_t> replica_rank;  // [P]
  std::vector<int32_t> logcnt;        // [E]
};

// eplb.py rebalance_experts_hierarchical for one layer. Preconditions were validated by
// rebalance_experts.
LayerResult rebalance_layer(std::span<const float> w, int num_replicas, int num_groups, int num_nodes,
                            int num_gpus) {
  const auto num_experts = static_cast<int>(w.size());
  const int group_size = num_experts / num_groups;
  const int groups_per_node = num_groups / num_nodes;
  const int slots_per_gpu = num_replicas / num_gpus;
  const int experts_per_node = num_experts / num_nodes;
  const int slots_per_node = num_replicas / num_nodes;
  const int gpus_per_node = num_gpus / num_nodes;

  // Step 1: pack groups (summed weight) onto nodes; mlog = expert id in node-major order.
  std::vector<float> group_weights(static_cast<size_t>(num_groups), 0.0f);
  for (int g = 0; g < num_groups; ++g) {
    for (int j = 0; j < group_size; ++j) group_weights[static_cast<size_t>(g)] += w[static_cast<size_t>(g * group_size + j)];
  }
  const Packing group_packing = balanced_packing(group_weights, num_nodes);
  std::vector<int32_t> log2mlog(static_cast<size_t>(num_experts));
  for (int g = 0; g < num_groups; ++g) {
    const int base = (group_packing.pack_index[static_cast<size_t>(g)] * groups_per_node +
                      group_packing.rank_in_pack[static_cast<size_t>(g)]) * group_size;
    for (int j = 0; j < group_size; ++j) log2mlog[static_cast<size_t>(g * group_size + j)] = base + j;
  }
  const std::vector<int32_t> mlog2log = inverse_permutation(log2mlog);

  LayerResult out;
  out.phy2log.resize(static_cast<size_t>(num_replicas));
  out.replica_rank.resize(static_cast<size_t>(num_replicas));
  std::vector<int32_t> mlogcnt(static_cast<size_t>(num_experts));
  for (int node = 0; node < num_nodes; ++node) {
    // Step 2: replicate the node's experts into its slots.
    std::vector<float> node_weights(static_cast<size_t>(experts_per_node));
    for (int k = 0; k < experts_per_node; ++k) {
      node_weights[static_cast<size_t>(k)] = w[static_cast<size_t>(mlog2log[static_cast<size_t>(node * experts_per_node + k)])];
    }
    const Replication rep = replicate_experts(node_weights, slots_per_node);
    std::copy(rep.logcnt.begin(), rep.logcnt.end(), mlogcnt.begin() + node * experts_per_node);

    // Step 3: pack the node's replicas (weight / count each) onto its GPUs.
    std::vector<float> replica_weights(static_cast<size_t>(slots_per_node));
    for (int k = 0; k < slots_per_node; ++k) {
      const auto m = static_cast<size_t>(rep.phy2log[static_cast<size_t>(k)]);
      replica_weights[static_cast<size_t>(k)] = node_weights[m] / static_cast<float>(rep.logcnt[m]);
    }
    const Packing gpu_packing = balanced_packing(replica_weights, gpus_per_node);
    std::vector<int32_t> phy2pphy(static_cast<size_t>(slots_per_node));
    for (int k = 0; k < slots_per_node; ++k) {
      phy2pphy[static_cast<size_t>(k)] = gpu_packing.pack_index[static_cast<size_t>(k)] * slots_per_gpu +
                                         gpu_packing.rank_in_pack[static_cast<size_t>(k)];
    }
    const std::vector<int32_t> pphy2phy = inverse_permutation(phy2pphy);

    // Step 4: back to global slot and expert ids.
    for (int k = 0; k < slots_per_node; ++k) {
      const auto phy = static_cast<size_t>(pphy2phy[static_cast<size_t>(k)]);
      const auto out_slot = static_cast<size_t>(node * slots_per_node + k);
      out.phy2log[out_slot] = mlog2log[static_cast<size_t>(rep.phy2log[phy] + node * experts_per_node)];
      out.replica_rank[out_slot] = rep.replica_rank[phy];
    }
  }
  out.logcnt.resize(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) {
    out.logcnt[static_cast<size_t>(e)] = mlogcnt[static_cast<size_t>(log2mlog[static_cast<size_t>(e)])];
  }
  return out;
}

Status validate_eplb(std::span<const float> weights, int num_layers, int num_experts, const EplbConfig& c) {
  auto num = [](int v) { return std::to_string(v); };
  if (num_layers < 1) return invalid_argument("num_layers = " + num(num_layers) + " must be >= 1");
  if (num_experts < 1) return invalid_argument("num_experts = " + num(num_experts) + " must be >= 1");
  if (weights.size() != static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts)) {
    return invalid_argument("weights has " + std::to_string(weights.size()) + " values, expected [L, E] = " +
                            num(num_layers) + " * " + num(num_experts));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0.0f) {
      return invalid_argument("weights[" + std::to_string(i / static_cast<size_t>(num_experts)) + ", " +
                              std::to_string(i % static_cast<size_t>(num_experts)) + "] = " +
                              std::to_string(weights[i]) + " must be finite and >= 0");
    }
  }
  if (c.num_gpus < 1) return invalid_argument("num_gpus = " + num(c.num_gpus) + " must be >= 1");
  if (c.num_nodes < 1) return invalid_argument("num_nodes = " + num(c.num_nodes) + " must be >= 1");
  if (c.num_groups < 1) return invalid_argument("num_groups = " + num(c.num_groups) + " must be >= 1");
  if (c.num_replicas < num_experts) {
    return invalid_argument("num_replicas = " + num(c.num_replicas) + " must be >= num_experts = " + num(num_experts));
  }
  if (c.num_replicas % c.num_gpus != 0) {
    return invalid_argument("num_replicas = " + num(c.num_replicas) + " must be a multiple of num_gpus = " +
                            num(c.num_gpus));
  }
  if (c.num_gpus % c.num_nodes != 0) {
    return invalid_argument("num_gpus = " + num(c.num_gpus) + " must be a multiple of num_nodes = " + num(c.num_nodes));
  }
  if (eplb_is_hierarchical(c) && num_experts % c.num_groups != 0) {
    return invalid_argument("num_experts = " + num(num_experts) + " must be a multiple of num_groups = " +
                            num(c.num_groups));
  }
  return Status::ok();
}

}  // namespace

Result<EplbPlan> rebalance_experts(std::span<const float> weights, int num_layers, int num_experts,
                                   const EplbConfig& config) {
  MOERT_RETURN_IF_ERROR(validate_eplb(weights, num_layers, num_experts, config));
  const bool hierarchical = eplb_is_hierarchical(config);
  const int num_groups = hierarchical ? config.num_groups : 1;
  const int num_nodes = hierarchical ? config.num_nodes : 1;
  const auto stride = static_cast<size_t>(num_experts);

  std::vector<LayerResult> layers;
  for (int l = 0; l < num_layers; ++l) {
    layers.push_back(rebalance_layer(weights.subspan(static_cast<size_t>(l) * stride, stride), config.num_replicas,
                                     num_groups, num_nodes, config.num_gpus));
  }
  EplbPlan plan;
  plan.num_layers = num_layers;
  plan.num_experts = num_experts;
  plan.num_replicas = config.num_replicas;
  for (const LayerResult& layer : layers) {
    plan.max_replicas = std::max(plan.max_replicas, *std::max_element(layer.logcnt.begin(), layer.logcnt.end()));
  }
  const auto max_cnt = static_cast<size_t>(plan.max_replicas);
  plan.log2phy.assign(static_cast<size_t>(num_layers) * stride * max_cnt, -1);
  for (int l = 0; l < num_layers; ++l) {
    const LayerResult& layer = layers[static_cast<size_t>(l)];
    plan.phy2log.insert(plan.phy2log.end(), layer.phy2log.begin(), layer.phy2log.end());
    plan.logcnt.insert(plan.logcnt.end(), layer.logcnt.begin(), layer.logcnt.end());
    for (int p = 0; p < config.num_replicas; ++p) {
      const auto e = static_cast<size_t>(layer.phy2log[static_cast<size_t>(p)]);
      const auto i = static_cast<size_t>(layer.replica_rank[static_cast<size_t>(p)]);
      plan.log2phy[(static_cast<size_t>(l) * stride + e) * max_cnt + i] = p;
    }
  }
  return plan;
}

Result<ExpertPlacement> placement_from_eplb(const EplbPlan& plan, int num_ranks) {
  if (num_ranks < 1) return invalid_argument("num_ranks = " + std::to_string(num_ranks) + " must be >= 1");
  if (plan.num_replicas % num_ranks != 0) {
    return invalid_argument("num_replicas = " + std::to_string(plan.num_replicas) +
                            " must be a multiple of num_ranks = " + std::to_string(num_ranks));
  }
  if (plan.phy2log.size() != static_cast<size_t>(plan.num_layers) * static_cast<size_t>(plan.num_replicas)) {
    return invalid_argument("phy2log has " + std::to_string(plan.phy2log.size()) + " values, expected [L, P] = " +
                            std::to_string(plan.num_layers) + " * " + std::to_string(plan.num_replicas));
  }
  const int slots_per_rank = plan.num_replicas / num_ranks;
  std::vector<LayerPlacement> layers;
  for (int l = 0; l < plan.num_layers; ++l) {
    std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
    for (int p = 0; p < plan.num_replicas; ++p) {
      rank_experts[static_cast<size_t>(p / slots_per_rank)].push_back(
          plan.phy2log[static_cast<size_t>(l) * static_cast<size_t>(plan.num_replicas) + static_cast<size_t>(p)]);
    }
    Result<LayerPlacement> layer = LayerPlacement::create(plan.num_experts, rank_experts);
    if (!layer.is_ok()) return layer.status().with_context("layer " + std::to_string(l));
    layers.push_back(std::move(layer).value());
  }
  return ExpertPlacement::create(std::move(layers));
}

}  // namespace moert::experts
