#include "launch/job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/digest.h"

#include "launch/commands.h"
#include "runtime/comm/self_transport.h"
#include "launch/serving/request_io.h"

namespace moert::launch {

JobTransport make_job_transport() {
  JobTransport job;
  if (comm::launched_by_mpi()) {
    if (!comm::mpi_built()) {
      throw CommandError("started by an MPI launcher, but this moert was built without MPI (MOERT_WITH_MPI=OFF)");
    }
    job.mpi = std::make_unique<comm::MpiSession>(nullptr, nullptr);
    job.transport = value_or_throw(comm::make_mpi_transport());
    job.watch = value_or_throw(comm::start_peer_watch(*job.transport, value_or_throw(comm::peer_watch_options_from_env())));
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

void RequestBatch::add(std::string line, const engine::Request& request, int block_size) {
  lines.push_back(std::move(line));
  blocks.push_back(parallel::request_block_estimate(request, block_size));
  prefix_keys.push_back(parallel::prefix_key(request.prompt, block_size));
}

Result<parallel::BatchJobReport> serve_request_lines(comm::Transport& transport, engine::Engine& engine,
                                                     TransformerForward& model, parallel::ExpertParallelExperts& experts,
                                                     const parallel::BatchJobConfig& job, const RequestBatch& batch,
                                                     const parallel::CoordinatorEvents& events) {
  // Empty keys: the free-block rule alone (cache-aware routing needs the prefix cache).
  const bool cache_aware = job.prefix_routing && engine.config().enable_prefix_caching;
  Result<std::vector<std::string>> mine = parallel::distribute_request_lines(
      transport, batch.lines, batch.blocks, cache_aware ? batch.prefix_keys : std::vector<uint64_t>{},
      engine.config().num_kv_blocks - 1, nullptr);
  if (!mine.is_ok()) transport.abort(1, "distributing requests: " + mine.status().message());
  for (const std::string& line : *mine) {
    Result<engine::Request> request = serving::parse_request_line(line);
    const Status added = request.is_ok() ? engine.add_request(std::move(request).value()) : request.status();
    if (!added.is_ok()) {
      transport.abort(1, "rank " + std::to_string(transport.rank()) + " cannot take a request: " + added.message());
    }
  }
  return parallel::serve_in_lockstep(transport, engine, model, experts, job, events);
}

JobFields job_fields(const LoadedModel& model, const engine::EngineConfig& engine, const SpecOptions& spec_options,
                     const SpecSetup& spec, const parallel::BatchJobConfig& job,
                     const experts::ExpertPlacement& placement, const std::string& routing) {
  JobFields f;
  f["moert"] = MOERT_BUILD_COMMIT;
  f["model"] = model_digest(model.config, *model.checkpoint);
  f["kv_cache_dtype"] = attention::kv_cache_dtype_name(engine.kv_cache_dtype);
  f["block_size"] = std::to_string(engine.block_size);
  f["max_batched_tokens"] = std::to_string(engine.scheduler.max_batched_tokens);
  f["max_seqs"] = std::to_string(engine.scheduler.max_seqs);
  f["prefix_caching"] = engine.enable_prefix_caching ? "on" : "off";
  f["spec"] = spec_options.method;
  f["spec_k"] = spec_options.num_draft;
  f["spec_max_k"] = std::to_string(spec_options.max_num_draft);
  f["spec_ngram"] = std::to_string(spec_options.ngram_min) + ".." + std::to_string(spec_options.ngram_max);
  f["draft_model"] = spec.draft_model_digest();
  f["balance"] = parallel::balance_mode_name(job.balance);
  f["balance_gamma"] = std::to_string(job.balance_gamma);
  f["balance_interval"] = std::to_string(job.balance_interval);
  f["balance_redundant"] = std::to_string(job.redundant_slots_per_rank);
  f["placement"] = digest_of(placement.to_json());
  f["request_routing"] = routing;
  return f;
}

std::string text_files_digest(const std::string& model_dir, const std::string& mode) {
  Digest digest;
  digest.add(mode);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"}) {
    const std::filesystem::path path = std::filesystem::path(model_dir) / name;
    std::error_code error;
    const Result<std::string> file = std::filesystem::exists(path, error) ? digest_of_file(path.string())
                                                                          : Result<std::string>(std::string("absent"));
    digest.add(std::string("|") + name + "=" + (file.is_ok() ? *file : "unreadable"));
  }
  return digest.hex();
}

serving::OutputManifest output_manifest(const JobFields& fields) {
  serving::OutputManifest manifest;
  for (const char* key : {"model", "kv_cache_dtype", "spec", "spec_k", "spec_max_k", "spec_ngram", "draft_model", "balance",
                          "balance_gamma", "text", "ep_payloads"}) {
    if (fields.count(key) > 0) manifest[key] = fields.at(key);
  }
  return manifest;
}

void agree_on_job_fields(comm::Transport& transport, const JobFields& fields) {
  std::string mine;
  for (const auto& [key, value] : fields) mine += key + "=" + value + "\n";
  Result<std::vector<std::vector<uint8_t>>> all = transport.gatherv(mine.data(), mine.size(), 0);
  if (!all.is_ok()) transport.abort(1, "comparing the ranks' set-ups failed: " + all.status().message());
  std::string verdict;
  if (transport.rank() == 0) {
    for (int r = 1; r < transport.world_size() && verdict.empty(); ++r) {
      const std::vector<uint8_t>& bytes = (*all)[static_cast<size_t>(r)];
      std::map<std::string, std::string> theirs;
      std::string text(bytes.begin(), bytes.end());
      for (size_t start = 0; start < text.size();) {
        const size_t end = text.find('\n', start), eq = text.find('=', start);
        if (end == std::string::npos || eq == std::string::npos || eq > end) break;
        theirs[text.substr(start, eq - start)] = text.substr(eq + 1, end - eq - 1);
        start = end + 1;
      }
      for (const auto& [key, value] : fields) {
        const auto found = theirs.find(key);
        const std::string other = found == theirs.end() ? "(missing)" : found->second;
        if (other != value) {
          verdict = "rank " + std::to_string(r) + " was started differently from rank 0: " + key + " is " + other +
                    " there and " + value + " on rank 0";
          break;
        }
      }
    }
  }
  int64_t size = static_cast<int64_t>(verdict.size());
  if (!transport.broadcast(&size, sizeof(size), 0).is_ok()) transport.abort(1, "set-up agreement failed");
  verdict.resize(static_cast<size_t>(size));
  if (size > 0 && !transport.broadcast(verdict.data(), verdict.size(), 0).is_ok()) {
    transport.abort(1, "set-up agreement failed");
  }
  if (!verdict.empty()) throw CommandError(verdict);
}

void check_input_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw CommandError("cannot open input " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) throw CommandError("input " + path + " is a directory");
  if (!S_ISREG(info.st_mode)) throw CommandError("input " + path + " is not a regular file (a device, FIFO or socket)");
  if (::access(path.c_str(), R_OK) != 0) throw CommandError("cannot read input " + path + ": " + std::strerror(errno));
}

void check_distinct_paths(const std::string& input, const std::string& output, const std::string& metrics) {
  namespace fs = std::filesystem;
  auto same = [](const std::string& a, const std::string& b) {
    if (a.empty() || b.empty() || a == "-" || b == "-") return false;
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
  };
  if (same(input, output)) throw CommandError("--output " + output + " is the input file; nothing was written");
  if (same(metrics, output)) throw CommandError("--metrics " + metrics + " is the output file; nothing was written");
  if (same(metrics, input)) throw CommandError("--metrics " + metrics + " is the input file; nothing was written");
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
