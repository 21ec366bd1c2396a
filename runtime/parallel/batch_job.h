// One JSONL batch served by every rank of a job (data-parallel attention, expert-parallel
// MoE). Rank 0 is the coordinator: it assigns requests, gathers results, step metrics and
// progress (handed on as plain records, CoordinatorEvents: it formats nothing) and owns load
// balancing. Every function here is collective unless it says "pure": all
// ranks call it, in the same order.
//
// Lock-step protocol, per iteration, on every rank:
//   1. engine.step(): one forward (an empty one on a rank without work), so every rank
//      takes part in each MoE layer's dispatch and combine;
//   2. gatherv at rank 0 of [StepMetrics | finished RequestOutputs (request_output_codec.h)];
//      rank 0 hands them to CoordinatorEvents;
//   3. all_reduce(sum) of [unfinished flag | routed loads [L, E] | computed loads [L, R]];
//   4. balancing (rank 0 decides, broadcasts): new router biases (--balance=bias) or, every
//      balance_interval steps, a new placement with replicas (--balance=replicate).
// The loop ends on every rank in the same iteration: when the reduced flag is 0.
// Failure: a rank whose step fails, or rank 0 whose event handler fails, aborts the whole job
// (Transport::abort) with a message naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/comm/transport.h"
#include "core/status.h"
#include "runtime/engine/engine.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/payload_codec.h"

namespace moert::parallel {

enum class BalanceMode { kNone, kBias, kReplicate };
// "none", "bias", "replicate"; anything else is invalid_argument naming it.
Result<BalanceMode> parse_balance_mode(const std::string& text);
const char* balance_mode_name(BalanceMode mode);

struct BatchJobConfig {
  BalanceMode balance = BalanceMode::kNone;
  float balance_gamma = 0.001f;      // bias step per iteration (--balance=bias)
  int balance_interval = 16;         // steps between replica plans (--balance=replicate)
  int redundant_slots_per_rank = 1;  // extra expert slots per rank (--balance=replicate)
  bool prefix_routing = true;        // requests sharing a first block go to the same rank (assign_requests)
  // MoE micro-batches per step (ExpertParallelExperts::set_micro_batches): 1, 2, or 0 = auto
  // (auto_micro_batches on the previous step's tokens; the first step: 2 with several ranks).
  // The decision comes from the step's all-reduce, so every rank takes the same one.
  int micro_batches = 0;
};

// Each half of a step must give a routed expert this many rows on average for two
// micro-batches to pay: below it, an expert's weights are streamed once per half for few rows
// and the second stream costs more than the exchange the halves hide (docs/ep-exchange.md,
// "Micro-batch overlap": 0.86x at 2 rows, 1.08x at 64 rows per expert and half).
inline constexpr int64_t kMicroBatchMinRowsPerExpert = 8;
// 2 when there are several ranks and tokens_all_ranks * top_k / (2 * num_experts) reaches
// kMicroBatchMinRowsPerExpert, else 1.
int auto_micro_batches(int world, int64_t tokens_all_ranks, int top_k, int num_experts);
// invalid_argument naming the option for gamma < 0, interval < 1, redundant slots < 0.
Status validate_batch_job_config(const BatchJobConfig& config);

// Pure. Request i goes to the rank with the most KV blocks left after the requests before
// it (pool_blocks[r] minus what it was given so far; ties: the lowest rank), so ranks with
// bigger pools get more work. request_blocks[i] >= 0, pool_blocks non-empty.
std::vector<int> assign_by_free_blocks(const std::vector<int64_t>& request_blocks,
                                       const std::vector<int64_t>& pool_blocks);
// Pure. Cache-aware assignment: a request whose prompt_key (prefix_key) is not 0 and was seen
// before follows the rank its first request went to, so the prompt's cached blocks serve it
// there, as long as that rank can still hold it (free blocks >= its blocks) and is not
// overloaded: its assigned blocks exceed the least-loaded rank's by at most
// max(the request's blocks, total blocks / (4 x ranks)). Otherwise, and for key 0, the
// free-block rule above. Empty prefix_keys: assign_by_free_blocks.
std::vector<int> assign_requests(const std::vector<int64_t>& request_blocks, const std::vector<uint64_t>& prefix_keys,
                                 const std::vector<int64_t>& pool_blocks);
// Pure. A key of the prompt's first block (FNV-1a of its first block_size ids) when the
// prompt is longer than one block (only then can a prefix-cache hit serve it), else 0.
uint64_t prefix_key(const std::vector<int32_t>& prompt, int block_size);
// Pure. Blocks a request can hold at most: n samples x ceil((prompt + max_tokens) / B),
// ignoring prefix sharing.
int64_t request_block_estimate(const engine::Request& request, int block_size);

// Collective. Rank 0 passes every request line, its block estimate and its prefix key
// (assign_requests; empty: no cache-aware routing); other ranks pass empty vectors; every
// rank passes the usable blocks of its own KV pool. Returns the lines assigned to this
// rank, in input order; at rank 0 *assignment (if not null) receives the rank of every line.
Result<std::vector<std::string>> distribute_request_lines(comm::Transport& transport,
                                                          const std::vector<std::string>& lines,
                                                          const std::vector<int64_t>& blocks,
                                                          const std::vector<uint64_t>& prefix_keys,
                                                          int64_t pool_blocks, std::vector<int>* assignment);

// What one rank did in one step (also summed over the run).
struct StepMetrics {
  int64_t scheduled_tokens = 0;  // tokens through the model
  int64_t output_tokens = 0;     // sampled tokens
  int64_t finished_requests = 0;
  int64_t dispatch_bytes = 0;    // sent to other ranks
  int64_t combine_bytes = 0;
  double step_s = 0.0;           // whole engine step
  double all_to_all_s = 0.0;     // inside exchanges (waiting for peers included)
  double expert_s = 0.0;         // routed experts computed here
  double shared_s = 0.0;         // shared experts, overlapped with the dispatch
  double exchange_in_flight_s = 0.0;  // exchanges from start to done (ExpertParallelStats)
  double exchange_wait_s = 0.0;       // of that, blocked in waits: hidden = 1 - wait / in flight
  int64_t spec_drafts = 0;       // draft tokens verified (speculative decoding)
  int64_t spec_accepted = 0;     // of those, accepted
  double draft_s = 0.0;          // in the proposer
  // Gauges at the end of the step (the totals keep the last value).
  int64_t kv_used_blocks = 0;
  int64_t kv_pool_blocks = 0;    // usable blocks of this rank's pool
};

// What rank 0 has seen of the whole job after a step (for progress displays).
struct JobProgress {
  int64_t steps = 0;               // lock-step iterations so far
  double elapsed_s = 0.0;          // since the first step
  bool finished = false;           // no rank has work left: the last call
  int64_t finished_requests = 0;
  int64_t output_tokens = 0;
  int64_t kv_used_blocks = 0;      // over all ranks, after the last step
  int64_t kv_total_blocks = 0;     // usable blocks over all ranks
  int64_t spec_drafts = 0;         // draft tokens verified so far (0: not speculating)
  int64_t spec_accepted = 0;
  double step_expert_max_violation = 0.0;  // MaxVio of the last step's routed loads
};

// What the coordinator hands to the serving layer, at rank 0 only (other ranks' are not
// called). The coordinator formats nothing: results, metrics and progress are plain records.
struct CoordinatorEvents {
  // Once per finished request: within a step in rank order, then in the order the rank
  // finished them. A failed status ends the job on every rank.
  std::function<Status(const engine::RequestOutput&)> on_output;
  // Once per rank and step (may be empty): `step` counts from 0. A failed status ends the job.
  std::function<Status(int64_t step, int rank, const StepMetrics&)> on_step_metrics;
  // After every step (may be empty).
  std::function<void(const JobProgress&)> on_progress;
};

struct BatchJobReport {  // complete at rank 0 only
  int64_t steps = 0;
  double wall_s = 0.0;
  std::vector<StepMetrics> rank_totals;       // [R]
  std::vector<engine::EngineStats> rank_engine_stats;  // [R] at the end
  // Expert load over experts (MaxVio of tokens per logical expert, docs/moe.md §2.1):
  double expert_run_max_violation = 0.0;      // over the whole run, mean over layers
  double expert_step_max_violation = 0.0;     // mean over steps of the per-step value
  std::vector<double> expert_run_max_violation_per_layer;  // [L] (0 for dense layers)
  // Compute load over ranks (contributions computed per rank): what replicas change.
  double rank_run_max_violation = 0.0;
  double rank_step_max_violation = 0.0;
  int rebalances = 0;                         // placements installed (--balance=replicate)
  PayloadDTypes payload_dtypes;               // what the exchanged rows travelled as
};

// Collective: serves what was added to `engine` in lock-step with every other rank until
// no rank has work. engine's forward must be `model` with `experts` as its routed experts
// and engine.config().forward_when_idle set. `events` are called at rank 0 only.
Result<BatchJobReport> serve_in_lockstep(comm::Transport& transport, engine::Engine& engine, TransformerForward& model,
                                         ExpertParallelExperts& experts, const BatchJobConfig& config,
                                         const CoordinatorEvents& events);

}  // namespace moert::parallel
