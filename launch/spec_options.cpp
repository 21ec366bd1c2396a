#include "launch/spec_options.h"

#include <cstdio>
#include <sstream>

#include "launch/commands.h"
#include "launch/engine_options.h"
#include "runtime/speculative/draft_model_proposer.h"
#include "runtime/speculative/mtp_proposer.h"

namespace po = boost::program_options;

namespace moert::launch {
namespace {

constexpr int kMaxNumDraft = 32;

int parse_depth(const std::string& text) {
  try {
    size_t used = 0;
    const int k = std::stoi(text, &used);
    if (used == text.size() && k >= 1 && k <= kMaxNumDraft) return k;
  } catch (const std::exception&) {
  }
  throw CommandError("--spec-k '" + text + "' must be an integer in [1, " + std::to_string(kMaxNumDraft) + "] or auto");
}

}  // namespace

void add_spec_options(po::options_description& options, SpecOptions& v) {
  options.add_options()
      ("spec", po::value(&v.method)->default_value("none"), "speculative decoding: none, draft (a draft model), ngram (prompt lookup), mtp (the model's own "
       "DeepSeek multi-token prediction layer; docs/mtp.md)")
      ("draft-model", po::value(&v.draft_model), "draft checkpoint for --spec=draft (same vocabulary as --model)")
      ("spec-k", po::value(&v.num_draft)->default_value("4"), "drafts per sequence and pass, or auto (chosen each step from acceptance and measured costs)")
      ("spec-max-k", po::value(&v.max_num_draft)->default_value(8), "the most drafts with --spec-k auto")
      ("ngram-min", po::value(&v.ngram_min)->default_value(2), "shortest suffix the n-gram proposer matches")
      ("ngram-max", po::value(&v.ngram_max)->default_value(4), "longest suffix the n-gram proposer matches")
      ("draft-kv-blocks", po::value(&v.draft_kv_blocks)->default_value(0), "KV blocks of the draft model's pool (0: as many as the target's)")
      ("draft-fp4-activations", po::value(&v.draft_fp4_activations)->default_value("f32"),
       "what the draft's NVFP4 / MXFP4 weights are computed with: f32, int8 (CPU only; faster) or fp4 (the draft's "
       "rounding changes only which drafts are accepted, never the output distribution)");
}

SpecSetup::SpecSetup(const SpecOptions& options, const ModelConfig& target, engine::EngineConfig* engine,
                     backend::Backend& backend, WeightMemory weight_memory)
    : options_(options) {
  if (options_.method != "none" && options_.method != "draft" && options_.method != "ngram" &&
      options_.method != "mtp") {
    throw CommandError("--spec '" + options_.method + "' is not one of none, draft, ngram, mtp");
  }
  if (options_.method == "mtp") {
    if (target.num_mtp_layers < 1) {
      throw CommandError("--spec mtp: the model has no multi-token prediction layer (config.json "
                         "num_nextn_predict_layers = " + std::to_string(target.num_mtp_layers) + ")");
    }
    // The proposer's cache is host memory (DenseKvCache): the CPU backend only, for now.
    if (backend.device().kind != DeviceKind::kCpu) throw CommandError("--spec mtp runs on the CPU only (--device cpu)");
  }
  if (options_.method != "draft" && !options.draft_model.empty()) {
    throw CommandError("--draft-model " + options.draft_model + " needs --spec=draft (got --spec=" + options_.method + ")");
  }
  if (options_.method == "draft" && options.draft_model.empty()) throw CommandError("--spec=draft needs --draft-model DIR");
  const Result<quant::ActivationPrecision> draft_activations =
      quant::parse_activation_precision(options.draft_fp4_activations);
  if (!draft_activations.is_ok() || *draft_activations == quant::ActivationPrecision::kBf16) {
    throw CommandError("--draft-fp4-activations '" + options.draft_fp4_activations + "' is not one of f32, int8, fp4");
  }
  if (*draft_activations == quant::ActivationPrecision::kInt8 && backend.device().kind != DeviceKind::kCpu) {
    throw CommandError("--draft-fp4-activations " + options.draft_fp4_activations +
                       " runs on the CPU only (the draft computes on the target's device)");
  }
  if (options.draft_kv_blocks < 0 || (options.draft_kv_blocks > 0 && options.draft_kv_blocks < 2)) {
    throw CommandError("--draft-kv-blocks = " + std::to_string(options.draft_kv_blocks) + " must be 0 or >= 2");
  }
  spec::DepthControllerConfig& depth = engine->spec;
  if (options.num_draft == "auto") {
    if (options.max_num_draft < 1 || options.max_num_draft > kMaxNumDraft) {
      throw CommandError("--spec-max-k = " + std::to_string(options.max_num_draft) + " must be in [1, " +
                         std::to_string(kMaxNumDraft) + "]");
    }
    depth.adaptive = true;
    depth.max_num_draft = options.max_num_draft;
    depth_text_ = "auto (K <= " + std::to_string(options.max_num_draft) + ")";
  } else {
    depth.adaptive = false;
    depth.max_num_draft = parse_depth(options.num_draft);
    depth_text_ = "K = " + std::to_string(depth.max_num_draft);
  }
  depth.probe_num_draft = std::min(4, depth.max_num_draft);
  if (options_.method == "ngram") {
    spec::NgramProposerConfig ngram{options.ngram_min, options.ngram_max, depth.max_num_draft};
    const Status valid = spec::validate_ngram_config(ngram);
    if (!valid.is_ok()) throw CommandError("--ngram-min/--ngram-max: " + valid.message());
  }
  if (options_.method == "draft") {
    draft_ = load_model_on(options.draft_model, backend, ActivationModes{.fp4 = *draft_activations}, weight_memory);
    if (draft_->config.vocab_size != target.vocab_size) {
      throw CommandError("draft model " + options.draft_model + " has a vocabulary of " +
                         std::to_string(draft_->config.vocab_size) + " tokens, the target " +
                         std::to_string(target.vocab_size) + ": a draft must share the target's vocabulary");
    }
    // The draft's own cache rolls back by truncation, which a recurrent state cannot do
    // (docs/gated-deltanet.md "Speculative decoding"); the target may have such layers.
    if (draft_->config.linear_attention.enabled()) {
      throw CommandError("draft model " + options.draft_model + " has linear-attention layers (" +
                         architecture_name(draft_->config.arch) +
                         "), which moert does not run as a draft yet: use a full-attention draft or --spec ngram");
    }
  }
}

experts::ExpertPlacement SpecSetup::mtp_expert_placement(int num_experts, int num_ranks) {
  return value_or_throw(experts::contiguous_placement(num_experts, num_ranks));
}

spec::Proposer* SpecSetup::start(const engine::EngineConfig& engine, backend::Backend& backend,
                                 const LoadedModel& target, comm::Transport& transport, comm::Transport* payload) {
  if (options_.method == "mtp") {
    // The module's MoE layer is layer num_layers + k: the executor's per-layer load counters
    // cover it when it counts the MTP layers as layers (its placement is one for all layers).
    mtp_executor_config_ = std::make_unique<ModelConfig>(target.config);
    mtp_executor_config_->num_layers += target.config.num_mtp_layers;
    mtp_experts_ = std::make_unique<parallel::ExpertParallelExperts>(
        *mtp_executor_config_, mtp_expert_placement(target.config.num_experts(), transport.world_size()), transport,
        payload);
    mtp_forward_ = std::make_unique<TransformerForward>(target.config, target.weights, backend);
    mtp_forward_->set_routed_experts(mtp_experts_.get());
    // One rank exchanges nothing: no lock step needed.
    proposer_ = std::make_unique<spec::MtpProposer>(*mtp_forward_, transport.world_size() > 1 ? &transport : nullptr);
  } else if (options_.method == "ngram") {
    proposer_ = std::make_unique<spec::NgramProposer>(
        spec::NgramProposerConfig{options_.ngram_min, options_.ngram_max, engine.spec.max_num_draft});
  } else if (options_.method == "draft") {
    draft_forward_ = std::make_unique<TransformerForward>(draft_->config, draft_->weights, backend);
    spec::DraftModelConfig config;
    config.step_graph_max_batch = engine.step_graph_max_batch;
    config.num_kv_blocks = options_.draft_kv_blocks > 0 ? options_.draft_kv_blocks : engine.num_kv_blocks;
    config.block_size = engine.block_size;
    config.enable_prefix_caching = engine.enable_prefix_caching;
    config.kv_cache_dtype = engine.kv_cache_dtype;
    proposer_ = std::make_unique<spec::DraftModelProposer>(*draft_forward_, config);
  }
  return proposer_.get();
}

std::string SpecSetup::describe() const {
  if (!enabled()) return "spec: off";
  std::string text = "spec: " + options_.method;
  if (options_.method == "draft") text += " (" + options_.draft_model + ", " + describe_model_config(draft_->config) + ")";
  if (options_.method == "mtp") text += " (the model's multi-token prediction layer)";
  if (options_.method == "ngram") {
    text += " (suffix " + std::to_string(options_.ngram_min) + ".." + std::to_string(options_.ngram_max) + " tokens)";
  }
  return text + ", " + depth_text_;
}

std::string SpecSetup::summary(const engine::EngineStats& s) const {
  if (!enabled()) return "";
  const spec::AcceptanceStats& a = s.acceptance;
  std::ostringstream out;
  char text[512];
  std::snprintf(text, sizeof(text),
                "spec: %s, %s: %lld passes, %lld drafts, %lld accepted (rate %.3f), %.3f tokens per pass; draft %.2f s, "
                "verify %.2f s over %lld steps, depth 0 in %lld steps; acceptance by position",
                options_.method.c_str(), depth_text_.c_str(), static_cast<long long>(a.num_passes()),
                static_cast<long long>(a.num_draft_tokens()), static_cast<long long>(a.num_accepted_tokens()),
                a.acceptance_rate(), a.mean_tokens_per_pass(), s.draft_s, s.verify_s,
                static_cast<long long>(s.spec_steps), static_cast<long long>(s.spec_off_steps));
  out << text;
  for (int i = 0; i < a.max_num_draft(); ++i) {
    std::snprintf(text, sizeof(text), " %.3f", a.acceptance_rate_at(i));
    out << text;
  }
  return out.str();
}

std::string SpecSetup::draft_model_digest() const {
  return draft_ ? model_digest(draft_->config, *draft_->checkpoint) : std::string();
}

}  // namespace moert::launch
