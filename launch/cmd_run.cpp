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
#include "launch/commands.h"
#include "launch/engine_options.h"
#include "launch/spec_options.h"
#include "launch/job.h"
#include "launch/text_io.h"
#include "core/digest.h"
#include "core/strict_json.h"
#include "runtime/engine/openai_batch.h"
#include "runtime/model/generation_config.h"
#include "core/log.h"
#include "runtime/engine/request_io.h"
#include "runtime/model/weights.h"
#include "runtime/parallel/batch_job.h"

namespace po = boost::program_options;

namespace moert::launch {
namespace {

// Rank 0's view of the input file.
struct ParsedInput {
  RequestBatch requests;             // to serve (request_io.h keys, text resolved), in input order
  int failed_lines = 0;
  int skipped = 0;                   // already in the output file
};

// What rank 0 needs to turn input lines into requests.
struct RequestContext {
  const engine::Engine& engine;
  const CheckpointText* text;        // may be null
  const GenerationDefaults* defaults;  // null: --generation-config none
  std::string model_dir;
  int64_t created = 0;               // Unix time of the job's start, for OpenAI results
  int64_t max_sequence_length = 0;    // Engine::max_sequence_length
};

// One input line -> a request line the ranks parse, or an error. `openai` tells whether the
// line is (or, for unparseable text, whether the file is) in the OpenAI batch shape;
// *id_json receives the request's id as JSON when known.
Result<std::pair<std::string, engine::Request>> resolve_request(const std::string& line, const RequestContext& context,
                                                                 bool* openai, std::string* id_json) {
  MOERT_ASSIGN_OR_RETURN(nlohmann::json j, parse_strict_json(line, "the line"));
  *openai = engine::is_openai_batch_line(j);
  nlohmann::ordered_json chat_source;
  bool chat_endpoint = false;
  if (*openai) {
    *id_json = engine::openai_custom_id_json(j);
    MOERT_ASSIGN_OR_RETURN(nlohmann::json request, engine::openai_to_request(j, context.created));
    chat_endpoint = request.contains("messages");
    if (chat_endpoint) chat_source = nlohmann::ordered_json::parse(line).at("body");
    j = std::move(request);
  } else {
    if (j.is_object() && j.contains("id")) *id_json = j["id"].dump();
    if (j.is_object() && j.contains("messages")) chat_source = nlohmann::ordered_json::parse(line);
  }
  if (!j.is_object()) return invalid_argument("a request must be a JSON object");
  MOERT_RETURN_IF_ERROR(resolve_text_keys(context.text, context.model_dir, j, chat_source));
  if (context.defaults != nullptr) apply_generation_defaults(*context.defaults, j);
  // A chat without max_tokens may use the rest of the context (as the OpenAI API does), as far
  // as the KV pool can hold it.
  if (chat_endpoint && !j.contains("max_tokens") && j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
    j["max_tokens"] = std::max<int64_t>(1, context.max_sequence_length - static_cast<int64_t>(j["prompt_token_ids"].size()));
  }
  MOERT_ASSIGN_OR_RETURN(engine::Request request, engine::parse_request(j));
  if (*openai && (context.text == nullptr || context.text->token_text() == nullptr)) {
    return invalid_argument("OpenAI batch results hold text, which needs the checkpoint's tokenizer (tokenizer.json in " +
                            context.model_dir + ")");
  }
  return std::make_pair(j.dump(), std::move(request));
}

ParsedInput read_requests(const std::string& input_path, const std::unordered_set<std::string>& done,
                          const RequestContext& context, engine::OutputFile& writer) {
  std::ifstream input(input_path);
  if (!input) throw CommandError("cannot open input " + input_path);
  ParsedInput parsed;
  std::unordered_set<std::string> seen;
  std::optional<bool> openai_file;  // the shape of the first line that parsed, for lines that do not
  std::string line;
  for (int line_number = 1; std::getline(input, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    bool openai = false;
    std::string id_json = "null";
    Result<std::pair<std::string, engine::Request>> resolved = resolve_request(line, context, &openai, &id_json);
    if (resolved.is_ok() || id_json != "null") openai_file = openai_file.value_or(openai);
    if (!resolved.is_ok() && id_json == "null") openai = openai_file.value_or(openai);
    Status status = resolved.is_ok() ? Status::ok() : resolved.status();
    if (status.is_ok() && !seen.insert(resolved->second.id_json).second) {
      status = invalid_argument(std::string(openai ? "custom_id" : "request id") + " " + id_json + " appears twice");
      id_json = "null";  // the error line must not mark the first one as done
    }
    if (status.is_ok() && done.count(resolved->second.id_json)) {
      ++parsed.skipped;
      continue;
    }
    if (status.is_ok()) status = context.engine.check_request(resolved->second);
    if (!status.is_ok()) {
      ++parsed.failed_lines;
      // Its error line is in the output already (an earlier run of this job).
      if (done.count(id_json) || (id_json == "null" && done.count(engine::error_line_key(std::to_string(line_number))))) {
        continue;
      }
      MOERT_ERROR(input_path << " line " << line_number << ": " << status.message());
      const Status written = writer.write_line(engine::format_error_line(id_json, status.message(), line_number, openai));
      if (!written.is_ok()) throw CommandError(written.message());
      continue;
    }
    parsed.requests.add(std::move(resolved->first), resolved->second, context.engine.config().block_size);
  }
  return parsed;
}

}  // namespace

int run_serve_batch(const std::vector<std::string>& args) {
  po::options_description options("moert run options");
  std::string model_dir, input_path, output_path, placement_path, save_placement_path, balance = "none", routing;
  std::string generation_mode = "auto";
  bool resume = false;
  EngineOptions engine_options;
  SpecOptions spec_options;
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
      ("progress-interval", po::value(&job.progress_interval_s)->default_value(2.0), "seconds between progress lines on stderr")
      ("expert-placement", po::value(&placement_path),
       "expert placement JSON (experts/placement/placement.h), e.g. saved by an earlier --balance=replicate job; "
       "default: contiguous slices")
      ("placement", po::value(&placement_path), "the same as --expert-placement")
      ("save-expert-placement", po::value(&save_placement_path),
       "write the expert placement in use at the end of the job here (rank 0), for --expert-placement next time")
      ("balance", po::value(&balance)->default_value("none"), "expert load balancing: none, bias (auxiliary-loss-free router bias), replicate (EPLB replicas)")
      ("balance-gamma", po::value(&job.balance_gamma)->default_value(0.001f), "bias step per iteration for --balance=bias")
      ("balance-interval", po::value(&job.balance_interval)->default_value(16), "iterations between replica plans for --balance=replicate")
      ("balance-redundant", po::value(&job.redundant_slots_per_rank)->default_value(1), "extra expert slots per rank for --balance=replicate")
      ("metrics", po::value(&job.metrics_path), "per-step, per-rank metrics JSONL written by rank 0")
      ("request-routing", po::value(&routing)->default_value("prefix"),
       "how rank 0 assigns requests: prefix (requests sharing a first KV block go to the same rank, so its prefix "
       "cache serves them) or free-blocks (to the rank with the most free KV blocks)");
  add_engine_options(options, engine_options);
  add_spec_options(options, spec_options);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  job.balance = value_or_throw(parallel::parse_balance_mode(balance));
  if (routing != "prefix" && routing != "free-blocks") {
    throw CommandError("--request-routing '" + routing + "' is not prefix or free-blocks");
  }
  job.prefix_routing = routing == "prefix";
  if (generation_mode != "auto" && generation_mode != "none") {
    throw CommandError("--generation-config '" + generation_mode + "' is not auto or none");
  }
  throw_if_error(parallel::validate_batch_job_config(job));
  if (job.balance == parallel::BalanceMode::kReplicate && !placement_path.empty()) {
    throw CommandError("--balance=replicate computes its own placement; drop --expert-placement " + placement_path +
                       " (or keep it and drop --balance)");
  }

  JobTransport job_transport = make_job_transport();
  comm::Transport* transport = job_transport.transport.get();
  const int rank = transport->rank();
  const bool root = rank == 0;

  // Setup on every rank; errors are agreed on so that no rank waits for a dead peer.
  std::unique_ptr<LoadedModel> loaded;
  std::optional<engine::EngineConfig> config;
  std::unique_ptr<backend::Backend> device_backend;  // null: the CPU backend over `pool`
  std::optional<experts::ExpertPlacement> placement;
  std::unique_ptr<engine::OutputFile> writer;
  std::unique_ptr<CheckpointText> text;  // tokenizer and chat template, on every rank (launch/text_io.h)
  std::optional<GenerationDefaults> generation;
  std::unique_ptr<SpecSetup> spec_setup;
  std::unordered_set<std::string> done;
  JobFields fields;
  int threads = 1;
  std::optional<std::string> setup_error;
  try {
    const ActivationModes activations = resolve_activation_modes(
        engine_options.fp4_activations, engine_options.fp8_activations, engine_options.bf16_activations,
        engine_options.device);
    const WeightMemory weight_memory = resolve_weight_memory(engine_options.weight_memory, engine_options.device);
    device_backend = open_device_backend(engine_options.device);
    // The CPU kernels' FP4 code order only where the CPU backend computes (null backend), and
    // there only for the routed experts this rank computes (lay_out_for_cpu_rank, below).
    loaded = load_model_for(model_dir, device_backend.get(), /*cpu_layout_later=*/true, activations);
    config = resolve_engine_config(engine_options, loaded->config,
                                   device_backend ? device_backend->preferred_kv_cache_dtype() : DType::kF32);
    config->forward_when_idle = true;
    job.kv_cache_bytes_per_token = value_or_throw(engine::kv_cache_bytes_per_token(loaded->config, config->kv_cache_dtype));
    spec_setup = std::make_unique<SpecSetup>(spec_options, loaded->config, &*config, device_backend.get(), weight_memory);
    threads = resolve_threads(engine_options);
    const int num_experts = loaded->config.num_experts();
    if (num_experts < 1) throw CommandError(model_dir + " has no routed experts");
    placement = placement_path.empty()
                    ? value_or_throw(experts::contiguous_placement(num_experts, transport->world_size()))
                    : value_or_throw(experts::load_placement_json(placement_path, num_experts));
    if (placement->num_ranks() != transport->world_size()) {
      throw CommandError(placement_path + " places experts on " + std::to_string(placement->num_ranks()) +
                         " ranks, the job has " + std::to_string(transport->world_size()));
    }
    if (placement->num_layers() != 1 && placement->num_layers() != loaded->config.num_layers) {
      throw CommandError(placement_path + " has " + std::to_string(placement->num_layers()) +
                         " layers, the model " + std::to_string(loaded->config.num_layers) + " (or give 1 for all)");
    }
    lay_out_for_cpu_rank(*loaded, device_backend.get(), *placement, transport->rank(), weight_memory);
    text = CheckpointText::load(model_dir);
    generation = value_or_throw(load_generation_defaults(model_dir, loaded->config));
    config->eos_token_ids = generation->eos_token_ids;
    fields = job_fields(*loaded, *config, spec_options, *spec_setup, job, *placement, routing);
    fields["text"] = text_files_digest(model_dir, generation_mode);
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
      check_distinct_paths(input_path, output_path, job.metrics_path);
      engine::OutputManifest manifest = output_manifest(fields);
      manifest["input"] = value_or_throw(digest_of_file(input_path));
      writer = value_or_throw(engine::OutputFile::open(output_path, manifest, resume));
      done = writer->finished_ids();
      if (writer->cut_bytes() > 0) {
        MOERT_WARN(output_path << ": cut a torn last line of " << writer->cut_bytes() << " bytes from an earlier run");
      }
    } catch (const CommandError& e) {
      setup_error = e.what();
    }
  }
  agree_on_setup(*transport, setup_error);

  const LoadedModel& model = *loaded;
  if (root) {
    MOERT_INFO("model: " << describe_model_config(model.config));
    MOERT_INFO(describe_engine_config(*config, threads) << ", device " << engine_options.device
                                                        << describe_weight_modes(engine_options) << ", "
                                                        << transport->world_size() << " rank(s)");
    MOERT_INFO(spec_setup->describe());
  }
  ThreadPool pool(threads);
  TransformerForward forward(model.config, model.weights, pool, device_backend.get());
  const std::unique_ptr<comm::Transport> row_transport =
      open_row_transport(engine_options.ep_transport, device_backend.get(), *transport);
  parallel::ExpertParallelExperts experts(model.config, std::move(*placement), *transport, row_transport.get());
  forward.set_routed_experts(&experts);
  engine::Engine engine(forward, *config);
  engine.set_proposer(spec_setup->start(pool, *config, device_backend.get()));
  engine.set_token_text(text->token_text());
  job.token_text = text->token_text();

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
  Result<parallel::BatchJobReport> report = serve_request_lines(
      *transport, engine, forward, experts, job, parsed.requests, [&](const std::string& line) -> Status {
        const Status written = writer->write_line(line);
        return written.is_ok() ? written : io_error(written.message() + " (" + output_path + ")");
      });
  if (!report.is_ok()) throw CommandError(report.status().message());
  if (root && !save_placement_path.empty()) {
    throw_if_error(write_text_file(save_placement_path, experts.placement().to_json() + "\n"));
  }
  if (root) {
    const engine::EngineStats totals = sum_engine_stats(report->rank_engine_stats);
    std::cerr << engine_summary(totals, *config, model.config, report->wall_s) << "\n";
    std::cerr << parallel::format_job_summary(*report, job) << "\n";
    if (spec_setup->enabled()) std::cerr << spec_setup->summary(totals) << "\n";
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
