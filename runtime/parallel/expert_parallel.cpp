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
                                             comm::Transport& transport, comm::Transport* payload_transport,
                                             PayloadDTypes payload_dtypes)
    : config_(config),
      placement_(std::move(placement)),
      transport_(transport),
      payload_(payload_transport != nullptr ? *payload_transport : transport),
      payload_dtypes_(payload_dtypes),
      routed_loads_(static_cast<size_t>(config.num_layers) * static_cast<size_t>(config.num_experts()), 0),
      computed_loads_(static_cast<size_t>(config.num_layers), 0) {
  check_placement(placement_);
  MOERT_CHECK(payload_.world_size() == transport_.world_size() && payload_.rank() == transport_.rank(),
              "the payload transport is rank " << payload_.rank() << " of " << payload_.world_size()
                                               << ", the control transport rank " << transport_.rank() << " of "
                                               << transport_.world_size());
  MOERT_CHECK(payload_dtypes_.all_f32() || payload_.buffer_location() == comm::BufferLocation::kHost,
              "dispatch " << payload_dtype_name(payload_dtypes_.dispatch) << " / combine "
                          << payload_dtype_name(payload_dtypes_.combine)
                          << " payloads are encoded on the host: they need a host payload transport (MPI)");
}

void ExpertParallelExperts::check_placement(const experts::ExpertPlacement& placement) const {
  MOERT_CHECK(placement.num_ranks() == transport_.world_size(),
              "placement has " << placement.num_ranks() << " ranks, the job has " << transport_.world_size());
  MOERT_CHECK(placement.num_layers() == 1 || placement.num_layers() == config_.num_layers,
              "placement has " << placement.num_layers() << " layers, the model " << config_.num_layers);
  MOERT_CHECK(placement.num_experts() == config_.num_experts(),
              "placement has " << placement.num_experts() << " experts, the model " << config_.num_experts());
}

void ExpertParallelExperts::set_micro_batches(int micro_batches) {
  MOERT_CHECK(micro_batches == 1 || micro_batches == 2, "micro-batches must be 1 or 2, not " << micro_batches);
  micro_batches_ = micro_batches;
}

void ExpertParallelExperts::set_placement(experts::ExpertPlacement placement) {
  check_placement(placement);
  placement_ = std::move(placement);
  ++placement_version_;
}

void ExpertParallelExperts::place_hosted_experts(backend::Backend& backend, int layer, const MoeWeights& moe) {
  if (placed_version_.size() <= static_cast<size_t>(layer)) placed_version_.resize(static_cast<size_t>(layer) + 1, 0);
  int& placed = placed_version_[static_cast<size_t>(layer)];
  if (placed == placement_version_) return;
  placed = placement_version_;
  const experts::LayerPlacement& hosts = placement_.for_model_layer(layer);
  for (int expert = 0; expert < static_cast<int>(moe.experts.size()); ++expert) {
    if (!hosts.rank_hosts(transport_.rank(), expert)) continue;
    for_each_weight_region(moe.experts[static_cast<size_t>(expert)],
                           [&](const void* data, int64_t bytes) { backend.place_host_weights(data, bytes); });
  }
}

// The device counters only grow; what is new since the last collection is the difference to
// the totals seen then (one copy, nothing written back).
void ExpertParallelExperts::collect_device_loads() {
  if (loads_backend_ == nullptr) return;
  const auto num_experts = static_cast<size_t>(config_.num_experts());
  std::vector<int64_t> totals(routed_loads_.size());
  loads_backend_->copy_bytes(totals, device_loads_.ptr<const void>(),
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
  PayloadRows() = default;
  PayloadRows(backend::Backend* device, int64_t num_rows, int64_t dim) : count_(num_rows * dim) {
    if (device != nullptr) {
      device_ = device->allocate(DType::kF32, {std::max<int64_t>(num_rows, 1), dim});
    } else {
      host_.resize(static_cast<size_t>(count_));
    }
  }
  float* data() { return ptr().get(); }
  DevicePtr<float> ptr() { return host_.empty() ? device_.ptr<float>() : DevicePtr<float>(host_); }
  DeviceSpan<float> span() { return {ptr(), static_cast<size_t>(count_)}; }

 private:
  int64_t count_ = 0;
  Buffer device_;
  std::vector<float> host_;
};

}  // namespace

// One MoE layer's expert-parallel work for one batch of tokens, in stages (the executor's
// prepare | exchange | finalize split, after vLLM's FusedMoEPrepareAndFinalize):
//   prepare()          plan (each token once per destination rank), routing columns, pack
//                      the send rows where the payload transport reads them;
//   start_dispatch()   row counts, then the routing columns and the rows in flight;
//   finish_dispatch()  wait for both;
//   compute()          the local grouped expert FFN, one weighted row per (row, expert);
//   start_combine()    the contributions in flight back to their source ranks;
//   finish(out)        wait, then sum each token's contributions in ascending expert id.
// Stages run in this order; between start_* and finish_* the caller may run other work
// (the shared experts; another micro-batch's stages). Where the rows live is the row path's
// business (RowPath): host rows (CPU backend, host transport), rows staged through the host
// (device backend, host transport), or device rows end to end (device backend, NCCL).
// Every buffer of a started exchange is a member, alive until its wait.
class ExpertParallelLayerStep {
 public:
  ExpertParallelLayerStep(ExpertParallelExperts& executor, backend::Backend& backend, int layer, const MoeWeights& moe,
                          DevicePtr<const float> h, int64_t num_tokens, DevicePtr<const int32_t> expert_ids,
                          DevicePtr<const float> weights)
      : x_(executor),
        backend_(backend),
        layer_(layer),
        moe_(moe),
        h_(h),
        num_tokens_(num_tokens),
        expert_ids_(expert_ids),
        weights_(weights),
        rank_(x_.transport_.rank()),
        top_k_(x_.config_.top_k()),
        dim_(x_.config_.hidden_size),
        dtypes_(x_.payload_dtypes_),
        dispatch_row_bytes_(payload_row_bytes(dtypes_.dispatch, dim_)),
        combine_row_bytes_(payload_row_bytes(dtypes_.combine, dim_)),
        placement_(x_.placement_.for_model_layer(layer)),
        rows_on_device_(x_.payload_.buffer_location() == comm::BufferLocation::kDevice),
        backend_on_device_(backend.device().kind != DeviceKind::kCpu),
        row_device_(rows_on_device_ ? &backend : nullptr) {
    MOERT_CHECK(!rows_on_device_ || backend_on_device_,
                "a device payload transport needs a device backend, not " << backend.name());
  }

  void prepare() {
    const int num_experts = x_.config_.num_experts();
    const int32_t* expert_ids = expert_ids_.host("the expert-parallel routing");  // routes_on_device() is false
    for (int64_t i = 0; i < num_tokens_ * top_k_; ++i) {
      const int32_t e = expert_ids[i];
      MOERT_CHECK(e >= 0 && e < num_experts, "expert id " << e << " outside [0, " << num_experts << ")");
      ++x_.routed_loads_[static_cast<size_t>(layer_) * static_cast<size_t>(num_experts) + static_cast<size_t>(e)];
    }
    Result<experts::DispatchPlan> plan = experts::build_dispatch_plan(
        placement_, rank_, {expert_ids, static_cast<size_t>(num_tokens_ * top_k_)},
        {weights_.host("the expert-parallel routing"), static_cast<size_t>(num_tokens_ * top_k_)}, num_tokens_, top_k_);
    if (!plan.is_ok()) fail(plan.status());
    plan_ = std::move(plan).value();
    const int64_t num_send = plan_.num_send_rows();
    send_ = PayloadRows(row_device_, num_send, dim_);
    if (rows_on_device_) {
      backend_.gather_rows(h_, dim_, plan_.send_token_idx.data(), num_send, send_.ptr());
      backend_.synchronize();  // the payload transport's stream reads what the compute stream wrote
    } else if (backend_on_device_) {
      std::vector<float> host_h(static_cast<size_t>(num_tokens_ * dim_));
      backend_.to_host(h_, num_tokens_ * dim_, host_h.data());
      experts::gather_send_rows(plan_, host_h, static_cast<int>(dim_), send_.span().host());
    } else {
      experts::gather_send_rows(plan_, {h_.host("h"), static_cast<size_t>(num_tokens_ * dim_)}, static_cast<int>(dim_),
                                send_.span().host());
    }
    routing_send_ = pack_row_routing(plan_, routing_format());
    if (dtypes_.dispatch != PayloadDType::kF32) {
      send_wire_.resize(static_cast<size_t>(num_send * dispatch_row_bytes_));
      encode_payload_rows(dtypes_.dispatch, send_.data(), num_send, dim_, send_wire_.data());
    }
  }

  void start_dispatch() {
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<int64_t>> recv_rows = x_.transport_.all_to_all_counts(plan_.send_row_counts);
    if (!recv_rows.is_ok()) fail(recv_rows.status());
    recv_rows_ = std::move(recv_rows).value();
    num_recv_ = 0;
    for (int64_t rows : recv_rows_) num_recv_ += rows;
    const RowRouting format = routing_format();
    routing_recv_.resize(static_cast<size_t>(num_recv_ * format.row_bytes()));
    routing_send_bytes_ = scaled(plan_.send_row_counts, format.row_bytes());
    routing_recv_bytes_ = scaled(recv_rows_, format.row_bytes());
    routing_exchange_ = x_.transport_.start_all_to_all_v(routing_send_.data(), routing_send_bytes_,
                                                         routing_recv_.data(), routing_recv_bytes_);
    recv_ = PayloadRows(row_device_, num_recv_, dim_);
    send_bytes_ = scaled(plan_.send_row_counts, dispatch_row_bytes_);
    recv_bytes_ = scaled(recv_rows_, dispatch_row_bytes_);
    void* recv = recv_.data();
    const void* send = send_.data();
    if (dtypes_.dispatch != PayloadDType::kF32) {
      recv_wire_.resize(static_cast<size_t>(num_recv_ * dispatch_row_bytes_));
      recv = recv_wire_.data();
      send = send_wire_.data();
    }
    dispatch_ = x_.payload_.start_all_to_all_v(send, send_bytes_, recv, recv_bytes_);
    x_.stats_.all_to_all_s += seconds_since(start);
    x_.stats_.exchange_in_flight_s += seconds_since(start);  // the blocking counts and the starts
    x_.stats_.exchange_wait_s += seconds_since(start);
    dispatch_started_ = std::chrono::steady_clock::now();
  }

  void finish_dispatch() {
    const auto start = std::chrono::steady_clock::now();
    for (comm::PendingExchange* exchange : {routing_exchange_.get(), dispatch_.get()}) {
      const Status done = exchange->wait();
      if (!done.is_ok()) fail(done);
    }
    x_.stats_.all_to_all_s += seconds_since(start);
    x_.stats_.exchange_wait_s += seconds_since(start);
    x_.stats_.exchange_in_flight_s += seconds_since(dispatch_started_);
    x_.stats_.dispatch_bytes_sent += bytes_to_peers(send_bytes_, rank_);
    if (dtypes_.dispatch != PayloadDType::kF32) {
      decode_payload_rows(dtypes_.dispatch, recv_wire_.data(), num_recv_, dim_, recv_.data());
    }
  }

  void compute() {
    const auto start = std::chrono::steady_clock::now();
    const ReceivedRouting received = unpack_row_routing(routing_recv_, num_recv_, routing_format());
    Result<experts::ExpertComputePlan> compute = experts::build_expert_compute_plan(
        placement_, rank_, recv_rows_, received.expert_ids, received.weights, top_k_);
    if (!compute.is_ok()) fail(compute.status());
    compute_ = std::move(compute).value();
    x_.computed_loads_[static_cast<size_t>(layer_)] += compute_.num_contribs();
    contributions_ = PayloadRows(row_device_, compute_.num_contribs(), dim_);  // [N_c, D]
    backend_.grouped_expert_ffn(compute_.layout, recv_.span(), static_cast<int>(dim_), routed_expert_weights(moe_),
                                contributions_.span());
    if (rows_on_device_) backend_.synchronize();
    if (dtypes_.combine != PayloadDType::kF32) {
      combine_wire_.resize(static_cast<size_t>(compute_.num_contribs() * combine_row_bytes_));
      encode_payload_rows(dtypes_.combine, contributions_.data(), compute_.num_contribs(), dim_, combine_wire_.data());
    }
    x_.stats_.expert_compute_s += seconds_since(start);
  }

  void start_combine() {
    const auto start = std::chrono::steady_clock::now();
    returned_ = PayloadRows(row_device_, plan_.num_return_rows(), dim_);
    combine_send_bytes_ = scaled(compute_.return_row_counts, combine_row_bytes_);
    combine_recv_bytes_ = scaled(plan_.return_row_counts, combine_row_bytes_);
    const void* send = contributions_.data();
    void* recv = returned_.data();
    if (dtypes_.combine != PayloadDType::kF32) {
      returned_wire_.resize(static_cast<size_t>(plan_.num_return_rows() * combine_row_bytes_));
      send = combine_wire_.data();
      recv = returned_wire_.data();
    }
    combine_ = x_.payload_.start_all_to_all_v(send, combine_send_bytes_, recv, combine_recv_bytes_);
    x_.stats_.all_to_all_s += seconds_since(start);
    combine_started_ = start;
  }

  void finish(DevicePtr<float> out) {
    const auto start = std::chrono::steady_clock::now();
    const Status combined = combine_->wait();
    if (!combined.is_ok()) fail(combined);
    x_.stats_.all_to_all_s += seconds_since(start);
    x_.stats_.exchange_wait_s += seconds_since(start);
    x_.stats_.exchange_in_flight_s += seconds_since(combine_started_);
    x_.stats_.combine_bytes_sent += bytes_to_peers(combine_send_bytes_, rank_);
    if (dtypes_.combine != PayloadDType::kF32) {
      decode_payload_rows(dtypes_.combine, returned_wire_.data(), plan_.num_return_rows(), dim_, returned_.data());
    }
    backend_.combine_rows(plan_.combine_src_rows, top_k_, returned_.span(), static_cast<int>(dim_),
                          DeviceSpan<float>(out, static_cast<size_t>(num_tokens_ * dim_)));
  }

 private:
  RowRouting routing_format() const { return RowRouting{top_k_}; }
  // A transport failure aborts the whole job with a message naming this rank (no hang).
  void fail(const Status& status) const {
    x_.transport_.abort(1, "rank " + std::to_string(rank_) + ", layer " + std::to_string(layer_) +
                               " expert-parallel step: " + status.message());
  }

  ExpertParallelExperts& x_;
  backend::Backend& backend_;
  const int layer_;
  const MoeWeights& moe_;
  const DevicePtr<const float> h_;
  const int64_t num_tokens_;
  const DevicePtr<const int32_t> expert_ids_;
  const DevicePtr<const float> weights_;
  const int rank_;
  const int top_k_;
  const int64_t dim_;
  const PayloadDTypes dtypes_;        // what the rows travel as (host rows when not f32)
  const int64_t dispatch_row_bytes_;  // one hidden row on the wire
  const int64_t combine_row_bytes_;   // one contribution on the wire
  const experts::LayerPlacement& placement_;
  const bool rows_on_device_;     // the payload transport moves device buffers (NCCL)
  const bool backend_on_device_;  // the experts compute on a device
  backend::Backend* row_device_;  // where payload rows are allocated: the backend, or null (host)

  experts::DispatchPlan plan_;
  PayloadRows send_;
  // Encoded rows (payload dtypes other than f32): what the payload transport moves instead
  // of the float rows, decoded on arrival.
  std::vector<std::byte> send_wire_, recv_wire_, combine_wire_, returned_wire_;
  std::vector<std::byte> routing_send_, routing_recv_;
  std::vector<int64_t> recv_rows_;
  int64_t num_recv_ = 0;
  std::vector<int64_t> routing_send_bytes_, routing_recv_bytes_, send_bytes_, recv_bytes_;
  std::unique_ptr<comm::PendingExchange> routing_exchange_, dispatch_;
  PayloadRows recv_;
  experts::ExpertComputePlan compute_;
  PayloadRows contributions_;
  PayloadRows returned_;
  std::vector<int64_t> combine_send_bytes_, combine_recv_bytes_;
  std::unique_ptr<comm::PendingExchange> combine_;
  std::chrono::steady_clock::time_point dispatch_started_, combine_started_;
};

void ExpertParallelExperts::run(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h,
                                int64_t num_tokens, DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights,
                                DevicePtr<float> out, const std::function<void()>& overlapped) {
  if (routes_on_device()) {  // every expert here: the routing and the loads stay on the device
    run_on_device(backend, layer, moe, h, num_tokens, expert_ids, weights, out, overlapped);
    return;
  }
  place_hosted_experts(backend, layer, moe);
  auto run_overlapped = [&] {
    const auto overlap_start = std::chrono::steady_clock::now();
    overlapped();  // the shared experts, while a dispatch is in flight
    stats_.overlapped_s += seconds_since(overlap_start);
  };
  if (micro_batches_ == 1) {
    ExpertParallelLayerStep step(*this, backend, layer, moe, h, num_tokens, expert_ids, weights);
    step.prepare();
    step.start_dispatch();
    run_overlapped();
    step.finish_dispatch();
    step.compute();
    step.start_combine();
    step.finish(out);
    return;
  }
  // Two halves (the first one takes the odd token; either may be empty, and every rank still
  // runs both halves' collectives in this order).
  const int64_t first = (num_tokens + 1) / 2;
  const int64_t dim = config_.hidden_size;
  const int64_t k = config_.top_k();
  ExpertParallelLayerStep a(*this, backend, layer, moe, h, first, expert_ids, weights);
  ExpertParallelLayerStep b(*this, backend, layer, moe, h + first * dim, num_tokens - first, expert_ids + first * k,
                            weights + first * k);
  a.prepare();
  a.start_dispatch();
  b.prepare();         // while a's dispatch is in flight
  b.start_dispatch();
  run_overlapped();    // while both are
  a.finish_dispatch();
  a.compute();         // while b's dispatch is in flight
  a.start_combine();
  b.finish_dispatch();
  b.compute();         // while a's combine is in flight
  b.start_combine();
  a.finish(out);
  b.finish(out + first * dim);
}

void ExpertParallelExperts::run_on_device(backend::Backend& backend, int layer, const MoeWeights& moe,
                                          DevicePtr<const float> h, int64_t num_tokens,
                                          DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights,
                                          DevicePtr<float> out, const std::function<void()>& overlapped) {
  const int top_k = config_.top_k();
  const int num_experts = config_.num_experts();
  overlapped();
  if (loads_backend_ != &backend) {
    collect_device_loads();
    loads_backend_ = &backend;
    device_loads_ = backend.allocate(DType::kI64, {static_cast<int64_t>(routed_loads_.size())});
    device_loads_seen_.assign(routed_loads_.size(), 0);
    backend.copy_bytes(device_loads_.ptr<void>(), device_loads_seen_,
                       static_cast<int64_t>(device_loads_seen_.size() * sizeof(int64_t)));
  }
  backend.count_experts(expert_ids, num_tokens * top_k, num_experts,
                        device_loads_.ptr<int64_t>() + static_cast<int64_t>(layer) * num_experts);
  backend::routed_experts_on(backend, h, num_tokens, static_cast<int>(config_.hidden_size), expert_ids, weights, top_k,
                             num_experts, routed_expert_weights(moe), out);
}

}  // namespace moert::parallel
