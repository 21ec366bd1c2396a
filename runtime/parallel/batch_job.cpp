#include "runtime/parallel/batch_job.h"


#include <algorithm>
#include <unordered_map>
#include <cmath>
#include <span>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "experts/placement/balance.h"
#include "experts/placement/eplb.h"
#include "experts/router.h"
#include "core/check.h"
#include "core/digest.h"
#include "core/log.h"
#include "runtime/parallel/request_output_codec.h"

namespace moert::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void append_bytes(std::vector<uint8_t>& out, const void* data, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(data);
  out.insert(out.end(), begin, begin + bytes);
}

// Reads `bytes` bytes at *offset of blob into data; false when the blob is too short.
bool read_bytes(const std::vector<uint8_t>& blob, size_t* offset, void* data, size_t bytes) {
  if (blob.size() - *offset < bytes) return false;
  std::memcpy(data, blob.data() + *offset, bytes);
  *offset += bytes;
  return true;
}

// Broadcast of a variable-size blob from rank 0: the size first, then the bytes.
Status broadcast_blob(comm::Transport& transport, std::vector<uint8_t>& blob) {
  int64_t size = static_cast<int64_t>(blob.size());
  MOERT_RETURN_IF_ERROR(transport.broadcast(&size, sizeof(size), 0));
  blob.resize(static_cast<size_t>(size));
  if (size > 0) MOERT_RETURN_IF_ERROR(transport.broadcast(blob.data(), blob.size(), 0));
  return Status::ok();
}

void add_into(StepMetrics& total, const StepMetrics& step) {
  total.scheduled_tokens += step.scheduled_tokens;
  total.output_tokens += step.output_tokens;
  total.finished_requests += step.finished_requests;
  total.dispatch_bytes += step.dispatch_bytes;
  total.combine_bytes += step.combine_bytes;
  total.step_s += step.step_s;
  total.all_to_all_s += step.all_to_all_s;
  total.expert_s += step.expert_s;
  total.shared_s += step.shared_s;
  total.exchange_in_flight_s += step.exchange_in_flight_s;
  total.exchange_wait_s += step.exchange_wait_s;
  total.spec_drafts += step.spec_drafts;
  total.spec_accepted += step.spec_accepted;
  total.draft_s += step.draft_s;
  total.kv_used_blocks = step.kv_used_blocks;
  total.kv_pool_blocks = step.kv_pool_blocks;
}

// Engine statistics as plain int64/double fields in a fixed order, for one gather.
constexpr int kEngineStatFields = 17;
void pack_engine_stats(const engine::EngineStats& s, double* out) {
  const double fields[kEngineStatFields] = {static_cast<double>(s.steps),          static_cast<double>(s.prompt_tokens),
                                            static_cast<double>(s.computed_tokens), static_cast<double>(s.output_tokens),
                                            static_cast<double>(s.preemptions),     static_cast<double>(s.cow_copies),
                                            static_cast<double>(s.peak_used_blocks), static_cast<double>(s.prefix_hit_tokens),
                                            s.forward_s,                            s.sample_s,
                                            static_cast<double>(s.unused_slots_at_peak), static_cast<double>(s.running_at_peak),
                                            static_cast<double>(s.prefix_query_tokens), static_cast<double>(s.spec_steps),
                                            static_cast<double>(s.spec_off_steps), s.draft_s, s.verify_s};
  std::copy(fields, fields + kEngineStatFields, out);
}
engine::EngineStats unpack_engine_stats(const double* in) {
  engine::EngineStats s;
  s.steps = static_cast<int64_t>(in[0]);
  s.prompt_tokens = static_cast<int64_t>(in[1]);
  s.computed_tokens = static_cast<int64_t>(in[2]);
  s.output_tokens = static_cast<int64_t>(in[3]);
  s.preemptions = static_cast<int64_t>(in[4]);
  s.cow_copies = static_cast<int64_t>(in[5]);
  s.peak_used_blocks = static_cast<int>(in[6]);
  s.prefix_hit_tokens = static_cast<int64_t>(in[7]);
  s.forward_s = in[8];
  s.sample_s = in[9];
  s.unused_slots_at_peak = static_cast<int64_t>(in[10]);
  s.running_at_peak = static_cast<int64_t>(in[11]);
  s.prefix_query_tokens = static_cast<int64_t>(in[12]);
  s.spec_steps = static_cast<int64_t>(in[13]);
  s.spec_off_steps = static_cast<int64_t>(in[14]);
  s.draft_s = in[15];
  s.verify_s = in[16];
  return s;
}

// Slots per rank for replicas: every rank gets ceil(E / R) + redundant slots, so the
// EPLB slot count P = R * that is a multiple of R and at least E.
int slots_per_rank(int num_experts, int num_ranks, int redundant) {
  return (num_experts + num_ranks - 1) / num_ranks + redundant;
}

}  // namespace

Result<BalanceMode> parse_balance_mode(const std::string& text) {
  if (text == "none") return BalanceMode::kNone;
  if (text == "bias") return BalanceMode::kBias;
  if (text == "replicate") return BalanceMode::kReplicate;
  return invalid_argument("--balance '" + text + "' is not one of none, bias, replicate");
}

const char* balance_mode_name(BalanceMode mode) {
  switch (mode) {
    case BalanceMode::kNone: return "none";
    case BalanceMode::kBias: return "bias";
    case BalanceMode::kReplicate: return "replicate";
  }
  return "?";
}

Status validate_batch_job_config(const BatchJobConfig& config) {
  if (!(config.balance_gamma >= 0.0f) || !std::isfinite(config.balance_gamma)) {
    return invalid_argument("--balance-gamma " + std::to_string(config.balance_gamma) + " must be finite and >= 0");
  }
  if (config.balance_interval < 1) {
    return invalid_argument("--balance-interval " + std::to_string(config.balance_interval) + " must be >= 1");
  }
  if (config.micro_batches < 0 || config.micro_batches > 2) {
    return invalid_argument("--micro-batches " + std::to_string(config.micro_batches) + " must be 1, 2 or auto");
  }
  if (config.redundant_slots_per_rank < 0) {
    return invalid_argument("--balance-redundant " + std::to_string(config.redundant_slots_per_rank) +
                            " must be >= 0");
  }
  return Status::ok();
}

std::vector<int> assign_by_free_blocks(const std::vector<int64_t>& request_blocks,
                                       const std::vector<int64_t>& pool_blocks) {
  MOERT_CHECK(!pool_blocks.empty(), "assign_by_free_blocks needs at least one rank");
  std::vector<int64_t> free_blocks = pool_blocks;
  std::vector<int> assignment(request_blocks.size());
  for (size_t i = 0; i < request_blocks.size(); ++i) {
    MOERT_CHECK(request_blocks[i] >= 0, "request_blocks[" << i << "] = " << request_blocks[i] << " must be >= 0");
    const auto most_free = std::max_element(free_blocks.begin(), free_blocks.end());  // first maximum: lowest rank
    assignment[i] = static_cast<int>(most_free - free_blocks.begin());
    *most_free -= request_blocks[i];
  }
  return assignment;
}

std::vector<int> assign_requests(const std::vector<int64_t>& request_blocks, const std::vector<uint64_t>& prefix_keys,
                                 const std::vector<int64_t>& pool_blocks) {
  if (prefix_keys.empty()) return assign_by_free_blocks(request_blocks, pool_blocks);
  MOERT_CHECK(prefix_keys.size() == request_blocks.size(),
              "" << prefix_keys.size() << " prefix keys for " << request_blocks.size() << " requests");
  MOERT_CHECK(!pool_blocks.empty(), "assign_requests needs at least one rank");
  const int64_t num_ranks = static_cast<int64_t>(pool_blocks.size());
  int64_t total = 0;
  for (int64_t b : request_blocks) total += b;
  std::vector<int64_t> free_blocks = pool_blocks, assigned(pool_blocks.size(), 0);
  std::unordered_map<uint64_t, int> home;  // prefix key -> the rank of its first request
  std::vector<int> assignment(request_blocks.size());
  for (size_t i = 0; i < request_blocks.size(); ++i) {
    const int64_t blocks = request_blocks[i];
    MOERT_CHECK(blocks >= 0, "request_blocks[" << i << "] = " << blocks << " must be >= 0");
    int to = static_cast<int>(std::max_element(free_blocks.begin(), free_blocks.end()) - free_blocks.begin());
    const auto found = prefix_keys[i] != 0 ? home.find(prefix_keys[i]) : home.end();
    if (found != home.end()) {
      const int64_t least = *std::min_element(assigned.begin(), assigned.end());
      const int64_t slack = std::max(blocks, total / (4 * num_ranks));
      const auto r = static_cast<size_t>(found->second);
      if (free_blocks[r] >= blocks && assigned[r] - least <= slack) to = found->second;
    } else if (prefix_keys[i] != 0) {
      home.emplace(prefix_keys[i], to);
    }
    assignment[i] = to;
    free_blocks[static_cast<size_t>(to)] -= blocks;
    assigned[static_cast<size_t>(to)] += blocks;
  }
  return assignment;
}

uint64_t prefix_key(const std::vector<int32_t>& prompt, int block_size) {
  if (block_size < 1 || static_cast<int64_t>(prompt.size()) <= block_size) return 0;
  std::string bytes;  // the ids little-endian, whatever the host's byte order
  for (int i = 0; i < block_size; ++i) {
    for (int byte = 0; byte < 4; ++byte) {
      bytes.push_back(static_cast<char>((static_cast<uint32_t>(prompt[static_cast<size_t>(i)]) >> (8 * byte)) & 0xffu));
    }
  }
  const uint64_t hash = fnv1a_64(bytes);
  return hash == 0 ? 1 : hash;
}

int64_t request_block_estimate(const engine::Request& request, int block_size) {
  MOERT_CHECK(block_size >= 1, "block_size = " << block_size << " must be >= 1");
  const int64_t tokens = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  return static_cast<int64_t>(request.params.n) * ((tokens + block_size - 1) / block_size);
}

Result<std::vector<std::string>> distribute_request_lines(comm::Transport& transport,
                                                          const std::vector<std::string>& lines,
                                                          const std::vector<int64_t>& blocks,
                                                          const std::vector<uint64_t>& prefix_keys,
                                                          int64_t pool_blocks, std::vector<int>* assignment) {
  const int rank = transport.rank();
  const int world = transport.world_size();
  std::vector<int64_t> pools(static_cast<size_t>(world), 0);
  MOERT_RETURN_IF_ERROR(transport.gather(&pool_blocks, sizeof(pool_blocks), pools.data(), 0));
  // Rank 0 packs [int32 rank | int64 length | bytes] per line, in input order.
  std::vector<uint8_t> blob;
  if (rank == 0) {
    MOERT_CHECK(lines.size() == blocks.size(), "" << lines.size() << " lines but " << blocks.size() << " estimates");
    const std::vector<int> ranks = assign_requests(blocks, prefix_keys, pools);
    for (size_t i = 0; i < lines.size(); ++i) {
      const int32_t to = ranks[i];
      const int64_t length = static_cast<int64_t>(lines[i].size());
      append_bytes(blob, &to, sizeof(to));
      append_bytes(blob, &length, sizeof(length));
      append_bytes(blob, lines[i].data(), lines[i].size());
    }
    if (assignment != nullptr) *assignment = ranks;
  }
  MOERT_RETURN_IF_ERROR(broadcast_blob(transport, blob));
  std::vector<std::string> mine;
  for (size_t offset = 0; offset < blob.size();) {
    int32_t to = 0;
    int64_t length = 0;
    if (!read_bytes(blob, &offset, &to, sizeof(to)) || !read_bytes(blob, &offset, &length, sizeof(length)) ||
        length < 0 || blob.size() - offset < static_cast<size_t>(length)) {
      return internal_error("the request assignment from rank 0 is truncated");
    }
    if (to == rank) mine.emplace_back(reinterpret_cast<const char*>(blob.data() + offset), static_cast<size_t>(length));
    offset += static_cast<size_t>(length);
  }
  return mine;
}

namespace {

// Attaches a selection bias to the model for the guard's lifetime and detaches it on every
// way out of the scope (returns on error included), so the model never keeps a pointer to a
// vector that has been destroyed. A null bias leaves the model untouched.
class ScopedSelectionBias {
 public:
  ScopedSelectionBias(TransformerForward& model, const std::vector<std::vector<float>>* bias)
      : model_(bias != nullptr ? &model : nullptr) {
    if (model_ != nullptr) model_->set_selection_bias(bias);
  }
  ~ScopedSelectionBias() {
    if (model_ != nullptr) model_->set_selection_bias(nullptr);
  }
  ScopedSelectionBias(const ScopedSelectionBias&) = delete;
  ScopedSelectionBias& operator=(const ScopedSelectionBias&) = delete;

 private:
  TransformerForward* model_;
};

// Counters of this rank before the current step; a step's metrics are the differences.
struct StepBaseline {
  ExpertParallelStats experts;
  engine::EngineStats engine;
};

// One engine step on this rank, and what it cost relative to `baseline` (which moves on).
Result<std::vector<engine::RequestOutput>> run_step_and_measure(engine::Engine& engine,
                                                                const ExpertParallelExperts& experts,
                                                                StepBaseline& baseline, StepMetrics& mine) {
  const Clock::time_point step_start = Clock::now();
  Result<std::vector<engine::RequestOutput>> outputs = engine.step();
  if (!outputs.is_ok()) return outputs.status().with_context("engine step");
  mine.step_s = seconds_between(step_start, Clock::now());
  const ExpertParallelStats& now = experts.stats();
  const ExpertParallelStats& previous = baseline.experts;
  mine.dispatch_bytes = now.dispatch_bytes_sent - previous.dispatch_bytes_sent;
  mine.combine_bytes = now.combine_bytes_sent - previous.combine_bytes_sent;
  mine.all_to_all_s = now.all_to_all_s - previous.all_to_all_s;
  mine.expert_s = now.expert_compute_s - previous.expert_compute_s;
  mine.shared_s = now.overlapped_s - previous.overlapped_s;
  mine.exchange_in_flight_s = now.exchange_in_flight_s - previous.exchange_in_flight_s;
  mine.exchange_wait_s = now.exchange_wait_s - previous.exchange_wait_s;
  baseline.experts = now;
  const engine::EngineStats& engine_now = engine.stats();
  const engine::EngineStats& previous_engine = baseline.engine;
  mine.scheduled_tokens = engine_now.computed_tokens - previous_engine.computed_tokens;
  mine.output_tokens = engine_now.output_tokens - previous_engine.output_tokens;
  mine.spec_drafts = engine_now.acceptance.num_draft_tokens() - previous_engine.acceptance.num_draft_tokens();
  mine.spec_accepted = engine_now.acceptance.num_accepted_tokens() - previous_engine.acceptance.num_accepted_tokens();
  mine.kv_used_blocks = engine.num_used_kv_blocks();
  mine.kv_pool_blocks = engine.config().num_kv_blocks - 1;
  mine.draft_s = engine_now.draft_s - previous_engine.draft_s;
  baseline.engine = engine_now;
  mine.finished_requests = static_cast<int64_t>(outputs->size());
  return outputs;
}

// Every rank's step record and finished outputs go to rank 0, which adds the records to the
// per-rank totals and the progress and hands records and outputs to `events` (rank order,
// then the order in which the rank finished them).
Status collect_step_at_root(comm::Transport& transport, const StepMetrics& mine,
                            const std::vector<engine::RequestOutput>& outputs, const CoordinatorEvents& events,
                            BatchJobReport& report, JobProgress& progress, std::vector<int64_t>& kv_used,
                            std::vector<int64_t>& kv_pool) {
  std::vector<uint8_t> blob;
  append_bytes(blob, &mine, sizeof(mine));
  encode_request_outputs(outputs, blob);
  Result<std::vector<std::vector<uint8_t>>> gathered = transport.gatherv(blob.data(), blob.size(), 0);
  if (!gathered.is_ok()) return gathered.status();
  if (transport.rank() != 0) return Status::ok();
  for (int r = 0; r < transport.world_size(); ++r) {
    const std::vector<uint8_t>& from = (*gathered)[static_cast<size_t>(r)];
    StepMetrics theirs;
    size_t offset = 0;
    if (!read_bytes(from, &offset, &theirs, sizeof(theirs))) {
      return internal_error("rank " + std::to_string(r) + " sent a truncated step record");
    }
    Result<std::vector<engine::RequestOutput>> finished = decode_request_outputs(from.data(), from.size(), &offset);
    if (!finished.is_ok()) return finished.status().with_context("from rank " + std::to_string(r));
    add_into(report.rank_totals[static_cast<size_t>(r)], theirs);
    progress.finished_requests += theirs.finished_requests;
    progress.output_tokens += theirs.output_tokens;
    progress.spec_drafts += theirs.spec_drafts;
    progress.spec_accepted += theirs.spec_accepted;
    kv_used[static_cast<size_t>(r)] = theirs.kv_used_blocks;
    kv_pool[static_cast<size_t>(r)] = theirs.kv_pool_blocks;
    if (events.on_step_metrics) MOERT_RETURN_IF_ERROR(events.on_step_metrics(report.steps, r, theirs));
    for (const engine::RequestOutput& output : *finished) MOERT_RETURN_IF_ERROR(events.on_output(output));
  }
  progress.kv_used_blocks = 0;
  progress.kv_total_blocks = 0;
  for (int64_t used : kv_used) progress.kv_used_blocks += used;
  for (int64_t pool : kv_pool) progress.kv_total_blocks += pool;
  return Status::ok();
}

// Sums over the ranks, in one all-reduce, whether work is left anywhere, this step's routed
// loads [L, E], the rows each rank computed [L, R] and the tokens the step computed. `reduce`
// holds [work left, routed loads, computed rows, tokens] afterwards; rank 0 records the loads.
// Returns the number of routed-load entries.
Result<size_t> share_work_left_and_loads(comm::Transport& transport, const engine::Engine& engine,
                                         ExpertParallelExperts& experts, int num_layers, int64_t step_tokens,
                                         std::vector<int64_t>& reduce, experts::LoadTracker& expert_loads,
                                         experts::LoadTracker& rank_loads) {
  const int world = transport.world_size();
  std::fill(reduce.begin(), reduce.end(), 0);
  reduce[0] = engine.has_unfinished() ? 1 : 0;
  reduce.back() = step_tokens;
  const std::vector<int64_t> routed = experts.take_routed_loads();
  std::copy(routed.begin(), routed.end(), reduce.begin() + 1);
  const std::vector<int64_t> computed = experts.take_computed_loads();
  int64_t* rank_slice = reduce.data() + 1 + routed.size();  // [L, R]
  for (int l = 0; l < num_layers; ++l) rank_slice[l * world + transport.rank()] = computed[static_cast<size_t>(l)];
  MOERT_RETURN_IF_ERROR(transport.all_reduce(reduce.data(), reduce.size(), comm::ReduceOp::kSum));
  if (transport.rank() == 0) {
    expert_loads.add_step(std::span<const int64_t>(reduce.data() + 1, routed.size()));
    rank_loads.add_step(std::span<const int64_t>(rank_slice, static_cast<size_t>(num_layers) * world));
  }
  return routed.size();
}

// Bias balancing: rank 0 moves each MoE layer's bias against this step's loads
// ([L, E] flattened) and every rank takes rank 0's values.
Status update_and_share_bias(comm::Transport& transport, std::span<const int64_t> step_loads, float gamma,
                             int num_experts, std::vector<std::vector<float>>& bias) {
  const auto num_layers = static_cast<int>(bias.size());
  std::vector<float> flat(static_cast<size_t>(num_layers) * num_experts, 0.0f);
  if (transport.rank() == 0) {
    for (int l = 0; l < num_layers; ++l) {
      std::vector<float>& layer_bias = bias[static_cast<size_t>(l)];
      if (layer_bias.empty()) continue;
      experts::update_balance_bias(step_loads.subspan(static_cast<size_t>(l) * num_experts, num_experts), gamma,
                                   layer_bias);
      std::copy(layer_bias.begin(), layer_bias.end(), flat.begin() + static_cast<ptrdiff_t>(l) * num_experts);
    }
  }
  MOERT_RETURN_IF_ERROR(transport.broadcast(flat.data(), flat.size() * sizeof(float), 0));
  for (int l = 0; l < num_layers; ++l) {
    std::vector<float>& layer_bias = bias[static_cast<size_t>(l)];
    if (!layer_bias.empty()) {
      std::copy_n(flat.begin() + static_cast<ptrdiff_t>(l) * num_experts, num_experts, layer_bias.begin());
    }
  }
  return Status::ok();
}

// Replica balancing: rank 0 plans EPLB replicas from the loads since the last placement and
// every rank installs the same placement.
Status rebalance_replicas(comm::Transport& transport, const std::vector<int64_t>& window_loads,
                          const BatchJobConfig& config, int num_layers, int num_experts,
                          ExpertParallelExperts& experts) {
  const int world = transport.world_size();
  std::vector<uint8_t> placement_json;
  if (transport.rank() == 0) {
    const std::vector<float> weights(window_loads.begin(), window_loads.end());
    experts::EplbConfig eplb;
    eplb.num_gpus = world;
    eplb.num_replicas = world * slots_per_rank(num_experts, world, config.redundant_slots_per_rank);
    Result<experts::EplbPlan> plan = experts::rebalance_experts(weights, num_layers, num_experts, eplb);
    if (!plan.is_ok()) return plan.status().with_context("EPLB");
    Result<experts::ExpertPlacement> placement = experts::placement_from_eplb(*plan, world);
    if (!placement.is_ok()) return placement.status().with_context("EPLB placement");
    const std::string text = placement->to_json();
    placement_json.assign(text.begin(), text.end());
  }
  MOERT_RETURN_IF_ERROR(broadcast_blob(transport, placement_json));
  Result<experts::ExpertPlacement> placement =
      experts::parse_placement_json(std::string(placement_json.begin(), placement_json.end()), num_experts);
  if (!placement.is_ok()) return placement.status().with_context("placement from rank 0");
  experts.set_placement(std::move(placement).value());
  return Status::ok();
}

// After the last step: every rank's engine statistics and acceptance counts to rank 0, which
// fills the report's per-rank and imbalance fields.
Status gather_final_statistics(comm::Transport& transport, const engine::Engine& engine,
                               const experts::LoadTracker& expert_loads, const experts::LoadTracker& rank_loads,
                               int num_layers, BatchJobReport& report) {
  const int world = transport.world_size();
  double packed[kEngineStatFields];
  pack_engine_stats(engine.stats(), packed);
  std::vector<double> all(static_cast<size_t>(world) * kEngineStatFields);
  MOERT_RETURN_IF_ERROR(transport.gather(packed, sizeof(packed), all.data(), 0));
  const std::vector<int64_t> acceptance = engine.stats().acceptance.to_counts();
  Result<std::vector<std::vector<uint8_t>>> acceptances =
      transport.gatherv(acceptance.data(), acceptance.size() * sizeof(int64_t), 0);
  if (!acceptances.is_ok()) return acceptances.status();
  if (transport.rank() != 0) return Status::ok();
  for (int r = 0; r < world; ++r) {
    report.rank_engine_stats.push_back(unpack_engine_stats(all.data() + r * kEngineStatFields));
    const std::vector<uint8_t>& bytes = (*acceptances)[static_cast<size_t>(r)];
    std::vector<int64_t> counts(bytes.size() / sizeof(int64_t));
    std::memcpy(counts.data(), bytes.data(), counts.size() * sizeof(int64_t));
    if (!spec::AcceptanceStats::from_counts(counts, &report.rank_engine_stats.back().acceptance)) {
      return internal_error("rank " + std::to_string(r) + " sent malformed acceptance statistics");
    }
  }
  report.expert_run_max_violation = expert_loads.run_max_violation();
  report.expert_step_max_violation = expert_loads.mean_step_max_violation();
  for (int l = 0; l < num_layers; ++l) report.expert_run_max_violation_per_layer.push_back(expert_loads.run_max_violation(l));
  report.rank_run_max_violation = rank_loads.run_max_violation();
  report.rank_step_max_violation = rank_loads.mean_step_max_violation();
  return Status::ok();
}

}  // namespace

int auto_micro_batches(int world, int64_t tokens_all_ranks, int top_k, int num_experts) {
  if (world < 2 || num_experts < 1) return 1;
  return tokens_all_ranks * top_k >= 2 * kMicroBatchMinRowsPerExpert * num_experts ? 2 : 1;
}

Result<BatchJobReport> serve_in_lockstep(comm::Transport& transport, engine::Engine& engine, TransformerForward& model,
                                         ExpertParallelExperts& experts, const BatchJobConfig& config,
                                         const CoordinatorEvents& events) {
  MOERT_RETURN_IF_ERROR(validate_batch_job_config(config));
  MOERT_CHECK(transport.rank() != 0 || events.on_output, "serve_in_lockstep needs an on_output handler at rank 0");
  MOERT_CHECK(engine.config().forward_when_idle, "serve_in_lockstep needs an engine with forward_when_idle");
  const int rank = transport.rank();
  const int world = transport.world_size();
  const ModelConfig& model_config = model.config();
  const int num_layers = model_config.num_layers;
  const int num_experts = model_config.num_experts();
  const bool root = rank == 0;
  // A failure on one rank of many must end the job (the peers are inside collectives).
  auto fail = [&](const Status& status) -> Status {
    if (world > 1) transport.abort(1, "rank " + std::to_string(rank) + ": " + status.message());
    return status;
  };

  BatchJobReport report;
  report.payload_dtypes = experts.payload_dtypes();
  report.rank_totals.resize(static_cast<size_t>(world));
  experts::LoadTracker expert_loads(num_layers, num_experts);
  experts::LoadTracker rank_loads(num_layers, world);
  std::vector<std::vector<float>> bias(static_cast<size_t>(num_layers));
  if (config.balance == BalanceMode::kBias) {
    for (int l = 0; l < num_layers; ++l) {
      if (model_config.layer_is_moe[static_cast<size_t>(l)]) bias[static_cast<size_t>(l)].assign(static_cast<size_t>(num_experts), 0.0f);
    }
  }
  // The model reads `bias` during every step; the guard detaches it on every return path.
  const ScopedSelectionBias bias_guard(model, config.balance == BalanceMode::kBias ? &bias : nullptr);
  std::vector<int64_t> window_loads(static_cast<size_t>(num_layers) * num_experts, 0);  // since the last placement

  int64_t unfinished = engine.has_unfinished() ? 1 : 0;
  const Status reduced = transport.all_reduce(&unfinished, 1, comm::ReduceOp::kSum);
  if (!reduced.is_ok()) return fail(reduced);
  const Clock::time_point start = Clock::now();
  JobProgress progress;
  std::vector<int64_t> kv_used(static_cast<size_t>(world), 0), kv_pool(static_cast<size_t>(world), 0);  // [R]
  StepBaseline baseline{experts.stats(), engine.stats()};
  std::vector<int64_t> reduce(2 + static_cast<size_t>(num_layers) * (num_experts + world));
  // Micro-batches: fixed, or auto from the tokens of the step before (see BatchJobConfig).
  auto micro_batches_after = [&](int64_t tokens_all_ranks) {
    if (config.micro_batches != 0) return config.micro_batches;
    return auto_micro_batches(world, tokens_all_ranks, model_config.top_k(), num_experts);
  };
  experts.set_micro_batches(config.micro_batches != 0 ? config.micro_batches : (world > 1 ? 2 : 1));
  while (unfinished > 0) {
    // 1. One lock-step iteration.
    StepMetrics mine;
    Result<std::vector<engine::RequestOutput>> outputs = run_step_and_measure(engine, experts, baseline, mine);
    if (!outputs.is_ok()) return fail(outputs.status());

    // 2. Results and metrics to the coordinator.
    const Status collected = collect_step_at_root(transport, mine, *outputs, events, report, progress, kv_used, kv_pool);
    if (!collected.is_ok()) return fail(collected);
    ++report.steps;

    // 3. Work left anywhere, and the loads of this step.
    Result<size_t> routed_entries = share_work_left_and_loads(transport, engine, experts, num_layers,
                                                              mine.scheduled_tokens, reduce, expert_loads, rank_loads);
    if (!routed_entries.is_ok()) return fail(routed_entries.status());
    unfinished = reduce[0];
    experts.set_micro_batches(micro_batches_after(reduce.back()));
    const std::span<const int64_t> step_loads(reduce.data() + 1, *routed_entries);

    // 4. Balancing, decided at rank 0.
    if (config.balance == BalanceMode::kBias && unfinished > 0) {
      const Status updated = update_and_share_bias(transport, step_loads, config.balance_gamma, num_experts, bias);
      if (!updated.is_ok()) return fail(updated);
    }
    if (config.balance == BalanceMode::kReplicate) {
      for (size_t i = 0; i < window_loads.size(); ++i) window_loads[i] += step_loads[i];
      if (unfinished > 0 && report.steps % config.balance_interval == 0) {
        const Status installed = rebalance_replicas(transport, window_loads, config, num_layers, num_experts, experts);
        if (!installed.is_ok()) return fail(installed);
        ++report.rebalances;
        std::fill(window_loads.begin(), window_loads.end(), 0);
      }
    }

    if (root && events.on_progress) {
      progress.steps = report.steps;
      progress.elapsed_s = seconds_between(start, Clock::now());
      progress.finished = unfinished == 0;
      progress.step_expert_max_violation = expert_loads.last_step_max_violation();
      events.on_progress(progress);
    }
  }
  report.wall_s = seconds_between(start, Clock::now());

  const Status gathered = gather_final_statistics(transport, engine, expert_loads, rank_loads, num_layers, report);
  if (!gathered.is_ok()) return fail(gathered);
  return report;
}

}  // namespace moert::parallel
