// What `moert run` and `moert bench` share as batch jobs over MPI ranks: the transport (MPI
// under a launcher, else one rank), agreement on set-up errors, serving request lines in
// lock-step (rank 0 hands them out) and summing the ranks' engine statistics.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experts/placement/placement.h"
#include "launch/spec_options.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/comm/peer_watch.h"
#include "launch/serving/output_file.h"
#include "runtime/model/weights.h"
#include "runtime/comm/transport.h"
#include "runtime/engine/engine.h"
#include "runtime/parallel/batch_job.h"

namespace moert::launch {

// The MPI session (when launched by mpirun / srun), the job's transport and the watch on its
// ranks (runtime/comm/peer_watch.h; null with one rank or MOERT_PEER_TIMEOUT_S=0). Members are
// destroyed in reverse order: the watch says goodbye before the transport goes.
struct JobTransport {
  std::unique_ptr<comm::MpiSession> mpi;
  std::unique_ptr<comm::Transport> transport;
  std::unique_ptr<comm::PeerWatch> watch;
};
// Throws CommandError when started by an MPI launcher in a build without MPI, or when
// MOERT_PEER_TIMEOUT_S is not a number of seconds.
JobTransport make_job_transport();

// Collective: returns when every rank's set-up succeeded. A failing rank throws its own
// error; the others throw one naming the first failing rank, so every rank exits non-zero.
void agree_on_setup(comm::Transport& transport, const std::optional<std::string>& local_error);

// The requests rank 0 hands out: their lines (request_io.h keys, checked), KV block estimates
// and prefix keys (parallel::prefix_key, for cache-aware routing), in input order.
struct RequestBatch {
  std::vector<std::string> lines;
  std::vector<int64_t> blocks;
  std::vector<uint64_t> prefix_keys;
  void add(std::string line, const engine::Request& request, int block_size);
  size_t size() const { return lines.size(); }
};

// Collective: rank 0 passes the batch, the others an empty one. Each rank adds its share to
// `engine`, then all serve in lock-step; `events` are called at rank 0 (on_output for every
// finished request). A rank that cannot take a request aborts the job naming it.
Result<parallel::BatchJobReport> serve_request_lines(comm::Transport& transport, engine::Engine& engine,
                                                     TransformerForward& model, parallel::ExpertParallelExperts& experts,
                                                     const parallel::BatchJobConfig& job, const RequestBatch& batch,
                                                     const parallel::CoordinatorEvents& events);

// What every rank of a job must agree on, name -> value: the moert build, the model (its
// digest), the engine and speculation options, balancing, the placement, the routing.
using JobFields = std::map<std::string, std::string>;
JobFields job_fields(const LoadedModel& model, const engine::EngineConfig& engine, const SpecOptions& spec_options,
                     const SpecSetup& spec, const parallel::BatchJobConfig& job,
                     const experts::ExpertPlacement& placement, const std::string& routing);
// The digest of the checkpoint's text files (tokenizer.json, tokenizer_config.json,
// chat_template.jinja, generation_config.json; absent ones count as absent) plus `mode`
// (--generation-config): the "text" field of a job, which changes results.
std::string text_files_digest(const std::string& model_dir, const std::string& mode);
// The fields that change results (model, KV dtype, speculation, bias balancing, text): what an
// output's manifest records (launch/serving/output_file.h) besides the input's digest.
serving::OutputManifest output_manifest(const JobFields& fields);
// Collective: rank 0 compares every rank's fields with its own; on any difference every rank
// throws CommandError naming the first differing rank, field and both values.
void agree_on_job_fields(comm::Transport& transport, const JobFields& fields);
// Throws CommandError when two of input, output, metrics (metrics may be empty) name the
// same file (a path, a link or a hard link to it).
void check_distinct_paths(const std::string& input, const std::string& output, const std::string& metrics);

// Throws CommandError unless `path` is a readable regular file (not a directory, device,
// FIFO or socket: a batch input must be finite and readable twice, for its digest and its lines).
void check_input_file(const std::string& path);

// The job's totals from the ranks' statistics (sums; max for steps and times).
engine::EngineStats sum_engine_stats(const std::vector<engine::EngineStats>& ranks);

}  // namespace moert::launch
