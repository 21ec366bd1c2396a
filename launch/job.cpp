#include "launch/job.h"

#include <algorithm>

#include "launch/commands.h"
#include "runtime/comm/self_transport.h"
#include "runtime/engine/request_io.h"

namespace moert::launch {

JobTransport make_job_transport() {
  JobTransport job;
  if (comm::launched_by_mpi()) {
    if (!comm::mpi_built()) {
      throw CommandError("started by an MPI launcher, but this moert was built without MPI (MOERT_WITH_MPI=OFF)");
    }
    job.mpi = std::make_unique<comm::MpiSession>(nullptr, nullptr);
    job.transport = value_or_throw(comm::make_mpi_transport());
  } else {
    job.transport = comm::make_self_transport();
  }
  return job;
}

void agree_on_setup(comm::Transport& transport, const std::optional<std::string>& local_error) {
  int64_t first_failure = local_error ? transport.world_size() - transport.rank() : 0;
  const Status reduced = transport.all_reduce(&first_failure, 1, comm::ReduceOp::kMax);
  if (!reduced.is_ok()) transport.abort(1, "setup agreement failed: " + reduced.message());
  if (local_error) throw CommandError(*local_error);
  if (first_failure > 0) {
    throw CommandError("rank " + std::to_string(transport.world_size() - first_failure) +
                       " failed to start (its message is above)");
  }
}

Result<parallel::BatchJobReport> serve_request_lines(comm::Transport& transport, engine::Engine& engine,
                                                     TransformerForward& model, parallel::ExpertParallelExperts& experts,
                                                     const parallel::BatchJobConfig& job,
                                                     const std::vector<std::string>& lines,
                                                     const std::vector<int64_t>& blocks,
                                                     const std::function<Status(const std::string&)>& write_line) {
  std::vector<uint64_t> prefix_keys;  // rank 0, cache-aware routing
  if (job.prefix_routing && engine.config().enable_prefix_caching) {
    for (const std::string& line : lines) {
      Result<engine::Request> request = engine::parse_request_line(line);
      prefix_keys.push_back(request.is_ok() ? parallel::prefix_key(request->prompt, engine.config().block_size) : 0);
    }
  }
  Result<std::vector<std::string>> mine = parallel::distribute_request_lines(
      transport, lines, blocks, prefix_keys, engine.config().num_kv_blocks - 1, nullptr);
  if (!mine.is_ok()) transport.abort(1, "distributing requests: " + mine.status().message());
  for (const std::string& line : *mine) {
    Result<engine::Request> request = engine::parse_request_line(line);
    const Status added = request.is_ok() ? engine.add_request(std::move(request).value()) : request.status();
    if (!added.is_ok()) {
      transport.abort(1, "rank " + std::to_string(transport.rank()) + " cannot take a request: " + added.message());
    }
  }
  parallel::BatchJobConfig config = job;
  config.total_requests = static_cast<int64_t>(lines.size());  // rank 0 holds them all
  return parallel::serve_in_lockstep(transport, engine, model, experts, config, write_line);
}

engine::EngineStats sum_engine_stats(const std::vector<engine::EngineStats>& ranks) {
  engine::EngineStats total;
  for (const engine::EngineStats& s : ranks) {
    total.steps = std::max(total.steps, s.steps);
    total.prompt_tokens += s.prompt_tokens;
    total.computed_tokens += s.computed_tokens;
    total.output_tokens += s.output_tokens;
    total.preemptions += s.preemptions;
    total.cow_copies += s.cow_copies;
    total.peak_used_blocks = std::max(total.peak_used_blocks, s.peak_used_blocks);
    total.prefix_hit_tokens += s.prefix_hit_tokens;
    total.prefix_query_tokens += s.prefix_query_tokens;
    total.unused_slots_at_peak += s.unused_slots_at_peak;  // each rank's own peak
    total.running_at_peak += s.running_at_peak;
    total.forward_s = std::max(total.forward_s, s.forward_s);
    total.sample_s = std::max(total.sample_s, s.sample_s);
    total.acceptance.merge(s.acceptance);
    total.spec_steps = std::max(total.spec_steps, s.spec_steps);
    total.spec_off_steps = std::max(total.spec_off_steps, s.spec_off_steps);
    total.draft_s = std::max(total.draft_s, s.draft_s);
    total.verify_s = std::max(total.verify_s, s.verify_s);
  }
  return total;
}

}  // namespace moert::launch
