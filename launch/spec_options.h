// Speculative-decoding options shared by `moert run` and `moert bench`: the proposer
// (--spec none|draft|ngram, --draft-model), the depth (--spec-k K|auto, --spec-max-k) and
// the n-gram window; and the summary line of the acceptance statistics.
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <string>

#include "experts/placement/placement.h"
#include "runtime/comm/transport.h"
#include "runtime/engine/engine.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/model/weights.h"
#include "runtime/speculative/proposer.h"

namespace moert::launch {

struct SpecOptions {
  std::string method = "none";  // none, draft, ngram, mtp
  std::string draft_model;      // checkpoint directory for --spec=draft
  std::string num_draft = "4";  // K, or "auto"
  int max_num_draft = 8;        // the most drafts with --spec-k auto
  int ngram_min = 2;
  int ngram_max = 4;
  int draft_kv_blocks = 0;      // 0: as many blocks as the target pool
  std::string draft_fp4_activations = "f32";  // f32, int8: the draft's FP4 weights on the CPU
};

void add_spec_options(boost::program_options::options_description& options, SpecOptions& values);

// What speculation needs alive while the engine runs. Built in two phases so that a bad
// option or draft checkpoint is reported during setup (before any rank starts serving).
class SpecSetup {
 public:
  // Validates the options against the target (throws CommandError naming the option or
  // the checkpoint), loads the draft model laid out by the target's `backend` (a CPU one
  // holds its weights as `weight_memory` says; docs/cuda-backend.md), and sets engine->spec.
  SpecSetup(const SpecOptions& options, const ModelConfig& target, engine::EngineConfig* engine,
            backend::Backend& backend, WeightMemory weight_memory = WeightMemory::kCopy);
  // Creates the proposer (null with --spec=none); `backend` (the target's: the draft computes
  // there too, its decode steps as step graphs under engine.step_graph_max_batch) and `target`
  // (loaded with its MTP layer under --spec mtp: mtp_layer_needed()) must outlive this object.
  // Under --spec mtp the module's routed experts are computed by an expert-parallel executor
  // over `transport` (the job's control transport) and `payload` (its row transport, may be
  // null), laid out as mtp_expert_placement() says; both must outlive this object.
  spec::Proposer* start(const engine::EngineConfig& engine, backend::Backend& backend, const LoadedModel& target,
                        comm::Transport& transport, comm::Transport* payload);
  // Whether the target must be loaded with its MTP layer (LoadOptions::mtp).
  static bool mtp_layer_needed(const SpecOptions& options) { return options.method == "mtp"; }
  // Which rank computes each routed expert of the MTP layer: contiguous slices, as the main
  // layers' default placement; the balancer never moves them (docs/mtp.md).
  static experts::ExpertPlacement mtp_expert_placement(int num_experts, int num_ranks);
  bool enabled() const { return options_.method != "none"; }
  // The effective configuration, one line for start-up ("spec: draft (DIR), K = 4, ...").
  std::string describe() const;
  // One line: method, depth, passes, acceptance (overall and per position), tokens per
  // pass, draft and verify time. Empty when speculation is off.
  std::string summary(const engine::EngineStats& stats) const;
  // The draft checkpoint's digest (model_digest), empty without one.
  std::string draft_model_digest() const;

 private:
  std::string depth_text_;
  SpecOptions options_;
  std::unique_ptr<LoadedModel> draft_;
  std::unique_ptr<TransformerForward> draft_forward_;
  // --spec mtp: the module's forward over the target's weights, its expert executor and the
  // config that executor counts loads against (the main layers and the MTP layers).
  std::unique_ptr<ModelConfig> mtp_executor_config_;
  std::unique_ptr<parallel::ExpertParallelExperts> mtp_experts_;
  std::unique_ptr<TransformerForward> mtp_forward_;
  std::unique_ptr<spec::Proposer> proposer_;
};

}  // namespace moert::launch
