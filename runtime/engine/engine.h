// The single-rank serving engine: continuous batching over the paged KV cache. One step =
// [speculative decoding: draft tokens for the sequences ready to decode (a Proposer, K from
// the depth controller)] -> schedule (scheduler.h) -> copy-on-write block copies -> one
// transformer forward over all scheduled chunks with paged attention (a speculative chunk
// asks for the logits of its last token and every draft) -> sample the sequences whose
// chunk reached their last token, or verify their drafts with the rejection sampler and
// roll the rejected ones back -> finish requests. Requests with n > 1 prefill once and
// fork into n samples that share the prompt's blocks; with n > max_seqs in waves of at most
// max_seqs samples (docs/requests.md), with the same tokens as in one wave.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "attention/cache/kv_cache_manager.h"
#include "attention/paged_kv.h"
#include "runtime/runner/model_runner.h"
#include "core/status.h"
#include "runtime/engine/guided_decoding.h"
#include "runtime/engine/scheduler.h"
#include "runtime/engine/token_text.h"
#include "runtime/model/transformer.h"
#include "runtime/sampling/logprobs.h"
#include "runtime/sampling/sampler.h"
#include "runtime/speculative/adaptive_depth.h"
#include "runtime/speculative/depth_controller.h"
#include "runtime/speculative/proposer.h"

namespace moert::engine {

// The most samples (n) one request may ask for: its outputs are held until its last sample
// finishes.
inline constexpr int kMaxSamplesPerRequest = 4096;

struct Request {
  std::string id;       // the id as text (a string id's value, else its JSON), for messages and seeds
  std::string id_json;  // the id exactly as JSON (any type), echoed in the output; empty: "id" as a string
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  uint64_t default_seed = 0;  // used when params.seed == -1 (derived from the id by the reader)
};

struct SampleOutput {
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // "stop" or "length"
  // With a TokenText (Engine::set_token_text): the decoded text, special tokens skipped, cut
  // before a stop string.
  std::optional<std::string> text;
  // Why "stop": a stop string, or a stop token id (null for an EOS id, as vLLM reports it).
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token;
  // With params.logprobs >= 0: one entry per token of token_ids.
  std::vector<sampling::TokenLogprob> logprobs;
};

struct RequestOutput {
  std::string id;
  std::string id_json;  // Request::id_json
  std::vector<SampleOutput> outputs;  // [n], by sample index
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;          // over all samples
  int64_t cached_prompt_tokens = 0;   // served by the prefix cache at first admission
  int num_preemptions = 0;
  double time_s = 0.0;                // from add_request to finish
  // Latency (sample 0), in seconds: queue_s from add_request to the first step that
  // schedules the request, ttft_s from then to its first token, e2e_s from then to finish.
  double queue_s = 0.0;
  double ttft_s = 0.0;
  double e2e_s = 0.0;
  // With EngineConfig::record_token_times: when each token of sample 0 was emitted, from the
  // first schedule (tokens accepted in one speculative pass share a time).
  std::vector<double> token_times_s;
};

struct EngineConfig {
  int block_size = 16;           // tokens per KV block
  int num_kv_blocks = 4096;      // blocks in the pool, including the reserved null block
  DType kv_cache_dtype = DType::kF32;  // F32, BF16 or F8_E4M3 (docs/kv-cache.md)
  bool enable_prefix_caching = true;
  bool record_token_times = false;  // fill RequestOutput::token_times_s (benchmarks)
  // Decode steps of up to this many sequences run as step graphs where the backend records
  // them (CUDA graphs; runner::PagedModelRunner::enable_step_graphs); 0: every step eagerly.
  int step_graph_max_batch = 0;
  // Expert-parallel ranks step in lock-step: run the model (with no tokens) even when
  // this rank has nothing scheduled, so it takes part in every MoE layer's exchanges.
  bool forward_when_idle = false;
  // The model's end-of-sequence ids (generation_config.json): every request stops on them
  // unless it sets ignore_eos (SamplingParams::eos_token_ids).
  std::vector<int32_t> eos_token_ids;
  SchedulerConfig scheduler;
  // Speculative decoding (used when a proposer is set): K drafts per sequence and pass, or
  // with adaptive, K in [0, max_num_draft] chosen every step (depth_controller.h).
  spec::DepthControllerConfig spec;
};
Status validate_engine_config(const EngineConfig& config);

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // prompt tokens of finished requests
  int64_t computed_tokens = 0;   // tokens run through the model (prefill + decode + recompute)
  int64_t output_tokens = 0;
  int64_t preemptions = 0;
  int64_t cow_copies = 0;
  int peak_used_blocks = 0;
  int64_t unused_slots_at_peak = 0;    // reserved-but-empty slots when used blocks peaked
  int64_t running_at_peak = 0;         // running sequences then
  int64_t max_unused_slots_per_seq = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  double forward_s = 0.0;
  double sample_s = 0.0;
  runner::StepGraphStats step_graphs;    // the target model's decode steps as step graphs
  // Speculative decoding.
  spec::AcceptanceStats acceptance;  // per verified pass (a pass = one sequence's K drafts)
  int64_t spec_steps = 0;            // steps that verified at least one draft
  int64_t spec_off_steps = 0;        // steps with sequences decoding but depth 0 chosen
  double draft_s = 0.0;              // in the proposer
  double verify_s = 0.0;             // forward time of the steps that verified drafts
};

class Engine {
 public:
  // model must outlive the engine. Precondition: validate_engine_config(config) and
  // runner::PagedModelRunner::create accept the config for this model (checked).
  Engine(const TransformerForward& model, const EngineConfig& config);

  // Errors name the request id: token ids outside the vocabulary, prompt + max_tokens past
  // max_position_embeddings or larger than the whole KV pool, bad sampling parameters.
  Status add_request(Request request);
  // The checks of add_request without adding (a coordinator validates before assigning).
  Status check_request(const Request& request) const;
  // The longest sequence (prompt + generated tokens) a request can have: the model's
  // max_position_embeddings, or less when the KV pool could not hold that many.
  int64_t max_sequence_length() const;
  bool has_unfinished() const { return scheduler_.has_unfinished(); }
  // KV blocks held by sequences now (the null block excluded).
  int num_used_kv_blocks() const { return kv_.num_used_blocks(); }
  size_t num_running() const { return scheduler_.num_running(); }

  // Speculative decoding through `proposer` (must outlive the engine; null: off). Requests
  // whose logits depend on their history (penalties, min_tokens) are not drafted for.
  void set_proposer(spec::Proposer* proposer) { proposer_ = proposer; }
  // Output text and stop strings through `text` (must outlive the engine; null: ids only,
  // and requests with stop strings are refused). Set before adding requests.
  void set_token_text(const TokenText* text) { token_text_ = text; }
  // Structured output (docs/structured-output.md) over the vocabulary `source` gives (the bytes
  // of every id; built at the first constrained request). Without one, requests with
  // response_format or guided_* are refused. Set before adding requests.
  void set_token_vocabulary(GuidedDecoding::VocabularySource source) { guided_.set_vocabulary(std::move(source)); }

  // Runs one iteration; returns the requests that finished in it.
  Result<std::vector<RequestOutput>> step();

  const EngineStats& stats() const { return stats_; }
  const EngineConfig& config() const { return config_; }

 private:
  // The text side of one sample (with a TokenText).
  struct SampleText {
    std::unique_ptr<TokenTextStream> stream;
    size_t searched_bytes = 0;  // text already searched for stop strings
  };
  struct RequestState {
    Request request;
    std::vector<SampleOutput> samples;
    std::vector<SampleText> texts;  // [n] with a TokenText, else empty
    int samples_finished = 0;
    int64_t cached_prompt_tokens = -1;
    int num_preemptions = 0;  // over the samples finished so far
    std::chrono::steady_clock::time_point added;
    std::optional<std::chrono::steady_clock::time_point> started;  // first scheduled
    double first_token_s = -1.0;       // from started; < 0 until sample 0's first token
    std::vector<double> token_times_s;  // sample 0, from started (record_token_times)
    // Structured output: the request's grammar and each sample's automaton state ([n]).
    std::shared_ptr<grammar::GrammarMasks> grammar;
    std::vector<int32_t> grammar_states;
  };
  struct SeqOwner {
    int64_t request_idx = 0;
    int sample_idx = 0;
  };

  // `drawn`: the token the backend already drew for this row (logits then null).
  void sample_and_append(SeqId seq, const float* logits, std::vector<RequestOutput>& finished,
                         std::optional<int32_t> drawn = std::nullopt);
  // The backend draws of this step's rows when every sampling row is a plain draw (no
  // penalties, log-probabilities, pending forks or drafts), else nullopt (host sampling).
  std::optional<std::vector<backend::Backend::RowSampling>> backend_draws(const StepPlan& plan) const;
  // Verifies the step's drafts of `seq` against logits [1 + K, V] and appends the emitted
  // tokens (accepted drafts, then the recovered or bonus token).
  void verify_and_append(SeqId seq, const float* logits, std::vector<RequestOutput>& finished);
  // Asks the proposer for drafts of every sequence ready to decode.
  Status propose_drafts();
  // Moves a request whose samples all finished into `finished`.
  void finish_request(int64_t request_idx, std::vector<RequestOutput>& finished);
  uint64_t seed_of(const RequestState& state) const;
  // Appends `token`, sampled from the raw logits row `logits` (for log-probabilities), to
  // the sample of `seq` and applies the stop rules. Returns true when the sample finished.
  bool push_token(SeqId seq, int32_t token, const float* logits);
  // Adds the decoded text of `token` to the sample; true when a stop string completed (the
  // text is then cut before it).
  bool append_text(RequestState& state, int sample_idx, int32_t token);
  // Flushes the sample's decoder at its end (the held-back text may complete a stop string).
  void finish_text(RequestState& state, int sample_idx);
  // Copies `num_rows` rows of `logits` into masked_rows_ with the grammar masks of the sample of
  // `seq` from `state` on, row j masked with the state after tokens[0, j) (the drafts). Returns
  // the copy. Precondition: every token in `tokens` is allowed in its state (checked drafts).
  const float* masked_rows(RequestState& state, int32_t grammar_state, const float* logits, int num_rows,
                           std::span<const int32_t> tokens);
  // Cuts the drafts of a constrained sample at the first token its grammar rejects, and after
  // the token that completes it.
  void check_drafts(const RequestState& state, int sample_idx, std::vector<int32_t>* tokens);
  // Looks for a stop string in the text added since the last search; on a match cuts the
  // text before it, records it and returns true.
  bool search_stop_strings(RequestState& state, int sample_idx);
  void record_kv_stats();
  // This step's chunks as the runner wants them (block tables copied from the cache).
  runner::RunnerBatch runner_batch(const StepPlan& plan);
  // A forward with no tokens (see EngineConfig::forward_when_idle).
  Status idle_forward();
  // The recurrent-state rollbacks and slot work due before the next step, into `batch`.
  void take_state_work(runner::RunnerBatch& batch);

  const TransformerForward& model_;
  EngineConfig config_;
  attention::KvCacheManager kv_;
  // The recurrent-state slots of a model with linear-attention layers (null otherwise): one per
  // running sequence (max_seqs), as many again for prefix-cache snapshots when caching is on.
  std::unique_ptr<attention::RecurrentStatePool> states_;
  Scheduler scheduler_;
  std::unique_ptr<runner::ModelRunner> runner_;
  // Verified sequences whose state must go back to their last accepted row (next step).
  std::vector<runner::StateRollback> state_rollbacks_;
  std::unordered_map<int64_t, RequestState> requests_;
  std::unordered_map<SeqId, SeqOwner> owners_;
  int64_t next_request_idx_ = 0;
  SeqId next_seq_id_ = 1;
  EngineStats stats_;
  std::vector<double> scratch_probs_;
  std::vector<float> adjusted_logits_;
  const TokenText* token_text_ = nullptr;
  spec::Proposer* proposer_ = nullptr;
  spec::DepthController depth_;
  std::unordered_map<SeqId, spec::Draft> drafts_;  // proposed for this step
  std::vector<double> target_probs_, residual_;
  mutable GuidedDecoding guided_;  // compiled grammars (check_request compiles and caches)
  std::vector<float> masked_rows_;
};

}  // namespace moert::engine
