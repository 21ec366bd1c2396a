#include "runtime/parallel/expert_parallel.h"

#include <chrono>
#include <cstring>

#include "experts/expert_ffn.h"
#include "experts/placement/dispatch_plan.h"
#include "core/check.h"

namespace moert::parallel {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t bytes_per_row) {
  std::vector<int64_t> bytes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) bytes[i] = rows[i] * bytes_per_row;
  return bytes;
}

// Bytes that leave this rank: every segment but the one to itself.
int64_t bytes_to_peers(const std::vector<int64_t>& bytes, int rank) {
  int64_t total = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    if (static_cast<int>(r) != rank) total += bytes[r];
  }
  return total;
}

}  // namespace

ExpertParallelExperts::ExpertParallelExperts(const ModelConfig& config, experts::ExpertPlacement placement,
                                             comm::Transport& transport, ThreadPool& pool)
    : config_(config),
      placement_(std::move(placement)),
      transport_(transport),
      pool_(pool),
      routed_loads_(static_cast<size_t>(config.num_layers) * static_cast<size_t>(config.num_experts()), 0),
      computed_loads_(static_cast<size_t>(config.num_layers), 0) {
  check_placement(placement_);
}

void ExpertParallelExperts::check_placement(const experts::ExpertPlacement& placement) const {
  MOERT_CHECK(placement.num_ranks() == transport_.world_size(),
              "placement has " << placement.num_ranks() << " ranks, the job has " << transport_.world_size());
  MOERT_CHECK(placement.num_layers() == 1 || placement.num_layers() == config_.num_layers,
              "placement has " << placement.num_layers() << " layers, the model " << config_.num_layers);
  MOERT_CHECK(placement.num_experts() == config_.num_experts(),
              "placement has " << placement.num_experts() << " experts, the model " << config_.num_experts());
}

void ExpertParallelExperts::set_placement(experts::ExpertPlacement placement) {
  check_placement(placement);
  placement_ = std::move(placement);
}

std::vector<int64_t> ExpertParallelExperts::take_routed_loads() {
  std::vector<int64_t> loads(routed_loads_.size(), 0);
  loads.swap(routed_loads_);
  return loads;
}

std::vector<int64_t> ExpertParallelExperts::take_computed_loads() {
  std::vector<int64_t> loads(computed_loads_.size(), 0);
  loads.swap(computed_loads_);
  return loads;
}

void ExpertParallelExperts::run(int layer, const MoeWeights& moe, const float* h, int64_t num_tokens,
                                const int32_t* expert_ids, const float* weights, float* out,
                                const std::function<void()>& overlapped) {
  const int rank = transport_.rank();
  const int top_k = config_.top_k();
  const int num_experts = config_.num_experts();
  const int64_t dim = config_.hidden_size;
  const experts::LayerPlacement& placement = placement_.layer(placement_.num_layers() == 1 ? 0 : layer);
  auto fail = [&](const Status& status) {
    transport_.abort(1, "rank " + std::to_string(rank) + ", layer " + std::to_string(layer) +
                            " expert-parallel step: " + status.message());
  };
  for (int64_t i = 0; i < num_tokens * top_k; ++i) {
    const int32_t e = expert_ids[i];
    MOERT_CHECK(e >= 0 && e < num_experts, "expert id " << e << " outside [0, " << num_experts << ")");
    ++routed_loads_[static_cast<size_t>(layer) * static_cast<size_t>(num_experts) + static_cast<size_t>(e)];
  }
  // 1. Plan and pack [hidden | ids | weights] per destination (each token once per rank).
  Result<experts::DispatchPlan> plan = experts::build_dispatch_plan(
      placement, rank, {expert_ids, static_cast<size_t>(num_tokens * top_k)},
      {weights, static_cast<size_t>(num_tokens * top_k)}, num_tokens, top_k);
  if (!plan.is_ok()) fail(plan.status());
  const int64_t row_floats = dim + 2 * top_k;  // ids travel as their int32 bit patterns
  const int64_t row_bytes = row_floats * static_cast<int64_t>(sizeof(float));
  const int64_t num_send = plan->num_send_rows();
  std::vector<float> send(static_cast<size_t>(num_send * row_floats));
  for (int64_t i = 0; i < num_send; ++i) {
    float* row = send.data() + i * row_floats;
    std::memcpy(row, h + plan->send_token_idx[static_cast<size_t>(i)] * dim, static_cast<size_t>(dim) * sizeof(float));
    std::memcpy(row + dim, plan->send_expert_ids.data() + i * top_k, static_cast<size_t>(top_k) * sizeof(int32_t));
    std::memcpy(row + dim + top_k, plan->send_weights.data() + i * top_k, static_cast<size_t>(top_k) * sizeof(float));
  }
  // 2. DISPATCH, with the overlapped work (shared experts) while it is in flight.
  auto exchange_start = std::chrono::steady_clock::now();
  Result<std::vector<int64_t>> recv_rows = transport_.all_to_all_counts(plan->send_row_counts);
  if (!recv_rows.is_ok()) fail(recv_rows.status());
  int64_t num_recv = 0;
  for (int64_t rows : *recv_rows) num_recv += rows;
  std::vector<float> recv(static_cast<size_t>(num_recv * row_floats));
  const std::vector<int64_t> send_bytes = scaled(plan->send_row_counts, row_bytes);
  const std::vector<int64_t> recv_bytes = scaled(*recv_rows, row_bytes);
  std::unique_ptr<comm::PendingExchange> dispatch =
      transport_.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  stats_.all_to_all_s += seconds_since(exchange_start);
  const auto overlap_start = std::chrono::steady_clock::now();
  overlapped();
  stats_.overlapped_s += seconds_since(overlap_start);
  exchange_start = std::chrono::steady_clock::now();
  const Status dispatched = dispatch->wait();
  if (!dispatched.is_ok()) fail(dispatched);
  stats_.all_to_all_s += seconds_since(exchange_start);
  stats_.dispatch_bytes_sent += bytes_to_peers(send_bytes, rank);

  // 3. Local experts: one weighted output w * E(x) per (received row, expert).
  const auto compute_start = std::chrono::steady_clock::now();
  std::vector<int32_t> recv_ids(static_cast<size_t>(num_recv * top_k));
  std::vector<float> recv_w(static_cast<size_t>(num_recv * top_k));
  for (int64_t i = 0; i < num_recv; ++i) {
    const float* row = recv.data() + i * row_floats;
    std::memcpy(recv_ids.data() + i * top_k, row + dim, static_cast<size_t>(top_k) * sizeof(int32_t));
    std::memcpy(recv_w.data() + i * top_k, row + dim + top_k, static_cast<size_t>(top_k) * sizeof(float));
  }
  Result<experts::ExpertComputePlan> compute =
      experts::build_expert_compute_plan(placement, rank, *recv_rows, recv_ids, recv_w, top_k);
  if (!compute.is_ok()) fail(compute.status());
  computed_loads_[static_cast<size_t>(layer)] += compute->num_contribs();
  std::vector<float> contributions(static_cast<size_t>(compute->num_contribs() * dim));
  std::vector<float> rows, expert_out;
  for (size_t a = 0; a < compute->local_experts.size(); ++a) {
    const int64_t begin = compute->cu_expert_contribs[a], end = compute->cu_expert_contribs[a + 1];
    const int64_t n = end - begin;
    if (n == 0) continue;
    rows.resize(static_cast<size_t>(n * dim));
    expert_out.resize(static_cast<size_t>(n * dim));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = compute->expert_contrib_idx[static_cast<size_t>(begin + j)];
      const float* x = recv.data() + compute->contrib_recv_row[static_cast<size_t>(c)] * row_floats;
      std::memcpy(rows.data() + j * dim, x, static_cast<size_t>(dim) * sizeof(float));
    }
    const GatedMlp& expert = moe.experts[static_cast<size_t>(compute->local_experts[a])];
    experts::swiglu_ffn_forward(rows.data(), n, expert.gate.weight, expert.up.weight, expert.down.weight,
                                expert_out.data(), pool_);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = compute->expert_contrib_idx[static_cast<size_t>(begin + j)];
      const float w = compute->contrib_weight[static_cast<size_t>(c)];
      float* dst = contributions.data() + c * dim;
      const float* src = expert_out.data() + j * dim;
      for (int64_t i = 0; i < dim; ++i) dst[i] = w * src[i];
    }
  }
  stats_.expert_compute_s += seconds_since(compute_start);

  // 4. COMBINE: contributions go back to their source ranks, summed there in expert-id order.
  exchange_start = std::chrono::steady_clock::now();
  const int64_t out_row_bytes = dim * static_cast<int64_t>(sizeof(float));
  std::vector<float> returned(static_cast<size_t>(plan->num_return_rows() * dim));
  const std::vector<int64_t> combine_send = scaled(compute->return_row_counts, out_row_bytes);
  const Status combined =
      transport_
          .start_all_to_all_v(contributions.data(), combine_send, returned.data(),
                              scaled(plan->return_row_counts, out_row_bytes))
          ->wait();
  if (!combined.is_ok()) fail(combined);
  stats_.all_to_all_s += seconds_since(exchange_start);
  stats_.combine_bytes_sent += bytes_to_peers(combine_send, rank);
  experts::combine_contributions(*plan, returned, static_cast<int>(dim),
                                 {out, static_cast<size_t>(num_tokens * dim)});
}

}  // namespace moert::parallel
