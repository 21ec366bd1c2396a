// moert bench: offline throughput and latency of ONE engine over all ranks (expert
// parallelism under mpirun / srun, as `moert run` serves). Rank 0 makes or reads the
// requests, hands them out, gathers every request's timings and reports once: per batch
// size (the concurrency limit) output and total throughput and TTFT / TPOT / ITL / E2E
// percentiles (launch/serving/bench_stats.h), as text, JSON, CSV and a plot.
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "experts/placement/placement.h"
#include "launch/bench_options.h"
#include "launch/bench_plot.h"
#include "launch/commands.h"
#include "launch/engine_options.h"
#include "launch/job.h"
#include "launch/rank_worker.h"
#include "launch/serving/bench_stats.h"
#include "launch/serving/job_report.h"
#include "launch/serving/request_io.h"
#include "runtime/sampling/sampler.h"

#ifndef MOERT_BUILD_COMMIT
#define MOERT_BUILD_COMMIT "unknown"
#endif

namespace po = boost::program_options;

namespace moert::launch {
namespace {

struct BenchOptions {
  std::string model_dir, input_path, batch_sizes = "", json_path, csv_path, plot_path;
  int num_requests = 0, input_len = 128, output_len = 64, warmup = 1, repeats = 3;
  std::string len_dist = "fixed";
  double len_range = 0.5;
  int64_t seed = 0;  // >= 0 (validate_bench_options); a signed option, so -1 is refused, not wrapped
  bool repetitive = false;
};

// A length around `mean` for request r: fixed, or uniform in [mean (1 - range), mean (1 + range)].
int request_length(const BenchOptions& o, int mean, uint64_t stream, int r) {
  if (o.len_dist == "fixed") return mean;
  const double u = sampling::counter_uniform(static_cast<uint64_t>(o.seed) ^ 0x5bd1e995u, stream, static_cast<uint64_t>(r));
  const double low = mean * (1.0 - o.len_range), high = mean * (1.0 + o.len_range);
  return std::max(1, static_cast<int>(low + u * (high - low + 1.0)));
}

// Request lines of one run (rank 0): synthetic random prompts, or the --input file's lines
// with fresh ids. Ids name the batch size and run so that no two runs share a prefix hash.
std::vector<std::string> make_request_lines(const BenchOptions& o, const std::vector<std::string>& input_lines,
                                            int vocab_size, int num_requests, int batch_size, int run) {
  std::vector<std::string> lines;
  const std::string prefix = "b" + std::to_string(batch_size) + "-r" + std::to_string(run) + "-";
  for (int r = 0; r < num_requests; ++r) {
    nlohmann::json request;
    if (!input_lines.empty()) {
      request = nlohmann::json::parse(input_lines[static_cast<size_t>(r) % input_lines.size()]);
    } else {
      const int input_len = request_length(o, o.input_len, 1, r), output_len = request_length(o, o.output_len, 2, r);
      std::vector<int32_t> prompt;
      for (int i = 0; i < input_len; ++i) {
        const int at = o.repetitive ? i % 8 : i;  // a repetitive prompt repeats its first 8 tokens
        // Runs draw different prompts (no prefix-cache hits between repeats).
        const double u = sampling::counter_uniform(static_cast<uint64_t>(o.seed) + static_cast<uint64_t>(run) * 7919u +
                                                       static_cast<uint64_t>(batch_size) * 104729u,
                                                   static_cast<uint64_t>(r), static_cast<uint64_t>(at));
        prompt.push_back(static_cast<int32_t>(u * vocab_size));
      }
      request = {{"prompt_token_ids", prompt}, {"max_tokens", output_len}};
    }
    request["id"] = prefix + std::to_string(r);
    lines.push_back(request.dump());
  }
  return lines;
}

// The --input file's request lines (rank 0), each checked as `moert run` would parse it.
// Throws CommandError naming the file and line.
std::vector<std::string> read_bench_input(const std::string& path) {
  check_input_file(path);
  std::ifstream input(path);
  if (!input) throw CommandError("cannot open input " + path);
  std::vector<std::string> lines;
  int line_number = 0;
  for (std::string line; std::getline(input, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Status parsed = serving::parse_request_line(line).status();
    if (!parsed.is_ok()) throw CommandError(path + " line " + std::to_string(line_number) + ": " + parsed.message());
    lines.push_back(line);
  }
  if (lines.empty()) throw CommandError(path + " holds no requests");
  return lines;
}

// The backend and the instruction set its kernels chose: "cpu (avx512)".
std::string device_name(const backend::Backend& backend) {
  const std::string isa = backend.kernel_paths().isa;
  return isa.empty() ? std::string(backend.name()) : std::string(backend.name()) + " (" + isa + ")";
}

std::string hostname() {
  char name[256] = {0};
  return gethostname(name, sizeof(name) - 1) == 0 ? name : "unknown";
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  po::options_description options("moert bench options");
  BenchOptions o;
  RankWorkerOptions worker_options;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&o.model_dir)->required(), "Hugging Face model directory (e.g. from moert make-model)")
      ("input", po::value(&o.input_path), "requests in any format `moert run` reads (default: synthetic random prompts)")
      ("batch-sizes", po::value(&o.batch_sizes), "comma-separated concurrency limits, one result each (default: --max-seqs)")
      ("num-requests", po::value(&o.num_requests)->default_value(0), "requests per run (0: 4 x batch size, at least 8)")
      ("input-len", po::value(&o.input_len)->default_value(128), "prompt tokens per synthetic request (mean)")
      ("output-len", po::value(&o.output_len)->default_value(64), "generated tokens per synthetic request (mean; no stop)")
      ("len-dist", po::value(&o.len_dist)->default_value("fixed"), "length distribution: fixed, or uniform in [len (1 - r), len (1 + r)]")
      ("len-range", po::value(&o.len_range)->default_value(0.5), "r of --len-dist uniform, in [0, 1)")
      ("warmup", po::value(&o.warmup)->default_value(1), "untimed runs before the timed ones, per batch size")
      ("repeats", po::value(&o.repeats)->default_value(3), "timed runs per batch size (medians and spread)")
      ("seed", po::value(&o.seed)->default_value(0), "seed of the synthetic prompts")
      ("repetitive", po::bool_switch(&o.repetitive), "prompts repeat a random 8-token phrase (where n-gram drafting shines)")
      ("json", po::value(&o.json_path), "write {\"config\": ..., \"results\": [...]} here (rank 0)")
      ("csv", po::value(&o.csv_path), "write one CSV row per result here (rank 0)")
      ("plot", po::value(&o.plot_path), "write a PNG: throughput vs batch size, TPOT vs throughput (gnuplot)");
  add_engine_options(options, worker_options.engine);
  add_spec_options(options, worker_options.spec);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  validate_bench_options(vm);
  if (o.input_len < 1 || o.output_len < 1) throw CommandError("--input-len and --output-len must be >= 1");
  if (o.num_requests < 0) throw CommandError("--num-requests must be >= 0");
  if (o.warmup < 0 || o.repeats < 1) throw CommandError("--warmup must be >= 0 and --repeats >= 1");
  if (o.len_dist != "fixed" && o.len_dist != "uniform") {
    throw CommandError("--len-dist '" + o.len_dist + "' is not fixed or uniform");
  }
  if (!(o.len_range >= 0.0 && o.len_range < 1.0)) throw CommandError("--len-range must be in [0, 1)");
  std::vector<int> batch_sizes = o.batch_sizes.empty() ? std::vector<int>{worker_options.engine.max_seqs}
                                                       : parse_int_list(o.batch_sizes, "batch-sizes");
  for (int b : batch_sizes) {
    if (b < 1) throw CommandError("--batch-sizes entries must be >= 1 (got " + std::to_string(b) + ")");
  }

  JobTransport job_transport = make_job_transport();
  comm::Transport& transport = *job_transport.transport;
  const bool root = transport.rank() == 0;
  const int ranks = transport.world_size();
  worker_options.model_dir = o.model_dir;

  std::unique_ptr<RankWorker> worker;
  std::vector<std::string> input_lines;
  std::optional<std::string> setup_error;
  try {
    worker = std::make_unique<RankWorker>(transport, worker_options);
    worker->engine_config().record_token_times = true;
    if (root && !o.input_path.empty()) input_lines = read_bench_input(o.input_path);
  } catch (const CommandError& e) {
    setup_error = e.what();
  }
  agree_on_setup(transport, setup_error);
  const LoadedModel& model = worker->model();
  const engine::EngineConfig& config = worker->engine_config();
  const SpecOptions& spec_options = worker_options.spec;
  const int threads = worker->threads();
  if (root) {
    std::cout << "model: " << describe_model_config(model.config) << "\n"
              << describe_engine_config(config, threads) << ", device " << worker_options.engine.device
              << describe_weight_modes(worker_options.engine, worker->backend()) << ", " << ranks << " rank(s)\n"
              << worker->spec().describe() << "\n";
  }
  worker->start();
  TransformerForward& forward = worker->forward();
  spec::Proposer* proposer = worker->proposer();
  parallel::BatchJobConfig job;
  job.micro_batches = resolve_micro_batches(worker_options.engine);

  std::vector<serving::BenchResult> results;
  std::vector<nlohmann::json> exchanges;  // per result: each rank's exchange in its last timed run
  for (const int batch_size : batch_sizes) {
    engine::EngineConfig run_config = config;
    run_config.scheduler.max_seqs = (batch_size + ranks - 1) / ranks;  // the limit over all ranks
    const int num_requests = o.num_requests > 0 ? o.num_requests : std::max(8, 4 * batch_size);
    std::vector<serving::RunMeasurement> timed;
    engine::EngineStats last_totals;  // of the last timed run, for the engine and spec summaries
    std::vector<parallel::StepMetrics> last_rank_totals;  // of the last timed run, for the exchange figures
    double last_wall_s = 0.0;
    for (int run = 0; run < o.warmup + o.repeats; ++run) {
      engine::Engine engine(forward, run_config);  // a fresh KV pool: no hits from earlier runs
      engine.set_proposer(proposer);
      RequestBatch batch;
      if (root) {
        for (std::string& line : make_request_lines(o, input_lines, model.config.vocab_size, num_requests, batch_size, run)) {
          Result<engine::Request> request = serving::parse_request_line(line);
          const Status fits = request.is_ok() ? engine.check_request(*request) : request.status();
          if (!fits.is_ok()) transport.abort(1, "bench request: " + fits.message());
          batch.add(std::move(line), *request, run_config.block_size);
        }
      }
      serving::RunMeasurement measurement;
      const auto start = std::chrono::steady_clock::now();
      parallel::CoordinatorEvents events;
      events.on_output = [&](const engine::RequestOutput& output) {
        measurement.requests.push_back(serving::request_timing(output));
        return Status::ok();
      };
      Result<parallel::BatchJobReport> report =
          serve_request_lines(transport, engine, forward, worker->experts(), job, batch, events);
      measurement.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!report.is_ok()) throw CommandError(report.status().message());
      if (root) {
        last_totals = sum_engine_stats(report->rank_engine_stats);
        last_rank_totals = report->rank_totals;
        last_wall_s = measurement.wall_s;
      }
      if (run >= o.warmup) timed.push_back(std::move(measurement));
    }
    if (!root) continue;
    std::cout << engine_summary(last_totals, run_config, model.config, last_wall_s) << "\n";
    if (worker->spec().enabled()) std::cout << worker->spec().summary(last_totals) << "\n";
    const serving::BenchResult result = serving::aggregate(timed, ranks, batch_size);
    results.push_back(result);
    nlohmann::json exchange = nlohmann::json::array();
    for (size_t r = 0; r < last_rank_totals.size(); ++r) {
      exchange.push_back(serving::exchange_json(static_cast<int>(r), last_rank_totals[r]));
    }
    exchanges.push_back(std::move(exchange));
    std::printf("bench: ranks=%d batch_size=%d requests=%lld input_len=%.1f output_len=%.1f threads=%d spec=%s "
                "spec_k=%s wall_s=%.3f input_tok_s=%.1f output_tok_s=%.1f total_tok_s=%.1f ttft_ms_p50=%.2f "
                "tpot_ms_p50=%.3f itl_ms_p99=%.3f e2e_ms_p50=%.2f acceptance=%.3f tokens_per_pass=%.3f\n",
                ranks, batch_size, static_cast<long long>(result.num_requests), result.input_len, result.output_len,
                threads, spec_options.method.c_str(), spec_options.num_draft.c_str(), result.wall_s,
                result.total_throughput_tok_s - result.output_throughput_tok_s, result.output_throughput_tok_s,
                result.total_throughput_tok_s, result.ttft_ms.p50, result.tpot_ms.p50, result.itl_ms.p99,
                result.e2e_ms.p50, last_totals.acceptance.acceptance_rate(),
                last_totals.acceptance.mean_tokens_per_pass());
    std::fflush(stdout);
  }
  if (!root) return 0;

  const parallel::PayloadDTypes payload_dtypes = resolve_payload_dtypes(worker_options.engine);
  const nlohmann::json bench_config = {
      {"model", o.model_dir},
      {"architecture", architecture_name(model.config.arch)},
      {"weight_formats", describe_weight_formats(model.weights)},
      {"kv_cache_dtype", attention::kv_cache_dtype_name(config.kv_cache_dtype)},
      {"device", device_name(worker->backend())},
      {"ranks", ranks},
      {"threads_per_rank", threads},
      {"block_size", config.block_size},
      {"max_batched_tokens", config.scheduler.max_batched_tokens},
      {"prefix_caching", config.enable_prefix_caching},
      {"ep_dispatch_dtype", parallel::payload_dtype_name(payload_dtypes.dispatch)},
      {"ep_combine_dtype", parallel::payload_dtype_name(payload_dtypes.combine)},
      {"micro_batches", worker_options.engine.micro_batches},
      {"spec", spec_options.method},
      {"spec_k", spec_options.num_draft},
      {"input", o.input_path.empty() ? nlohmann::json("synthetic") : nlohmann::json(o.input_path)},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"len_dist", o.len_dist},
      {"warmup", o.warmup},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"commit", MOERT_BUILD_COMMIT},
      {"host", hostname()}};
  nlohmann::json document = {{"config", bench_config}, {"results", nlohmann::json::array()}};
  for (size_t i = 0; i < results.size(); ++i) {
    nlohmann::json result = serving::result_to_json(results[i]);
    result["exchange"] = exchanges[i];  // per rank, the last timed run (docs/ep-exchange.md)
    document["results"].push_back(std::move(result));
  }
  if (!o.json_path.empty()) throw_if_error(write_text_file(o.json_path, document.dump(2) + "\n"));
  if (!o.csv_path.empty()) {
    std::string csv = serving::csv_header() + "\n";
    for (const serving::BenchResult& r : results) csv += serving::csv_row(r) + "\n";
    throw_if_error(write_text_file(o.csv_path, csv));
  }
  if (!o.plot_path.empty()) throw_if_error(plot_bench_results(document, o.plot_path));
  return 0;
}

}  // namespace moert::launch
