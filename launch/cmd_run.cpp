// moert run: serves a JSONL batch of requests with the continuous-batching engine, on one
// rank or on every rank of an MPI job (mpirun / srun --mpi=pmix). Rank 0 reads the input,
// assigns requests, writes the one output file and prints progress and the summary.
#include <boost/program_options.hpp>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <unordered_set>

#include "experts/placement/placement.h"
#include "core/digest.h"
#include "core/log.h"
#include "launch/commands.h"
#include "launch/job.h"
#include "launch/rank_worker.h"
#include "launch/request_reader.h"
#include "launch/serving/job_report.h"
#include "launch/serving/progress.h"
#include "launch/serving/request_io.h"
#include "launch/text_io.h"
#include "runtime/model/generation_config.h"
#include "runtime/parallel/batch_job.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_serve_batch(const std::vector<std::string>& args) {
  po::options_description options("moert run options");
  std::string model_dir, input_path, output_path, save_placement_path, balance = "none", routing, metrics_path;
  std::string generation_mode = "auto";
  bool resume = false;
  double progress_interval_s = 2.0;
  RankWorkerOptions worker_options;
  parallel::BatchJobConfig job;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "Hugging Face model directory")
      ("input", po::value(&input_path)->required(), "requests, one JSON object a line (read by rank 0)")
      ("output", po::value(&output_path)->required(),
       "results, one JSON line per finished request, written by rank 0 (\"-\" or a pipe: a plain stream); an existing "
       "non-empty file is refused unless --resume")
      ("resume", po::bool_switch(&resume),
       "continue the job that wrote --output (same model, input and result-changing options, checked against "
       "OUTPUT.manifest.json): its finished ids are skipped, a torn last line is cut")
      ("generation-config", po::value(&generation_mode)->default_value("auto"),
       "auto: requests that do not set temperature, top_p, top_k, repetition_penalty or max_tokens get the values of "
       "the checkpoint's generation_config.json (as vLLM does); none: moert's defaults (greedy, 16 tokens). EOS ids "
       "stop generation either way (unless a request sets ignore_eos)")
      ("progress-interval", po::value(&progress_interval_s)->default_value(2.0), "seconds between progress lines on stderr")
      ("expert-placement", po::value(&worker_options.placement_path),
       "expert placement JSON (experts/placement/placement.h), e.g. saved by an earlier --balance=replicate job; "
       "default: contiguous slices")
      ("placement", po::value(&worker_options.placement_path), "the same as --expert-placement")
      ("save-expert-placement", po::value(&save_placement_path),
       "write the expert placement in use at the end of the job here (rank 0), for --expert-placement next time")
      ("balance", po::value(&balance)->default_value("none"), "expert load balancing: none, bias (auxiliary-loss-free router bias), replicate (EPLB replicas)")
      ("balance-gamma", po::value(&job.balance_gamma)->default_value(0.001f), "bias step per iteration for --balance=bias")
      ("balance-interval", po::value(&job.balance_interval)->default_value(16), "iterations between replica plans for --balance=replicate")
      ("balance-redundant", po::value(&job.redundant_slots_per_rank)->default_value(1), "extra expert slots per rank for --balance=replicate")
      ("metrics", po::value(&metrics_path), "per-step, per-rank metrics JSONL written by rank 0")
      ("request-routing", po::value(&routing)->default_value("prefix"),
       "how rank 0 assigns requests: prefix (requests sharing a first KV block go to the same rank, so its prefix "
       "cache serves them) or free-blocks (to the rank with the most free KV blocks)");
  add_engine_options(options, worker_options.engine);
  add_spec_options(options, worker_options.spec);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  job.balance = value_or_throw(parallel::parse_balance_mode(balance));
  if (routing != "prefix" && routing != "free-blocks") {
    throw CommandError("--request-routing '" + routing + "' is not prefix or free-blocks");
  }
  job.prefix_routing = routing == "prefix";
  job.micro_batches = resolve_micro_batches(worker_options.engine);
  if (generation_mode != "auto" && generation_mode != "none") {
    throw CommandError("--generation-config '" + generation_mode + "' is not auto or none");
  }
  throw_if_error(parallel::validate_batch_job_config(job));
  if (job.balance == parallel::BalanceMode::kReplicate && !worker_options.placement_path.empty()) {
    throw CommandError("--balance=replicate computes its own placement; drop --expert-placement " +
                       worker_options.placement_path +
                       " (or keep it and drop --balance)");
  }

  JobTransport job_transport = make_job_transport();
  comm::Transport* transport = job_transport.transport.get();
  const bool root = transport->rank() == 0;
  worker_options.model_dir = model_dir;

  // Setup on every rank; errors are agreed on so that no rank waits for a dead peer.
  std::unique_ptr<RankWorker> worker;
  std::unique_ptr<serving::OutputFile> writer;
  std::unique_ptr<serving::MetricsFile> metrics;
  std::unique_ptr<CheckpointText> text;  // tokenizer and chat template, on every rank (launch/text_io.h)
  std::optional<GenerationDefaults> generation;
  std::unordered_set<std::string> done;
  JobFields fields;
  std::optional<std::string> setup_error;
  try {
    worker = std::make_unique<RankWorker>(*transport, worker_options);
    text = CheckpointText::load(model_dir);
    generation = value_or_throw(load_generation_defaults(model_dir, worker->model().config));
    worker->engine_config().eos_token_ids = generation->eos_token_ids;
    fields = job_fields(worker->model(), worker->engine_config(), worker_options.spec, worker->spec(), job,
                        worker->placement(), routing);
    fields["text"] = text_files_digest(model_dir, generation_mode);
    const parallel::PayloadDTypes payloads = resolve_payload_dtypes(worker_options.engine);
    fields["ep_payloads"] = std::string(parallel::payload_dtype_name(payloads.dispatch)) + "/" +
                            parallel::payload_dtype_name(payloads.combine);
  } catch (const CommandError& e) {
    setup_error = e.what();
  }
  agree_on_setup(*transport, setup_error);
  agree_on_job_fields(*transport, fields);
  // Only a job whose ranks agree touches the output (docs/outputs.md).
  setup_error.reset();
  if (root) {
    try {
      check_input_file(input_path);
      check_distinct_paths(input_path, output_path, metrics_path);
      serving::OutputManifest manifest = output_manifest(fields);
      manifest["input"] = value_or_throw(digest_of_file(input_path));
      writer = value_or_throw(serving::OutputFile::open(output_path, manifest, resume));
      done = writer->finished_ids();
      if (writer->cut_bytes() > 0) {
        MOERT_WARN(output_path << ": cut a torn last line of " << writer->cut_bytes() << " bytes from an earlier run");
      }
      if (!metrics_path.empty()) {
        const int64_t kv_bytes_per_token = value_or_throw(
            runner::kv_cache_bytes_per_token(worker->model().config, worker->engine_config().kv_cache_dtype));
        metrics = value_or_throw(serving::MetricsFile::open(metrics_path, kv_bytes_per_token, transport->world_size()));
      }
    } catch (const CommandError& e) {
      setup_error = e.what();
    }
  }
  agree_on_setup(*transport, setup_error);

  const LoadedModel& model = worker->model();
  const engine::EngineConfig& config = worker->engine_config();
  if (root) {
    MOERT_INFO("model: " << describe_model_config(model.config));
    MOERT_INFO(describe_engine_config(config, worker->threads())
               << ", device " << worker_options.engine.device << describe_weight_modes(worker_options.engine, worker->backend()) << ", "
               << transport->world_size() << " rank(s)");
    MOERT_INFO(worker->spec().describe());
  }
  worker->start();
  engine::Engine engine(worker->forward(), config);
  engine.set_proposer(worker->proposer());
  engine.set_token_text(text->token_text());
  if (text->has_tokenizer()) {
    engine.set_token_vocabulary([&text, vocab = model.config.vocab_size]() -> Result<std::shared_ptr<const grammar::TokenTrie>> {
      MOERT_ASSIGN_OR_RETURN(std::vector<std::string> bytes, text->token_bytes(vocab));
      return std::make_shared<const grammar::TokenTrie>(bytes);
    });
  }

  // Rank 0 reads and checks the requests, then every rank receives its share.
  ParsedInput parsed;
  setup_error.reset();
  if (root) {
    try {
      const RequestContext context{engine,
                                   text.get(),
                                   generation_mode == "auto" ? &*generation : nullptr,
                                   model_dir,
                                   static_cast<int64_t>(std::time(nullptr)),
                                   engine.max_sequence_length()};
      parsed = read_requests(input_path, done, context, *writer);
    } catch (const CommandError& e) {
      setup_error = e.what();
    }
    if (parsed.skipped > 0) MOERT_INFO("skipping " << parsed.skipped << " request(s) already in " << output_path);
  }
  agree_on_setup(*transport, setup_error);
  serving::ProgressReporter progress(progress_interval_s, static_cast<int64_t>(parsed.requests.size()),
                                     /*bar_on_terminal=*/true);
  parallel::CoordinatorEvents events;
  events.on_output = [&](const engine::RequestOutput& output) -> Status {
    const auto openai = parsed.openai_by_id.find(output.id_json);
    const std::string line = serving::format_output_line(
        output, openai == parsed.openai_by_id.end() ? std::string() : openai->second, text->token_text());
    const Status written = writer->write_line(line);
    return written.is_ok() ? written : io_error(written.message() + " (" + output_path + ")");
  };
  if (metrics) {
    events.on_step_metrics = [&](int64_t step, int rank, const parallel::StepMetrics& m) {
      return metrics->write(step, rank, m);
    };
  }
  events.on_progress = std::ref(progress);
  Result<parallel::BatchJobReport> report =
      serve_request_lines(*transport, engine, worker->forward(), worker->experts(), job, parsed.requests, events);
  if (!report.is_ok()) throw CommandError(report.status().message());
  if (root && !save_placement_path.empty()) {
    throw_if_error(write_text_file(save_placement_path, worker->experts().placement().to_json() + "\n"));
  }
  if (root) {
    const engine::EngineStats totals = sum_engine_stats(report->rank_engine_stats);
    std::cerr << engine_summary(totals, config, model.config, report->wall_s) << "\n";
    std::cerr << serving::format_job_summary(*report, job.balance) << "\n";
    if (worker->spec().enabled()) std::cerr << worker->spec().summary(totals) << "\n";
    int64_t finished = 0;
    for (const parallel::StepMetrics& m : report->rank_totals) finished += m.finished_requests;
    std::cerr << "requests: " << finished << " finished, " << parsed.skipped << " skipped (already done), "
              << parsed.failed_lines << " input line(s) failed\n";
  }
  // Every rank returns the same code: the input verdict is rank 0's, so share it.
  int64_t failed = parsed.failed_lines;
  const Status shared = transport->all_reduce(&failed, 1, comm::ReduceOp::kMax);
  if (!shared.is_ok()) transport->abort(1, "final agreement failed: " + shared.message());
  return failed > 0 ? 3 : 0;
}

}  // namespace moert::launch
