#include "launch/rank_worker.h"

#include "launch/commands.h"

namespace moert::launch {

RankWorker::RankWorker(comm::Transport& transport, const RankWorkerOptions& options)
    : transport_(transport), options_(options) {
  const EngineOptions& e = options_.engine;
  const ActivationModes activations =
      resolve_activation_modes(e.fp4_activations, e.fp8_activations, e.bf16_activations, e.device);
  const WeightMemory weight_memory = resolve_weight_memory(e.weight_memory, e.device);
  threads_ = resolve_threads(e);
  pool_ = std::make_unique<ThreadPool>(threads_);
  backend_ = open_device_backend(e.device, *pool_);
  model_ = load_model_from(options_.model_dir, activations, SpecSetup::mtp_layer_needed(options_.spec));
  engine_config_ = resolve_engine_config(e, model_->config, backend_->preferred_kv_cache_dtype());
  engine_config_->forward_when_idle = true;
  spec_ = std::make_unique<SpecSetup>(options_.spec, model_->config, &*engine_config_, *backend_, weight_memory);
  const int num_experts = model_->config.num_experts();
  if (num_experts < 1) throw CommandError(options_.model_dir + " has no routed experts");
  const std::string& path = options_.placement_path;
  initial_placement_ = path.empty() ? value_or_throw(experts::contiguous_placement(num_experts, transport_.world_size()))
                                    : value_or_throw(experts::load_placement_json(path, num_experts));
  if (initial_placement_->num_ranks() != transport_.world_size()) {
    throw CommandError(path + " places experts on " + std::to_string(initial_placement_->num_ranks()) +
                       " ranks, the job has " + std::to_string(transport_.world_size()));
  }
  if (initial_placement_->num_layers() != 1 && initial_placement_->num_layers() != model_->config.num_layers) {
    throw CommandError(path + " has " + std::to_string(initial_placement_->num_layers()) + " layers, the model " +
                       std::to_string(model_->config.num_layers) + " (or give 1 for all)");
  }
  // The backend lays out only the routed experts this rank computes (the placement's); an
  // expert the balancer moves here later computes from the checkpoint's layout (same bits).
  const experts::ExpertPlacement& placement = *initial_placement_;
  const int rank = transport_.rank();
  // The MTP layer (past num_layers, loaded under --spec mtp) has its own fixed slicing.
  const int num_layers = model_->config.num_layers;
  const experts::ExpertPlacement mtp_placement = SpecSetup::mtp_expert_placement(num_experts, transport_.world_size());
  lay_out_model(*model_, *backend_, activations, weight_memory, [&](int layer, int expert) {
    return layer >= num_layers ? mtp_placement.layer(0).rank_hosts(rank, expert)
                               : placement.for_model_layer(layer).rank_hosts(rank, expert);
  });
}

RankWorker::~RankWorker() = default;

const experts::ExpertPlacement& RankWorker::placement() const {
  return experts_ ? experts_->placement() : *initial_placement_;
}

void RankWorker::start() {
  forward_ = std::make_unique<TransformerForward>(model_->config, model_->weights, *backend_);
  row_transport_ = open_row_transport(options_.engine.ep_transport, *backend_, transport_);
  const parallel::PayloadDTypes payload_dtypes = resolve_payload_dtypes(options_.engine);
  if (!payload_dtypes.all_f32() && row_transport_ != nullptr &&
      row_transport_->buffer_location() == comm::BufferLocation::kDevice) {
    throw CommandError(std::string("--ep-dispatch-dtype ") + parallel::payload_dtype_name(payload_dtypes.dispatch) +
                       " --ep-combine-dtype " + parallel::payload_dtype_name(payload_dtypes.combine) +
                       " needs --ep-transport mpi here (the rows are encoded on the host; NCCL moves device rows)");
  }
  experts_ = std::make_unique<parallel::ExpertParallelExperts>(model_->config, std::move(*initial_placement_), transport_,
                                                               row_transport_.get(), payload_dtypes);
  initial_placement_.reset();
  forward_->set_routed_experts(experts_.get());
  proposer_ = spec_->start(*engine_config_, *backend_, *model_, transport_, row_transport_.get());
}

}  // namespace moert::launch
