#include "runtime/engine/engine.h"

#include <algorithm>

#include "runtime/sampling/logit_adjustments.h"
#include "runtime/sampling/stop_strings.h"
#include "runtime/speculative/rejection_sampler.h"

#include "core/check.h"

namespace moert::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Status validate_engine_config(const EngineConfig& c) {
  if (c.block_size < 1 || c.block_size > 1024) {
    return invalid_argument("block size " + std::to_string(c.block_size) + " must be in [1, 1024]");
  }
  if (c.num_kv_blocks < 2) return invalid_argument("KV pool of " + std::to_string(c.num_kv_blocks) + " blocks must hold at least 2");
  if (c.scheduler.max_batched_tokens < 1) {
    return invalid_argument("max batched tokens = " + std::to_string(c.scheduler.max_batched_tokens) + " must be >= 1");
  }
  if (c.scheduler.max_seqs < 1) return invalid_argument("max seqs = " + std::to_string(c.scheduler.max_seqs) + " must be >= 1");
  if (c.kv_cache_dtype != DType::kF32 && c.kv_cache_dtype != DType::kBF16 && c.kv_cache_dtype != DType::kF8E4M3) {
    return invalid_argument(std::string("KV cache dtype ") + std::string(dtype_name(c.kv_cache_dtype)) +
                            " is not F32, BF16 or F8_E4M3");
  }
  return Status::ok();
}

Engine::Engine(const TransformerForward& model, const EngineConfig& config)
    : model_(model),
      config_(config),
      kv_(config.num_kv_blocks, config.block_size, config.enable_prefix_caching, runner::kv_group_layouts(model.config())),
      states_(runner::recurrent_state_layout(model.config()).layers.empty()
                  ? nullptr
                  : std::make_unique<attention::RecurrentStatePool>(
                        config.scheduler.max_seqs * (config.enable_prefix_caching ? 2 : 1), config.enable_prefix_caching)),
      scheduler_(
          [&] {
            SchedulerConfig scheduler = config.scheduler;
            scheduler.wait_for_shared_prefix = scheduler.wait_for_shared_prefix && config.enable_prefix_caching;
            return scheduler;
          }(),
          kv_, states_.get()),
      depth_(config.spec) {
  Result<std::unique_ptr<runner::PagedModelRunner>> runner = runner::PagedModelRunner::create(
      model, {config.num_kv_blocks, config.block_size, config.kv_cache_dtype,
              states_ != nullptr ? states_->num_slots() : 0});
  MOERT_CHECK(runner.is_ok(), "" << runner.status().to_string());
  (*runner)->enable_step_graphs(config.step_graph_max_batch);
  runner_ = std::move(runner).value();
}

Status Engine::check_request(const Request& request) const {
  const ModelConfig& c = model_.config();
  const std::string who = "request '" + request.id + "'";
  MOERT_RETURN_IF_ERROR(sampling::validate_sampling_params(request.params).with_context(who));
  if (request.prompt.empty()) return invalid_argument(who + " has an empty prompt");
  if (!request.params.stop.empty() && token_text_ == nullptr) {
    return invalid_argument(who + ": 'stop' strings need the checkpoint's tokenizer (tokenizer.json)");
  }
  if (request.params.is_guided()) {
    // A stop string could cut the output inside the structure (docs/structured-output.md).
    if (!request.params.stop.empty()) return invalid_argument(who + ": 'stop' strings cannot be combined with structured output");
    MOERT_RETURN_IF_ERROR(guided_.grammar_for(request.params).status().with_context(who));
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= c.vocab_size) {
      return invalid_argument(who + ": prompt token " + std::to_string(request.prompt[i]) + " at index " +
                              std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  if (request.params.n > kMaxSamplesPerRequest) {
    return invalid_argument(who + ": n = " + std::to_string(request.params.n) + " samples, more than the " +
                            std::to_string(kMaxSamplesPerRequest) + " one request may ask for");
  }
  const int64_t max_len = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (max_len > c.max_position_embeddings) {
    return invalid_argument(who + ": prompt (" + std::to_string(request.prompt.size()) + ") + max_tokens (" +
                            std::to_string(request.params.max_tokens) + ") exceeds max_position_embeddings = " +
                            std::to_string(c.max_position_embeddings));
  }
  if (!scheduler_.can_ever_fit(max_len)) {
    return invalid_argument(who + ": " + std::to_string(max_len) + " tokens do not fit the KV pool of " +
                            std::to_string(config_.num_kv_blocks - 1) + " blocks x " +
                            std::to_string(config_.block_size) + " tokens");
  }
  return Status::ok();
}

int64_t Engine::max_sequence_length() const {
  int64_t fits = 0, too_long = static_cast<int64_t>(model_.config().max_position_embeddings) + 1;
  while (too_long - fits > 1) {  // invariant: fits can be held (0 trivially), too_long cannot (or is past the model)
    const int64_t middle = fits + (too_long - fits) / 2;
    (scheduler_.can_ever_fit(middle) ? fits : too_long) = middle;
  }
  return fits;
}

Status Engine::add_request(Request request) {
  MOERT_RETURN_IF_ERROR(check_request(request));
  const int64_t idx = next_request_idx_++;
  const SeqId seq = next_seq_id_++;
  request.params.eos_token_ids = config_.eos_token_ids;
  RequestState state;
  state.samples.resize(static_cast<size_t>(request.params.n));
  if (request.params.is_guided()) {
    MOERT_ASSIGN_OR_RETURN(state.grammar, guided_.grammar_for(request.params));
    state.grammar_states.assign(state.samples.size(), state.grammar->automaton().initial());
  }
  if (token_text_ != nullptr) {
    state.texts.resize(state.samples.size());
    for (size_t s = 0; s < state.samples.size(); ++s) {
      state.samples[s].text.emplace();
      state.texts[s].stream = token_text_->open_stream();
    }
  }
  state.added = std::chrono::steady_clock::now();
  // n > max_seqs: the samples run in waves of at most max_seqs, each its own sequence (its
  // prompt served by the prefix cache where it still holds it) that forks into its samples.
  // A sample's tokens depend only on its index (the uniforms' stream), never on its wave.
  const int wave = config_.scheduler.max_seqs;
  for (int first_sample = 0; first_sample < request.params.n; first_sample += wave) {
    const SeqId wave_seq = first_sample == 0 ? seq : next_seq_id_++;
    scheduler_.add_sequence(wave_seq, request.prompt, std::min(wave, request.params.n - first_sample));
    owners_[wave_seq] = {idx, first_sample};
  }
  state.request = std::move(request);
  requests_.emplace(idx, std::move(state));
  return Status::ok();
}

Status Engine::propose_drafts() {
  drafts_.clear();
  // A lock-step proposer is called every step, with no requests too (its calls exchange rows).
  const bool every_step = proposer_->proposes_every_step();
  const std::vector<SeqId> ready = scheduler_.decode_ready_sequences();
  if (ready.empty()) return every_step ? proposer_->propose({}).status() : Status::ok();
  const spec::DepthChoice depth = depth_.choose(static_cast<int64_t>(ready.size()));
  if (depth.num_draft < 1) {
    ++stats_.spec_off_steps;
    for (SeqId seq : ready) scheduler_.set_spec_tokens(seq, {});
    return every_step ? proposer_->propose({}).status() : Status::ok();
  }
  std::vector<spec::DraftRequest> requests;
  for (SeqId seq : ready) {
    const SeqOwner owner = owners_.at(seq);
    const RequestState& state = requests_.at(owner.request_idx);
    const int64_t generated = static_cast<int64_t>(state.samples[static_cast<size_t>(owner.sample_idx)].token_ids.size());
    // At most max_tokens are emitted: K accepted drafts + 1 final token must fit.
    const int64_t room = state.request.params.max_tokens - generated - 1;
    // Drafts are verified against unadjusted rows: history-dependent logits are not drafted for.
    // A sequence that has still to fork into its samples samples plainly first.
    if (room < 1 || state.request.params.adjusts_logits() || scheduler_.sequence(seq).pending_forks > 0) {
      scheduler_.set_spec_tokens(seq, {});
      continue;
    }
    spec::DraftRequest request;
    request.seq = seq;
    request.tokens = scheduler_.sequence(seq).tokens;
    request.num_draft = static_cast<int>(std::min<int64_t>(depth.num_draft, room));
    request.params = &state.request.params;
    request.seed = seed_of(state);
    request.stream = static_cast<uint64_t>(owner.sample_idx);
    request.first_position = static_cast<uint64_t>(generated);
    requests.push_back(request);
  }
  if (requests.empty()) return every_step ? proposer_->propose({}).status() : Status::ok();
  const auto start = std::chrono::steady_clock::now();
  MOERT_ASSIGN_OR_RETURN(std::vector<spec::Draft> drafts, proposer_->propose(requests));
  const double elapsed = seconds_since(start);
  stats_.draft_s += elapsed;
  depth_.observe_drafting(static_cast<int64_t>(requests.size()), depth.num_draft, elapsed);
  MOERT_CHECK(drafts.size() == requests.size(), "proposer returned " << drafts.size() << " drafts for "
                                                                      << requests.size() << " sequences");
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  for (size_t i = 0; i < requests.size(); ++i) {
    spec::Draft& draft = drafts[i];
    MOERT_CHECK(static_cast<int>(draft.tokens.size()) <= requests[i].num_draft &&
                    (draft.probs.empty() || draft.probs.size() == draft.tokens.size() * vocab),
                "proposer returned " << draft.tokens.size() << " drafts (" << draft.probs.size()
                                     << " probabilities) for K = " << requests[i].num_draft);
    for (int32_t token : draft.tokens) {
      MOERT_CHECK(token >= 0 && static_cast<size_t>(token) < vocab, "draft token " << token << " outside the vocabulary");
    }
    const SeqOwner owner = owners_.at(requests[i].seq);
    const RequestState& state = requests_.at(owner.request_idx);
    if (state.grammar != nullptr) {
      check_drafts(state, owner.sample_idx, &draft.tokens);
      if (!draft.probs.empty()) draft.probs.resize(draft.tokens.size() * vocab);
    }
    scheduler_.set_spec_tokens(requests[i].seq, draft.tokens);
    if (!draft.tokens.empty()) drafts_[requests[i].seq] = std::move(draft);
  }
  return Status::ok();
}

Result<std::vector<RequestOutput>> Engine::step() {
  std::vector<RequestOutput> finished;
  if (proposer_ != nullptr) MOERT_RETURN_IF_ERROR(propose_drafts());
  const StepPlan plan = scheduler_.schedule();
  if (proposer_ != nullptr) {
    for (SeqId seq : plan.preempted) proposer_->release(seq);
  }
  if (plan.chunks.empty()) {
    if (scheduler_.has_unfinished()) return internal_error("the scheduler made no progress with work left");
    if (config_.forward_when_idle) MOERT_RETURN_IF_ERROR(idle_forward());
    return finished;
  }
  ++stats_.steps;
  const auto now = std::chrono::steady_clock::now();
  for (const ScheduledChunk& scheduled : plan.chunks) {
    RequestState& state = requests_.at(owners_.at(scheduled.seq).request_idx);
    if (!state.started) state.started = now;
  }
  bool verifies = false;
  for (const ScheduledChunk& scheduled : plan.chunks) verifies = verifies || scheduled.num_spec_tokens > 0;
  runner::RunnerBatch batch = runner_batch(plan);
  const int64_t num_tokens = plan.num_tokens();
  const auto forward_start = std::chrono::steady_clock::now();
  // A proposer that drafts from the target's hidden states gets them after the step.
  const bool hands_hidden = proposer_ != nullptr && proposer_->wants_hidden_states();
  std::vector<float> hidden;  // [T, D]
  if (hands_hidden) batch.final_hidden = &hidden;
  // Plain draws are made on the backend: the step's logits then never leave its device.
  const std::optional<std::vector<backend::Backend::RowSampling>> draws =
      hands_hidden ? std::nullopt : backend_draws(plan);
  std::vector<float> logits;
  std::vector<int32_t> drawn;
  if (draws.has_value()) {
    MOERT_ASSIGN_OR_RETURN(drawn, runner_->run_and_sample(batch, *draws));
  } else {
    MOERT_ASSIGN_OR_RETURN(logits, runner_->run(batch));
  }
  const double forward_s = seconds_since(forward_start);
  stats_.forward_s += forward_s;
  stats_.step_graphs = runner_->step_graph_stats();
  depth_.observe_target_step(num_tokens, forward_s);
  if (verifies) {
    ++stats_.spec_steps;
    stats_.verify_s += forward_s;
  }
  stats_.computed_tokens += num_tokens;
  if (hands_hidden) {
    const int64_t dim = model_.config().hidden_size;
    int64_t offset = 0;  // rows, in chunk order
    for (size_t i = 0; i < batch.chunks.size(); ++i) {
      const runner::SequenceChunk& chunk = batch.chunks[i];
      proposer_->observe_hidden(plan.chunks[i].seq, chunk.start, chunk.tokens, hidden.data() + offset * dim);
      offset += static_cast<int64_t>(chunk.tokens.size());
    }
  }
  scheduler_.complete_step(plan);
  record_kv_stats();

  const auto sample_start = std::chrono::steady_clock::now();
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  size_t row = 0;
  for (const ScheduledChunk& scheduled : plan.chunks) {
    if (!scheduled.samples) continue;
    if (!drawn.empty()) {
      sample_and_append(scheduled.seq, nullptr, finished, drawn[row++]);
      continue;
    }
    const float* rows = logits.data() + row * vocab;
    if (scheduled.num_spec_tokens > 0) {
      verify_and_append(scheduled.seq, rows, finished);
    } else {
      sample_and_append(scheduled.seq, rows, finished);
    }
    row += static_cast<size_t>(1 + scheduled.num_spec_tokens);
  }
  drafts_.clear();
  stats_.sample_s += seconds_since(sample_start);
  stats_.preemptions = scheduler_.num_preemptions();
  stats_.cow_copies = kv_.stats().cow_copies;
  stats_.prefix_query_tokens = kv_.stats().prefix_queries;
  stats_.prefix_hit_tokens = kv_.stats().prefix_hits;
  return finished;
}

Status Engine::idle_forward() {
  runner::RunnerBatch batch;
  batch.block_copies = kv_.take_pending_copies();
  take_state_work(batch);
  return runner_->run(batch).status();
}

void Engine::take_state_work(runner::RunnerBatch& batch) {
  if (states_ == nullptr) return;
  batch.state_rollbacks = std::move(state_rollbacks_);
  state_rollbacks_.clear();
  batch.state_ops = states_->take_pending_ops();
}

// One chunk per sequence; a speculative chunk ends with the drafts and wants logits for its
// last token and every draft.
runner::RunnerBatch Engine::runner_batch(const StepPlan& plan) {
  runner::RunnerBatch batch;
  batch.block_copies = kv_.take_pending_copies();
  take_state_work(batch);
  for (const ScheduledChunk& scheduled : plan.chunks) {
    const SequenceState& state = scheduler_.sequence(scheduled.seq);
    runner::SequenceChunk chunk;
    chunk.start = scheduled.start;
    const auto first = state.tokens.begin() + scheduled.start;
    chunk.tokens.assign(first, first + (scheduled.num_tokens - scheduled.num_spec_tokens));
    chunk.tokens.insert(chunk.tokens.end(), state.spec_tokens.begin(), state.spec_tokens.end());
    chunk.num_logit_rows = scheduled.samples ? static_cast<int>(1 + scheduled.num_spec_tokens) : 0;
    chunk.block_tables = runner::chunk_block_tables(kv_, scheduled.seq, chunk.start + static_cast<int64_t>(chunk.tokens.size()));
    if (states_ != nullptr) {
      chunk.state_slot = states_->slot(scheduled.seq);
      chunk.keep_state_candidates = scheduled.num_spec_tokens > 0;
      for (const auto& [row, slot] : scheduled.state_snapshots) chunk.state_snapshots.push_back({row, slot});
    }
    batch.chunks.push_back(std::move(chunk));
  }
  return batch;
}

void Engine::record_kv_stats() {
  const int used = kv_.num_used_blocks();
  if (used >= stats_.peak_used_blocks) {
    stats_.peak_used_blocks = used;
    stats_.unused_slots_at_peak = scheduler_.unused_reserved_slots();
    stats_.running_at_peak = static_cast<int64_t>(scheduler_.num_running());
  }
}

// Samples the next token of `seq` from its logits row. A request with n > 1 forks its
// n - 1 further samples here, at its first sampling point, all drawing from the same row.
std::optional<std::vector<backend::Backend::RowSampling>> Engine::backend_draws(const StepPlan& plan) const {
  std::vector<backend::Backend::RowSampling> draws;
  for (const ScheduledChunk& scheduled : plan.chunks) {
    if (!scheduled.samples) continue;
    const SeqOwner owner = owners_.at(scheduled.seq);
    const RequestState& state = requests_.at(owner.request_idx);
    const sampling::SamplingParams& params = state.request.params;
    const bool forks = scheduler_.sequence(scheduled.seq).pending_forks > 0;
    if (scheduled.num_spec_tokens > 0 || params.adjusts_logits() || params.logprobs >= 0 || forks || params.is_guided()) {
      return std::nullopt;
    }
    const SampleOutput& sample = state.samples[static_cast<size_t>(owner.sample_idx)];
    // The uniform sample_and_append would draw with.
    draws.push_back({params.temperature, params.top_k, params.top_p,
                     sampling::counter_uniform(seed_of(state), static_cast<uint64_t>(owner.sample_idx),
                                               static_cast<uint64_t>(sample.token_ids.size()))});
  }
  if (draws.empty()) return std::nullopt;
  return draws;
}

void Engine::sample_and_append(SeqId seq, const float* logits, std::vector<RequestOutput>& finished,
                               std::optional<int32_t> drawn) {
  const SeqOwner owner = owners_.at(seq);
  RequestState& state = requests_.at(owner.request_idx);
  const sampling::SamplingParams& params = state.request.params;
  if (state.cached_prompt_tokens < 0) state.cached_prompt_tokens = scheduler_.sequence(seq).num_cached_prompt_tokens;
  std::vector<SeqId> targets{seq};
  // The first sampling point of a wave's sequence: it forks into the wave's other samples.
  for (int s = 1, forks = scheduler_.sequence(seq).pending_forks; s <= forks; ++s) {
    const SeqId child = next_seq_id_++;
    scheduler_.fork_sequence(seq, child);
    owners_[child] = {owner.request_idx, owner.sample_idx + s};
    targets.push_back(child);
  }
  const uint64_t seed = seed_of(state);
  const int vocab = model_.config().vocab_size;
  for (SeqId target : targets) {
    const SeqOwner target_owner = owners_.at(target);
    SampleOutput& sample = state.samples[static_cast<size_t>(target_owner.sample_idx)];
    const double uniform = sampling::counter_uniform(seed, static_cast<uint64_t>(target_owner.sample_idx),
                                                     static_cast<uint64_t>(sample.token_ids.size()));
    int32_t token = 0;
    const float* logits_for_push = logits;
    if (drawn.has_value()) {
      token = *drawn;  // backend_draws: a plain draw with this uniform, no fork
    } else {
      const float* row = logits;
      if (state.grammar != nullptr) {
        // The mask comes first, before penalties, temperature, top-k and top-p; log-probabilities
        // report the masked row before penalties (docs/structured-output.md §Sampling).
        row = masked_rows(state, state.grammar_states[static_cast<size_t>(target_owner.sample_idx)], row, 1, {});
        logits_for_push = row;
      }
      if (params.adjusts_logits()) {
        sampling::adjust_logits(row, vocab, params, state.request.prompt, sample.token_ids, &adjusted_logits_);
        row = adjusted_logits_.data();
      }
      token = sampling::sample_token(row, vocab, params, uniform, &scratch_probs_);
    }
    if (push_token(target, token, logits_for_push) && ++state.samples_finished == params.n) {
      finish_request(owner.request_idx, finished);
      return;
    }
  }
}

uint64_t Engine::seed_of(const RequestState& state) const {
  const sampling::SamplingParams& params = state.request.params;
  return params.seed >= 0 ? static_cast<uint64_t>(params.seed) : state.request.default_seed;
}

void Engine::finish_request(int64_t request_idx, std::vector<RequestOutput>& finished) {
  RequestState& state = requests_.at(request_idx);
  RequestOutput output;
  output.id = state.request.id;
  output.id_json = state.request.id_json;
  output.prompt_tokens = static_cast<int64_t>(state.request.prompt.size());
  for (const SampleOutput& s : state.samples) output.output_tokens += static_cast<int64_t>(s.token_ids.size());
  output.cached_prompt_tokens = state.cached_prompt_tokens;
  output.num_preemptions = state.num_preemptions;
  output.time_s = seconds_since(state.added);
  const auto started = state.started.value_or(state.added);
  output.queue_s = std::chrono::duration<double>(started - state.added).count();
  output.e2e_s = seconds_since(started);
  output.ttft_s = state.first_token_s >= 0.0 ? state.first_token_s : output.e2e_s;
  output.token_times_s = std::move(state.token_times_s);
  output.outputs = std::move(state.samples);
  stats_.prompt_tokens += output.prompt_tokens;
  stats_.output_tokens += output.output_tokens;
  finished.push_back(std::move(output));
  requests_.erase(request_idx);
}

// The rejection sampler over this step's drafts of `seq`: p = the request's processed
// distributions of the K + 1 target rows, q = the proposer's (one-hot without them), the
// uniforms of the output positions the pass covers.
void Engine::verify_and_append(SeqId seq, const float* logits, std::vector<RequestOutput>& finished) {
  const SeqOwner owner = owners_.at(seq);
  RequestState& state = requests_.at(owner.request_idx);
  const sampling::SamplingParams& params = state.request.params;
  const SequenceState& sequence = scheduler_.sequence(seq);
  spec::Draft& draft = drafts_.at(seq);
  const int num_draft = static_cast<int>(sequence.spec_tokens.size());  // the scheduler may have trimmed them
  const int vocab = model_.config().vocab_size;
  draft.tokens.resize(static_cast<size_t>(num_draft));
  if (!draft.probs.empty()) draft.probs.resize(static_cast<size_t>(num_draft) * static_cast<size_t>(vocab));
  if (state.grammar != nullptr) {
    // Row j masked with the grammar state after drafts [0, j): a draft the grammar rejects has
    // p = 0 and is rejected; the states are computed aside, so a rejection needs no rollback.
    logits = masked_rows(state, state.grammar_states[static_cast<size_t>(owner.sample_idx)], logits, num_draft + 1,
                         draft.tokens);
  }
  spec::processed_distributions(logits, num_draft + 1, vocab, params, &target_probs_);
  const uint64_t generated = state.samples[static_cast<size_t>(owner.sample_idx)].token_ids.size();
  const spec::PassUniforms uniforms =
      spec::make_pass_uniforms(seed_of(state), static_cast<uint64_t>(owner.sample_idx), generated, num_draft);
  const spec::SpecVerifyInput input{vocab, draft.tokens, draft.probs, target_probs_};
  const spec::SpecVerifyResult result = spec::verify_draft(input, params, uniforms.view(), &residual_);
  stats_.acceptance.record(num_draft, result.num_accepted);
  depth_.observe_pass(num_draft, result.num_accepted);
  for (size_t j = 0; j < result.tokens.size(); ++j) {
    if (push_token(seq, result.tokens[j], logits + j * static_cast<size_t>(vocab))) {
      if (++state.samples_finished == params.n) finish_request(owner.request_idx, finished);
      return;
    }
  }
  // The slot holds the state after every draft: back to the one after the last accepted row.
  if (states_ != nullptr && result.num_accepted < num_draft) {
    state_rollbacks_.push_back({states_->slot(seq), result.num_accepted});
  }
  scheduler_.accept_spec_tokens(seq, result.num_accepted);
}

bool Engine::push_token(SeqId seq, int32_t token, const float* logits) {
  const SeqOwner owner = owners_.at(seq);
  RequestState& state = requests_.at(owner.request_idx);
  const sampling::SamplingParams& params = state.request.params;
  SampleOutput& sample = state.samples[static_cast<size_t>(owner.sample_idx)];
  sample.token_ids.push_back(token);
  if (params.logprobs >= 0) {
    sample.logprobs.push_back(sampling::token_logprob(logits, model_.config().vocab_size, token, params.logprobs));
  }
  if (owner.sample_idx == 0 && (state.first_token_s < 0.0 || config_.record_token_times)) {
    const double at = seconds_since(state.started.value_or(state.added));
    if (state.first_token_s < 0.0) state.first_token_s = at;
    if (config_.record_token_times) state.token_times_s.push_back(at);
  }
  const int num_generated = static_cast<int>(sample.token_ids.size());
  std::optional<std::string> reason = sampling::finish_reason(params, token, num_generated);
  if (state.grammar != nullptr && !is_terminal_token(params, token)) {
    int32_t& grammar_state = state.grammar_states[static_cast<size_t>(owner.sample_idx)];
    grammar_state = state.grammar->advance_token(grammar_state, token);
    const grammar::Automaton& automaton = state.grammar->automaton();
    if (grammar_state == grammar::Automaton::kDead) {
      // Only when no token of the vocabulary could continue (mask_logits left the row unmasked):
      // the structure cannot be completed, so the sample ends unfinished.
      reason = "length";
    } else if (automaton.accepting(grammar_state) && !automaton.can_continue(grammar_state)) {
      reason = "stop";  // a complete structure ends the sample, also at max_tokens
    }
  }
  if (reason == "stop" && std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
                              params.stop_token_ids.end()) {
    sample.stop_token = token;
  }
  if (!state.texts.empty()) {
    if (append_text(state, owner.sample_idx, token)) {
      reason = "stop";
    } else if (reason.has_value()) {
      finish_text(state, owner.sample_idx);
      if (sample.stop_string.has_value()) reason = "stop";
    }
  }
  if (!reason.has_value()) {
    scheduler_.append_token(seq, token);
    return false;
  }
  sample.finish_reason = *reason;
  state.num_preemptions += scheduler_.sequence(seq).num_preemptions;
  scheduler_.finish_sequence(seq);
  if (proposer_ != nullptr) proposer_->release(seq);
  owners_.erase(seq);
  return true;
}

bool Engine::append_text(RequestState& state, int sample_idx, int32_t token) {
  SampleOutput& sample = state.samples[static_cast<size_t>(sample_idx)];
  *sample.text += state.texts[static_cast<size_t>(sample_idx)].stream->push(token);
  return search_stop_strings(state, sample_idx);
}

void Engine::finish_text(RequestState& state, int sample_idx) {
  SampleOutput& sample = state.samples[static_cast<size_t>(sample_idx)];
  *sample.text += state.texts[static_cast<size_t>(sample_idx)].stream->finish();
  search_stop_strings(state, sample_idx);
}

bool Engine::search_stop_strings(RequestState& state, int sample_idx) {
  SampleOutput& sample = state.samples[static_cast<size_t>(sample_idx)];
  SampleText& text = state.texts[static_cast<size_t>(sample_idx)];
  const std::vector<std::string>& stops = state.request.params.stop;
  const size_t searched = text.searched_bytes;
  text.searched_bytes = sample.text->size();
  // Before min_tokens no stop rule applies: that text is never searched (as in vLLM).
  if (stops.empty() || static_cast<int>(sample.token_ids.size()) < state.request.params.min_tokens) return false;
  const std::optional<sampling::StopMatch> match = sampling::find_stop_string(*sample.text, searched, stops);
  if (!match.has_value()) return false;
  sample.text->resize(match->position);
  sample.stop_string = stops[match->stop_index];
  sample.stop_token.reset();
  return true;
}

const float* Engine::masked_rows(RequestState& state, int32_t grammar_state, const float* logits, int num_rows,
                                 std::span<const int32_t> tokens) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  masked_rows_.assign(logits, logits + vocab * static_cast<size_t>(num_rows));
  const sampling::SamplingParams& params = state.request.params;
  for (int j = 0; j < num_rows; ++j) {
    float* row = masked_rows_.data() + vocab * static_cast<size_t>(j);
    // A row past a completed structure is never sampled (the sample finished); left unmasked.
    if (grammar_state != grammar::Automaton::kDead) mask_logits(*state.grammar, grammar_state, params, row, static_cast<int>(vocab));
    if (static_cast<size_t>(j) < tokens.size() && grammar_state != grammar::Automaton::kDead) {
      grammar_state = is_terminal_token(params, tokens[static_cast<size_t>(j)])
                          ? grammar::Automaton::kDead
                          : state.grammar->advance_token(grammar_state, tokens[static_cast<size_t>(j)]);
    }
  }
  return masked_rows_.data();
}

void Engine::check_drafts(const RequestState& state, int sample_idx, std::vector<int32_t>* tokens) {
  int32_t grammar_state = state.grammar_states[static_cast<size_t>(sample_idx)];
  const grammar::Automaton& automaton = state.grammar->automaton();
  size_t keep = 0;
  while (keep < tokens->size()) {
    const int32_t token = (*tokens)[keep];
    if (is_terminal_token(state.request.params, token)) break;  // ends the sample: never drafted
    grammar_state = state.grammar->advance_token(grammar_state, token);
    if (grammar_state == grammar::Automaton::kDead) break;
    ++keep;
    if (automaton.accepting(grammar_state) && !automaton.can_continue(grammar_state)) break;
  }
  tokens->resize(keep);
}

}  // namespace moert::engine
