#include "runtime/parallel/expert_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

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
                                             comm::Transport& transport, comm::Transport* payload_transport)
    : config_(config),
      placement_(std::move(placement)),
      transport_(transport),
      payload_(payload_transport != nullptr ? *payload_transport : transport),
      routed_loads_(static_cast<size_t>(config.num_layers) * static_cast<size_t>(config.num_experts()), 0),
      computed_loads_(static_cast<size_t>(config.num_layers), 0) {
  check_placement(placement_);
  MOERT_CHECK(payload_.world_size() == transport_.world_size() && payload_.rank() == transport_.rank(),
              "the payload transport is rank " << payload_.rank() << " of " << payload_.world_size()
                                               << ", the control transport rank " << transport_.rank() << " of "
                                               << transport_.world_size());
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

// The device counters only grow; what is new since the last collection is the difference to
// the totals seen then (one copy, nothing written back).
void ExpertParallelExperts::collect_device_loads() {
  if (loads_backend_ == nullptr) return;
  const auto num_experts = static_cast<size_t>(config_.num_experts());
  std::vector<int64_t> totals(routed_loads_.size());
  loads_backend_->copy_bytes(totals.data(), device_loads_.data<int64_t>(),
                             static_cast<int64_t>(totals.size() * sizeof(int64_t)));
  for (size_t i = 0; i < totals.size(); ++i) {
    const int64_t added = totals[i] - device_loads_seen_[i];
    routed_loads_[i] += added;
    computed_loads_[i / num_experts] += added;  // one rank computes every routed entry
  }
  device_loads_seen_ = std::move(totals);
}

std::vector<int64_t> ExpertParallelExperts::take_routed_loads() {
  collect_device_loads();
  std::vector<int64_t> loads(routed_loads_.size(), 0);
  loads.swap(routed_loads_);
  return loads;
}

std::vector<int64_t> ExpertParallelExperts::take_computed_loads() {
  collect_device_loads();
  std::vector<int64_t> loads(computed_loads_.size(), 0);
  loads.swap(computed_loads_);
  return loads;
}

namespace {

// What travels beside each dispatched row, on the control transport (host memory):
// [expert ids: K x i32 | gate weights: K x f32]. Ids stay integers end to end (copied as
// int32, never through float bit patterns).
struct RowRouting {
  int64_t top_k = 0;
  int64_t row_bytes() const { return top_k * static_cast<int64_t>(sizeof(int32_t) + sizeof(float)); }
};

std::vector<std::byte> pack_row_routing(const experts::DispatchPlan& plan, const RowRouting& format) {
  const int64_t num_send = plan.num_send_rows();
  const auto k = static_cast<size_t>(format.top_k);
  std::vector<std::byte> send(static_cast<size_t>(num_send * format.row_bytes()));
  for (int64_t i = 0; i < num_send; ++i) {
    std::byte* row = send.data() + i * format.row_bytes();
    std::memcpy(row, plan.send_expert_ids.data() + static_cast<size_t>(i) * k, k * sizeof(int32_t));
    std::memcpy(row + k * sizeof(int32_t), plan.send_weights.data() + static_cast<size_t>(i) * k, k * sizeof(float));
  }
  return send;
}

struct ReceivedRouting {
  std::vector<int32_t> expert_ids;  // [N_recv, K]
  std::vector<float> weights;       // [N_recv, K]
};

ReceivedRouting unpack_row_routing(const std::vector<std::byte>& recv, int64_t num_recv, const RowRouting& format) {
  const auto k = static_cast<size_t>(format.top_k);
  ReceivedRouting routing;
  routing.expert_ids.resize(static_cast<size_t>(num_recv) * k);
  routing.weights.resize(static_cast<size_t>(num_recv) * k);
  for (int64_t i = 0; i < num_recv; ++i) {
    const std::byte* row = recv.data() + i * format.row_bytes();
    const auto r = static_cast<size_t>(i);
    std::memcpy(routing.expert_ids.data() + r * k, row, k * sizeof(int32_t));
    std::memcpy(routing.weights.data() + r * k, row + k * sizeof(int32_t), k * sizeof(float));
  }
  return routing;
}

// Float rows that the payload transport moves: device memory from the backend when the
// transport moves device buffers, host memory otherwise.
class PayloadRows {
 public:
  PayloadRows(backend::Backend* device, int64_t num_rows, int64_t dim) : count_(num_rows * dim) {
    if (device != nullptr) {
      device_ = device->allocate(DType::kF32, {std::max<int64_t>(num_rows, 1), dim});
    } else {
      host_.resize(static_cast<size_t>(count_));
    }
  }
  float* data() { return host_.empty() ? device_.data<float>() : host_.data(); }
  std::span<float> span() { return {data(), static_cast<size_t>(count_)}; }

 private:
  int64_t count_ = 0;
  Buffer device_;
  std::vector<float> host_;
};

}  // namespace

// plan -> routing + row exchange (dispatch, with the overlapped work in flight) -> grouped
// expert compute -> exchange back (combine) -> sum in ascending expert id.
// Where the rows live: with a device payload transport (NCCL) every row buffer is on the
// backend's device and only the plan and the routing columns touch the host; with a host
// payload transport (MPI, loopback) a device backend's rows are staged through the host.
void ExpertParallelExperts::run(backend::Backend& backend, int layer, const MoeWeights& moe, const float* h, int64_t num_tokens,
                                const int32_t* expert_ids, const float* weights, float* out,
                                const std::function<void()>& overlapped) {
  const int rank = transport_.rank();
  const int top_k = config_.top_k();
  const int num_experts = config_.num_experts();
  const int64_t dim = config_.hidden_size;
  if (routes_on_device()) {  // every expert here: the routing and the loads stay on the device
    overlapped();
    if (loads_backend_ != &backend) {
      collect_device_loads();
      loads_backend_ = &backend;
      device_loads_ = backend.allocate(DType::kI64, {static_cast<int64_t>(routed_loads_.size())});
      device_loads_seen_.assign(routed_loads_.size(), 0);
      backend.copy_bytes(device_loads_.data<int64_t>(), device_loads_seen_.data(),
                         static_cast<int64_t>(device_loads_seen_.size() * sizeof(int64_t)));
    }
    backend.count_experts(expert_ids, num_tokens * top_k, num_experts,
                          device_loads_.data<int64_t>() + static_cast<int64_t>(layer) * num_experts);
    backend.routed_experts(h, num_tokens, static_cast<int>(dim), expert_ids, weights, top_k, num_experts,
                           routed_expert_weights(moe), out);
    return;
  }
  const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
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
  const bool rows_on_device = payload_.buffer_location() == comm::BufferLocation::kDevice;
  const bool backend_on_device = backend.device().kind != DeviceKind::kCpu;
  MOERT_CHECK(!rows_on_device || backend_on_device,
              "a device payload transport needs a device backend, not " << backend.name());
  backend::Backend* row_device = rows_on_device ? &backend : nullptr;

  // 1. Plan (each token once per destination rank) and pack the send rows.
  Result<experts::DispatchPlan> plan = experts::build_dispatch_plan(
      placement, rank, {expert_ids, static_cast<size_t>(num_tokens * top_k)},
      {weights, static_cast<size_t>(num_tokens * top_k)}, num_tokens, top_k);
  if (!plan.is_ok()) fail(plan.status());
  const int64_t num_send = plan->num_send_rows();
  PayloadRows send(row_device, num_send, dim);
  if (rows_on_device) {
    backend.gather_rows(h, dim, plan->send_token_idx.data(), num_send, send.data());
    backend.synchronize();  // the payload transport's stream reads what the compute stream wrote
  } else if (backend_on_device) {
    std::vector<float> host_h(static_cast<size_t>(num_tokens * dim));
    backend.to_host(h, num_tokens * dim, host_h.data());
    experts::gather_send_rows(*plan, host_h, static_cast<int>(dim), send.span());
  } else {
    experts::gather_send_rows(*plan, {h, static_cast<size_t>(num_tokens * dim)}, static_cast<int>(dim), send.span());
  }
  const RowRouting routing_format{top_k};
  const std::vector<std::byte> routing_send = pack_row_routing(*plan, routing_format);

  // 2. DISPATCH: row counts, then the routing columns and the rows, with the overlapped
  //    work (shared experts) while both are in flight.
  auto exchange_start = std::chrono::steady_clock::now();
  Result<std::vector<int64_t>> recv_rows = transport_.all_to_all_counts(plan->send_row_counts);
  if (!recv_rows.is_ok()) fail(recv_rows.status());
  int64_t num_recv = 0;
  for (int64_t rows : *recv_rows) num_recv += rows;
  // Every buffer and byte-count vector of a started exchange lives until its wait().
  std::vector<std::byte> routing_recv(static_cast<size_t>(num_recv * routing_format.row_bytes()));
  const std::vector<int64_t> routing_send_bytes = scaled(plan->send_row_counts, routing_format.row_bytes());
  const std::vector<int64_t> routing_recv_bytes = scaled(*recv_rows, routing_format.row_bytes());
  std::unique_ptr<comm::PendingExchange> routing_exchange = transport_.start_all_to_all_v(
      routing_send.data(), routing_send_bytes, routing_recv.data(), routing_recv_bytes);
  PayloadRows recv(row_device, num_recv, dim);
  const std::vector<int64_t> send_bytes = scaled(plan->send_row_counts, row_bytes);
  const std::vector<int64_t> recv_bytes = scaled(*recv_rows, row_bytes);
  std::unique_ptr<comm::PendingExchange> dispatch =
      payload_.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  stats_.all_to_all_s += seconds_since(exchange_start);
  const auto overlap_start = std::chrono::steady_clock::now();
  overlapped();
  stats_.overlapped_s += seconds_since(overlap_start);
  exchange_start = std::chrono::steady_clock::now();
  for (comm::PendingExchange* exchange : {routing_exchange.get(), dispatch.get()}) {
    const Status done = exchange->wait();
    if (!done.is_ok()) fail(done);
  }
  stats_.all_to_all_s += seconds_since(exchange_start);
  stats_.dispatch_bytes_sent += bytes_to_peers(send_bytes, rank);

  // 3. Local experts: the grouped expert FFN over the received rows, one weighted
  //    contribution per (received row, expert).
  const auto compute_start = std::chrono::steady_clock::now();
  const ReceivedRouting received = unpack_row_routing(routing_recv, num_recv, routing_format);
  Result<experts::ExpertComputePlan> compute = experts::build_expert_compute_plan(
      placement, rank, *recv_rows, received.expert_ids, received.weights, top_k);
  if (!compute.is_ok()) fail(compute.status());
  computed_loads_[static_cast<size_t>(layer)] += compute->num_contribs();
  PayloadRows contributions(row_device, compute->num_contribs(), dim);  // [N_c, D]
  backend.grouped_expert_ffn(compute->layout, recv.span(), static_cast<int>(dim), routed_expert_weights(moe),
                             contributions.span());
  if (rows_on_device) backend.synchronize();
  stats_.expert_compute_s += seconds_since(compute_start);

  // 4. COMBINE: contributions go back to their source ranks, summed there in expert-id order.
  exchange_start = std::chrono::steady_clock::now();
  PayloadRows returned(row_device, plan->num_return_rows(), dim);
  const std::vector<int64_t> combine_send = scaled(compute->return_row_counts, row_bytes);
  const Status combined = payload_
                              .start_all_to_all_v(contributions.data(), combine_send, returned.data(),
                                                  scaled(plan->return_row_counts, row_bytes))
                              ->wait();
  if (!combined.is_ok()) fail(combined);
  stats_.all_to_all_s += seconds_since(exchange_start);
  stats_.combine_bytes_sent += bytes_to_peers(combine_send, rank);
  backend.combine_rows(plan->combine_src_rows, top_k, returned.span(), static_cast<int>(dim),
                       {out, static_cast<size_t>(num_tokens * dim)});
}

}  // namespace moert::parallel
