// Expert parallelism as a layer over the single-rank transformer: each rank computes only
// the routed experts its placement gives it. Per MoE layer and step, in the stages of
// ExpertParallelLayerStep (prepare | exchange | finalize; expert_parallel.cpp), which a
// caller may interleave with other work:
//   dispatch plan (experts/placement) -> exchange row counts -> start the DISPATCH
//   all-to-alls of the hidden rows and of their routing columns [K expert ids (int32) |
//   K weights] -> shared experts (overlapped) -> wait -> local grouped expert FFN, one
//   weighted output per (row, expert) -> COMBINE all-to-all back -> sum per token in
//   ascending expert id (Backend::combine_rows).
// Two transports: the control transport (host memory: counts, routing columns) and the
// payload transport that moves the float rows. A device payload transport (NCCL) keeps the
// rows on the GPU end to end (packed by Backend::gather_rows, summed by combine_rows); a host
// one (MPI) stages a device backend's rows through the host (docs/expert-parallel-gpu.md).
// Because the combine sums the same products in the same order as LocalRoutedExperts,
// outputs are bit-identical for any number of ranks and any placement.
// Every rank must call run() for every MoE layer in the same order (empty batches too).
#pragma once

#include <cstdint>
#include <vector>

#include "experts/placement/placement.h"
#include "runtime/comm/transport.h"
#include "runtime/parallel/payload_codec.h"
#include "runtime/model/transformer.h"

namespace moert::parallel {

// Running totals since construction (or since the caller last read and reset them).
struct ExpertParallelStats {
  int64_t dispatch_bytes_sent = 0;  // to other ranks only (the self segment is a local copy)
  int64_t combine_bytes_sent = 0;
  double all_to_all_s = 0.0;        // inside the exchanges, waiting for peers included
  double expert_compute_s = 0.0;    // local routed expert FFNs
  double overlapped_s = 0.0;        // the overlapped work (shared experts)
  // How much of the exchange compute hid: every exchange's time from its start to its wait's
  // return (the blocking row-count exchanges count whole), and the part of it spent blocked in
  // waits. Hidden share = 1 - wait / in flight.
  double exchange_in_flight_s = 0.0;
  double exchange_wait_s = 0.0;
};

class ExpertParallelExperts : public RoutedExperts {
 public:
  // placement: one LayerPlacement per model layer (dense layers' entries are unused), or a
  // single one used for every layer. config and the transports must outlive this object.
  // payload_transport: moves the rows (null: `transport` does); same ranks as `transport`.
  // Expert compute runs on the backend run() is given (the model's); a device payload
  // transport needs a device backend. payload_dtypes: what the rows travel as
  // (payload_codec.h); other than f32 they are encoded on the host, so the payload transport
  // must move host buffers. Every routed row takes the trip (the ones staying on this rank
  // too), so outputs do not depend on the rank count or placement for a given pair.
  ExpertParallelExperts(const ModelConfig& config, experts::ExpertPlacement placement, comm::Transport& transport,
                        comm::Transport* payload_transport = nullptr, PayloadDTypes payload_dtypes = {});
  // A transport failure aborts the whole job with a message naming this rank (no hang).
  void run(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h, int64_t num_tokens,
           DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights, DevicePtr<float> out,
           const std::function<void()>& overlapped) override;
  // One rank computes every expert with f32 payloads: the routing stays on the device (no
  // exchange, the loads counted there), so a step graph may record the layer. Narrower
  // payloads take the staged path on one rank too, so that their rounding is the same.
  bool routes_on_device() const override { return transport_.world_size() == 1 && payload_dtypes_.all_f32(); }
  const PayloadDTypes& payload_dtypes() const { return payload_dtypes_; }

  // Micro-batches of the next steps' MoE layers (1 or 2; every rank the same before a step;
  // docs/ep-exchange.md "Micro-batch overlap"). With 2, each layer's tokens split in two halves
  // whose stages interleave: the second half's dispatch is in flight while the first half's
  // experts compute, the first half's combine while the second's compute. Each token's
  // arithmetic and summation order are those of one batch, so outputs are bit-identical.
  // Ignored where the routing stays on the device (one rank, f32 payloads).
  void set_micro_batches(int micro_batches);
  int micro_batches() const { return micro_batches_; }

  // Swaps the placement between steps (every rank must swap to the same one before the
  // next step). Same checks as the constructor (MOERT_CHECK). An expert that moves here is
  // placed on the backend (Backend::place_host_weights) at its layer's next run().
  void set_placement(experts::ExpertPlacement placement);
  const experts::ExpertPlacement& placement() const { return placement_; }

  const ExpertParallelStats& stats() const { return stats_; }
  // Loads since the last take_loads(), flattened [L, E]: tokens this rank ROUTED to each
  // logical expert in each layer (dense layers stay 0).
  std::vector<int64_t> take_routed_loads();
  // [L]: contributions (token x expert products) this rank COMPUTED in each layer.
  std::vector<int64_t> take_computed_loads();

 private:
  friend class ExpertParallelLayerStep;  // one layer's stages over this executor's state
  void check_placement(const experts::ExpertPlacement& placement) const;
  // One rank computes every expert: routing, layout and loads stay on the device.
  void run_on_device(backend::Backend& backend, int layer, const MoeWeights& moe, DevicePtr<const float> h,
                     int64_t num_tokens, DevicePtr<const int32_t> expert_ids, DevicePtr<const float> weights,
                     DevicePtr<float> out,
                     const std::function<void()>& overlapped);
  // Moves the loads counted on the device (one rank) into routed_loads_ / computed_loads_.
  void collect_device_loads();
  // After a placement change: places the weights of the experts `layer` now hosts here.
  void place_hosted_experts(backend::Backend& backend, int layer, const MoeWeights& moe);

  const ModelConfig& config_;
  experts::ExpertPlacement placement_;
  comm::Transport& transport_;
  comm::Transport& payload_;
  const PayloadDTypes payload_dtypes_;
  int micro_batches_ = 1;
  // The placement's version (set_placement counts up; the initial one, 0, was laid out with
  // the model) and the version each layer's hosted experts were placed for.
  int placement_version_ = 0;
  std::vector<int> placed_version_;  // [L]
  ExpertParallelStats stats_;
  std::vector<int64_t> routed_loads_;    // [L, E]
  std::vector<int64_t> computed_loads_;  // [L]
  // One rank: the routed loads [L, E] counted on the device of loads_backend_ (running
  // totals) and the totals the last collect_device_loads() saw.
  backend::Backend* loads_backend_ = nullptr;
  Buffer device_loads_;
  std::vector<int64_t> device_loads_seen_;
};

}  // namespace moert::parallel
