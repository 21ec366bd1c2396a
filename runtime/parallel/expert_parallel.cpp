#include "runtime/parallel/expert_parallel.h"

#include <chrono>
#include <cstring>

#include "experts/grouped/grouped_expert_ffn.h"
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
                                             comm::Transport& transport)
    : config_(config),
      placement_(std::move(placement)),
      transport_(transport),
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

namespace {

// One dispatch row on the wire, as bytes: [hidden: D x f32 | expert ids: K x i32 |
// gate weights: K x f32]. Ids stay integers end to end (copied as int32, never through
// float bit patterns).
struct DispatchRowFormat {
  int64_t dim = 0;
  int64_t top_k = 0;
  int64_t ids_offset() const { return dim * static_cast<int64_t>(sizeof(float)); }
  int64_t weights_offset() const { return ids_offset() + top_k * static_cast<int64_t>(sizeof(int32_t)); }
  int64_t row_bytes() const { return weights_offset() + top_k * static_cast<int64_t>(sizeof(float)); }
};

// Pack: send row i = [h[send_token_idx[i]] | send_expert_ids[i] | send_weights[i]].
std::vector<std::byte> pack_dispatch_rows(const experts::DispatchPlan& plan, const float* h,
                                          const DispatchRowFormat& format) {
  const int64_t num_send = plan.num_send_rows();
  std::vector<std::byte> send(static_cast<size_t>(num_send * format.row_bytes()));
  const auto k = static_cast<size_t>(format.top_k);
  for (int64_t i = 0; i < num_send; ++i) {
    std::byte* row = send.data() + i * format.row_bytes();
    std::memcpy(row, h + plan.send_token_idx[static_cast<size_t>(i)] * format.dim,
                static_cast<size_t>(format.ids_offset()));
    std::memcpy(row + format.ids_offset(), plan.send_expert_ids.data() + static_cast<size_t>(i) * k, k * sizeof(int32_t));
    std::memcpy(row + format.weights_offset(), plan.send_weights.data() + static_cast<size_t>(i) * k, k * sizeof(float));
  }
  return send;
}

// The received rows split back into hidden [N_recv, D], ids and weights [N_recv, K].
struct ReceivedRows {
  std::vector<float> hidden;
  std::vector<int32_t> expert_ids;
  std::vector<float> weights;
};

ReceivedRows unpack_dispatch_rows(const std::vector<std::byte>& recv, int64_t num_recv, const DispatchRowFormat& format) {
  ReceivedRows rows;
  const auto d = static_cast<size_t>(format.dim);
  const auto k = static_cast<size_t>(format.top_k);
  rows.hidden.resize(static_cast<size_t>(num_recv) * d);
  rows.expert_ids.resize(static_cast<size_t>(num_recv) * k);
  rows.weights.resize(static_cast<size_t>(num_recv) * k);
  for (int64_t i = 0; i < num_recv; ++i) {
    const std::byte* row = recv.data() + i * format.row_bytes();
    const auto r = static_cast<size_t>(i);
    std::memcpy(rows.hidden.data() + r * d, row, d * sizeof(float));
    std::memcpy(rows.expert_ids.data() + r * k, row + format.ids_offset(), k * sizeof(int32_t));
    std::memcpy(rows.weights.data() + r * k, row + format.weights_offset(), k * sizeof(float));
  }
  return rows;
}

}  // namespace

// pack -> exchange (dispatch, with the overlapped work in flight) -> grouped expert
// compute -> exchange back (combine) -> sum in ascending expert id.
void ExpertParallelExperts::run(backend::Backend& backend, int layer, const MoeWeights& moe, const float* h, int64_t num_tokens,
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
  // 1. Plan and pack (each token once per destination rank).
  Result<experts::DispatchPlan> plan = experts::build_dispatch_plan(
      placement, rank, {expert_ids, static_cast<size_t>(num_tokens * top_k)},
      {weights, static_cast<size_t>(num_tokens * top_k)}, num_tokens, top_k);
  if (!plan.is_ok()) fail(plan.status());
  const DispatchRowFormat format{dim, top_k};
  // The exchange runs on host memory (MPI; the NCCL device path is the GPU expert-parallel
  // work): a device backend's rows come to the host here and the combined rows go back.
  const bool on_device = backend.device().kind != DeviceKind::kCpu;
  std::vector<float> host_h, host_out;
  if (on_device) {
    host_h.resize(static_cast<size_t>(num_tokens * dim));
    backend.to_host(h, num_tokens * dim, host_h.data());
    host_out.resize(host_h.size());
  }
  const std::vector<std::byte> send = pack_dispatch_rows(*plan, on_device ? host_h.data() : h, format);

  // 2. DISPATCH, with the overlapped work (shared experts) while it is in flight.
  auto exchange_start = std::chrono::steady_clock::now();
  Result<std::vector<int64_t>> recv_rows = transport_.all_to_all_counts(plan->send_row_counts);
  if (!recv_rows.is_ok()) fail(recv_rows.status());
  int64_t num_recv = 0;
  for (int64_t rows : *recv_rows) num_recv += rows;
  std::vector<std::byte> recv(static_cast<size_t>(num_recv * format.row_bytes()));
  const std::vector<int64_t> send_bytes = scaled(plan->send_row_counts, format.row_bytes());
  std::unique_ptr<comm::PendingExchange> dispatch =
      transport_.start_all_to_all_v(send.data(), send_bytes, recv.data(), scaled(*recv_rows, format.row_bytes()));
  stats_.all_to_all_s += seconds_since(exchange_start);
  const auto overlap_start = std::chrono::steady_clock::now();
  overlapped();
  stats_.overlapped_s += seconds_since(overlap_start);
  exchange_start = std::chrono::steady_clock::now();
  const Status dispatched = dispatch->wait();
  if (!dispatched.is_ok()) fail(dispatched);
  stats_.all_to_all_s += seconds_since(exchange_start);
  stats_.dispatch_bytes_sent += bytes_to_peers(send_bytes, rank);

  // 3. Local experts: the grouped expert FFN over the received rows, one weighted
  //    contribution per (received row, expert).
  const auto compute_start = std::chrono::steady_clock::now();
  const ReceivedRows received = unpack_dispatch_rows(recv, num_recv, format);
  Result<experts::ExpertComputePlan> compute = experts::build_expert_compute_plan(
      placement, rank, *recv_rows, received.expert_ids, received.weights, top_k);
  if (!compute.is_ok()) fail(compute.status());
  computed_loads_[static_cast<size_t>(layer)] += compute->num_contribs();
  std::vector<float> contributions(static_cast<size_t>(compute->num_contribs() * dim));  // [N_c, D]
  backend.grouped_expert_ffn(compute->layout, received.hidden, static_cast<int>(dim), routed_expert_weights(moe),
                             contributions);
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
                                 {on_device ? host_out.data() : out, static_cast<size_t>(num_tokens * dim)});
  if (on_device) backend.copy_bytes(out, host_out.data(), num_tokens * dim * static_cast<int64_t>(sizeof(float)));
}

}  // namespace moert::parallel
