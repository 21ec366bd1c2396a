// Speculative-decoding options shared by `moert run` and `moert bench`: the proposer
// (--spec none|draft|ngram, --draft-model), the depth (--spec-k K|auto, --spec-max-k) and
// the n-gram window; and the summary line of the acceptance statistics.
#pragma once

#include <boost/program_options.hpp>
#include <memory>
#include <string>

#include "runtime/engine/engine.h"
#include "runtime/model/weights.h"
#include "runtime/speculative/proposer.h"

namespace moert::launch {

struct SpecOptions {
  std::string method = "none";  // none, draft, ngram
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
  // there too, its decode steps as step graphs under engine.step_graph_max_batch) must outlive
  // this object.
  spec::Proposer* start(const engine::EngineConfig& engine, backend::Backend& backend);
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
  std::unique_ptr<spec::Proposer> proposer_;
};

}  // namespace moert::launch
