// The composition root of a batch job's rank: the one place that names every concrete part
// one rank of `moert run` / `moert bench` serves with (the backend of --device, the model laid
// out for it, the expert placement, the row transport, the expert-parallel executor, the
// forward, the speculative proposer) and wires them. Commands build one and take its parts.
//
// Two phases, so that every rank's set-up error is agreed on (agree_on_setup) before any rank
// enters a collective that a failed peer would never join:
//   RankWorker(...)  loads and checks (throws CommandError naming the problem; no collective);
//   start()          builds the compute side (collective over the job's transport: NCCL).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/thread_pool.h"
#include "experts/placement/placement.h"
#include "launch/engine_options.h"
#include "launch/spec_options.h"
#include "runtime/backend/backend.h"
#include "runtime/comm/transport.h"
#include "runtime/engine/engine.h"
#include "runtime/model/weights.h"
#include "runtime/parallel/expert_parallel.h"

namespace moert::launch {

struct RankWorkerOptions {
  std::string model_dir;
  EngineOptions engine;
  SpecOptions spec;
  std::string placement_path;  // expert placement JSON; empty: contiguous slices
};

class RankWorker {
 public:
  // Phase 1 on this rank of `transport`'s job (which must outlive the worker). The engine
  // configuration is resolved for lock-step serving (forward_when_idle).
  RankWorker(comm::Transport& transport, const RankWorkerOptions& options);
  ~RankWorker();
  RankWorker(const RankWorker&) = delete;
  RankWorker& operator=(const RankWorker&) = delete;

  // Phase 2, collective: every rank calls it after agree_on_setup.
  void start();

  const LoadedModel& model() const { return *model_; }
  engine::EngineConfig& engine_config() { return *engine_config_; }
  const engine::EngineConfig& engine_config() const { return *engine_config_; }
  const SpecSetup& spec() const { return *spec_; }
  int threads() const { return threads_; }
  const backend::Backend& backend() const { return *backend_; }
  // The placement in use: the initial one before start(), the executor's after.
  const experts::ExpertPlacement& placement() const;
  // After start():
  TransformerForward& forward() { return *forward_; }
  parallel::ExpertParallelExperts& experts() { return *experts_; }
  spec::Proposer* proposer() { return proposer_; }

 private:
  comm::Transport& transport_;
  RankWorkerOptions options_;
  int threads_ = 1;
  // Declared in construction order, destroyed in reverse: nothing outlives what it uses.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<backend::Backend> backend_;  // the CPU backend over pool_, or a device's
  std::unique_ptr<LoadedModel> model_;
  std::optional<engine::EngineConfig> engine_config_;
  std::unique_ptr<SpecSetup> spec_;
  std::optional<experts::ExpertPlacement> initial_placement_;
  // After start():
  std::unique_ptr<TransformerForward> forward_;
  std::unique_ptr<comm::Transport> row_transport_;
  std::unique_ptr<parallel::ExpertParallelExperts> experts_;
  spec::Proposer* proposer_ = nullptr;  // owned by spec_
};

}  // namespace moert::launch
