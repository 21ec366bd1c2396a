#include "runtime/engine/engine.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace moert::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Attention over the paged cache for one step's batch (rows grouped by sequence).
class PagedAttentionContext : public AttentionContext {
 public:
  PagedAttentionContext(const PagedKvStorage& storage, const attention::PagedAttentionPlan& plan,
                        const std::vector<int64_t>& slots, int num_heads, ThreadPool& pool)
      : storage_(storage), plan_(plan), slots_(slots), num_heads_(num_heads), pool_(pool) {}

  void attend(int layer, const float* q, const float* k, const float* v, int64_t num_tokens, float* out) override {
    const attention::PagedKvLayer kv = storage_.layer(layer);
    attention::write_kv_slots(kv, k, v, slots_.data(), num_tokens);
    attention::paged_attention_forward(q, kv, plan_, num_heads_, out, pool_);
  }

 private:
  const PagedKvStorage& storage_;
  const attention::PagedAttentionPlan& plan_;
  const std::vector<int64_t>& slots_;
  int num_heads_;
  ThreadPool& pool_;
};

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
  return Status::ok();
}

PagedKvStorage::PagedKvStorage(const ModelConfig& config, int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), num_kv_heads_(config.num_kv_heads), head_dim_(config.head_dim) {
  const size_t per_layer = static_cast<size_t>(num_blocks) * block_size * num_kv_heads_ * head_dim_;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    keys_.emplace_back(new float[per_layer]);
    values_.emplace_back(new float[per_layer]);
  }
}

attention::PagedKvLayer PagedKvStorage::layer(int index) const {
  return {keys_[static_cast<size_t>(index)].get(), values_[static_cast<size_t>(index)].get(), num_blocks_, block_size_,
          num_kv_heads_, head_dim_};
}

int64_t PagedKvStorage::bytes_per_block(const ModelConfig& config, int block_size) {
  return 2LL * config.num_layers * block_size * config.num_kv_heads * config.head_dim * static_cast<int64_t>(sizeof(float));
}

Engine::Engine(const TransformerForward& model, const EngineConfig& config)
    : model_(model),
      config_(config),
      kv_(config.num_kv_blocks, config.block_size, config.enable_prefix_caching),
      scheduler_(
          [&] {
            SchedulerConfig scheduler = config.scheduler;
            scheduler.wait_for_shared_prefix = scheduler.wait_for_shared_prefix && config.enable_prefix_caching;
            return scheduler;
          }(),
          kv_),
      storage_(model.config(), config.num_kv_blocks, config.block_size) {}

Status Engine::check_request(const Request& request) const {
  const ModelConfig& c = model_.config();
  const std::string who = "request '" + request.id + "'";
  MOERT_RETURN_IF_ERROR(sampling::validate_sampling_params(request.params).with_context(who));
  if (request.prompt.empty()) return invalid_argument(who + " has an empty prompt");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= c.vocab_size) {
      return invalid_argument(who + ": prompt token " + std::to_string(request.prompt[i]) + " at index " +
                              std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
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

Status Engine::add_request(Request request) {
  MOERT_RETURN_IF_ERROR(check_request(request));
  const int64_t idx = next_request_idx_++;
  const SeqId seq = next_seq_id_++;
  RequestState state;
  state.samples.resize(static_cast<size_t>(request.params.n));
  state.added = std::chrono::steady_clock::now();
  scheduler_.add_sequence(seq, request.prompt);
  owners_[seq] = {idx, 0};
  state.request = std::move(request);
  requests_.emplace(idx, std::move(state));
  return Status::ok();
}

Result<std::vector<RequestOutput>> Engine::step() {
  std::vector<RequestOutput> finished;
  const StepPlan plan = scheduler_.schedule();
  if (plan.chunks.empty()) {
    if (scheduler_.has_unfinished()) return internal_error("the scheduler made no progress with work left");
    if (config_.forward_when_idle) MOERT_RETURN_IF_ERROR(idle_forward());
    return finished;
  }
  ++stats_.steps;
  // Copy-on-write block copies recorded by this step's reservations, in every layer.
  const std::vector<attention::BlockCopy> copies = kv_.take_pending_copies();
  if (!copies.empty()) {
    std::vector<int32_t> src, dst;
    for (const attention::BlockCopy& copy : copies) {
      src.push_back(copy.src);
      dst.push_back(copy.dst);
    }
    for (int layer = 0; layer < model_.config().num_layers; ++layer) {
      attention::copy_kv_blocks(storage_.layer(layer), src.data(), dst.data(), static_cast<int64_t>(copies.size()));
    }
  }
  // The batch and its paged-attention plan, rows grouped by sequence.
  ForwardBatch batch;
  std::vector<int64_t> slots;
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, page_indices, last_page_len;
  std::vector<SeqId> sampled_seqs;
  const int block_size = config_.block_size;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const SequenceState& state = scheduler_.sequence(chunk.seq);
    const std::vector<attention::BlockId>& table = kv_.block_table(chunk.seq);
    for (int64_t pos = chunk.start; pos < chunk.start + chunk.num_tokens; ++pos) {
      batch.tokens.push_back(state.tokens[static_cast<size_t>(pos)]);
      batch.positions.push_back(pos);
      slots.push_back(kv_.slot(chunk.seq, pos));
    }
    const int64_t kv_len = chunk.start + chunk.num_tokens;
    const int64_t num_pages = (kv_len + block_size - 1) / block_size;
    page_indices.insert(page_indices.end(), table.begin(), table.begin() + num_pages);
    page_indptr.push_back(static_cast<int32_t>(page_indices.size()));
    last_page_len.push_back(static_cast<int32_t>(kv_len - (num_pages - 1) * block_size));
    qo_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    if (chunk.samples) {
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      sampled_seqs.push_back(chunk.seq);
    }
  }
  attention::PagedAttentionPlan attention_plan;
  attention_plan.num_seqs = static_cast<int>(plan.chunks.size());
  attention_plan.qo_indptr = qo_indptr.data();
  attention_plan.kv_page_indptr = page_indptr.data();
  attention_plan.kv_page_indices = page_indices.data();
  attention_plan.kv_last_page_len = last_page_len.data();
  PagedAttentionContext context(storage_, attention_plan, slots, model_.config().num_heads, model_.pool());

  const auto forward_start = std::chrono::steady_clock::now();
  MOERT_ASSIGN_OR_RETURN(std::vector<float> logits, model_.forward(batch, context));
  stats_.forward_s += seconds_since(forward_start);
  stats_.computed_tokens += static_cast<int64_t>(batch.tokens.size());
  scheduler_.complete_step(plan);
  record_kv_stats();

  const auto sample_start = std::chrono::steady_clock::now();
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < sampled_seqs.size(); ++i) {
    sample_and_append(sampled_seqs[i], logits.data() + static_cast<int64_t>(i) * vocab, finished);
  }
  stats_.sample_s += seconds_since(sample_start);
  stats_.preemptions = scheduler_.num_preemptions();
  stats_.cow_copies = kv_.stats().cow_copies;
  stats_.prefix_query_tokens = kv_.stats().prefix_queries;
  stats_.prefix_hit_tokens = kv_.stats().prefix_hits;
  return finished;
}

Status Engine::idle_forward() {
  const std::vector<int32_t> qo_indptr{0}, page_indptr{0};
  attention::PagedAttentionPlan plan;
  plan.qo_indptr = qo_indptr.data();
  plan.kv_page_indptr = page_indptr.data();
  const std::vector<int64_t> no_slots;
  PagedAttentionContext context(storage_, plan, no_slots, model_.config().num_heads, model_.pool());
  return model_.forward(ForwardBatch{}, context).status();
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
void Engine::sample_and_append(SeqId seq, const float* logits, std::vector<RequestOutput>& finished) {
  const SeqOwner owner = owners_.at(seq);
  RequestState& state = requests_.at(owner.request_idx);
  const sampling::SamplingParams& params = state.request.params;
  if (state.cached_prompt_tokens < 0) state.cached_prompt_tokens = scheduler_.sequence(seq).num_cached_prompt_tokens;
  std::vector<SeqId> targets{seq};
  if (!state.forked) {
    state.forked = true;
    for (int s = 1; s < params.n; ++s) {
      const SeqId child = next_seq_id_++;
      scheduler_.fork_sequence(seq, child);
      owners_[child] = {owner.request_idx, s};
      targets.push_back(child);
    }
  }
  const uint64_t seed = params.seed >= 0 ? static_cast<uint64_t>(params.seed) : state.request.default_seed;
  const int vocab = model_.config().vocab_size;
  for (SeqId target : targets) {
    const SeqOwner target_owner = owners_.at(target);
    SampleOutput& sample = state.samples[static_cast<size_t>(target_owner.sample_idx)];
    const double uniform = sampling::counter_uniform(seed, static_cast<uint64_t>(target_owner.sample_idx),
                                                     static_cast<uint64_t>(sample.token_ids.size()));
    const int32_t token = sampling::sample_token(logits, vocab, params, uniform, &scratch_probs_);
    if (push_token(target, token) && ++state.samples_finished == params.n) {
      RequestOutput output;
      output.id = state.request.id;
      output.prompt_tokens = static_cast<int64_t>(state.request.prompt.size());
      for (const SampleOutput& s : state.samples) output.output_tokens += static_cast<int64_t>(s.token_ids.size());
      output.cached_prompt_tokens = state.cached_prompt_tokens;
      output.num_preemptions = state.num_preemptions;
      output.time_s = seconds_since(state.added);
      output.outputs = std::move(state.samples);
      stats_.prompt_tokens += output.prompt_tokens;
      stats_.output_tokens += output.output_tokens;
      finished.push_back(std::move(output));
      requests_.erase(owner.request_idx);
      return;
    }
  }
}

bool Engine::push_token(SeqId seq, int32_t token) {
  const SeqOwner owner = owners_.at(seq);
  RequestState& state = requests_.at(owner.request_idx);
  SampleOutput& sample = state.samples[static_cast<size_t>(owner.sample_idx)];
  sample.token_ids.push_back(token);
  std::optional<std::string> reason =
      sampling::finish_reason(state.request.params, token, static_cast<int>(sample.token_ids.size()));
  if (!reason.has_value()) {
    scheduler_.append_token(seq, token);
    return false;
  }
  sample.finish_reason = *reason;
  state.num_preemptions += scheduler_.sequence(seq).num_preemptions;
  scheduler_.finish_sequence(seq);
  owners_.erase(seq);
  return true;
}

}  // namespace moert::engine
