// moert run: serves a JSONL batch of requests with the continuous-batching engine.
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <unordered_set>

#include "launch/commands.h"
#include "launch/engine_options.h"
#include "runtime/core/log.h"
#include "runtime/engine/request_io.h"
#include "runtime/model/weights.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_serve_batch(const std::vector<std::string>& args) {
  po::options_description options("moert run options");
  std::string model_dir, input_path, output_path;
  double progress_s = 2.0;
  EngineOptions engine_options;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "Hugging Face model directory")
      ("input", po::value(&input_path)->required(), "requests, one JSON object a line")
      ("output", po::value(&output_path)->required(), "results, one JSON line per finished request (appended; ids already there are skipped)")
      ("progress-interval", po::value(&progress_s)->default_value(2.0), "seconds between progress lines on stderr");
  add_engine_options(options, engine_options);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;

  std::ifstream input(input_path);
  if (!input) throw CommandError("cannot open input " + input_path);
  int torn_lines = 0;
  Result<std::unordered_set<std::string>> done = engine::read_finished_ids(output_path, &torn_lines);
  if (!done.is_ok()) throw CommandError(done.status().message());
  if (torn_lines > 0) MOERT_WARN(output_path << ": ignored " << torn_lines << " incomplete line(s) from an earlier run");

  const std::unique_ptr<LoadedModel> loaded = value_or_throw(load_model(model_dir));
  const LoadedModel& model = *loaded;
  const engine::EngineConfig config = resolve_engine_config(engine_options, model.config);
  const int threads = resolve_threads(engine_options);
  MOERT_INFO("model: " << describe_model_config(model.config));
  MOERT_INFO(describe_engine_config(config, threads));
  ThreadPool pool(threads);
  TransformerForward forward(model.config, model.weights, pool);
  engine::Engine engine(forward, config);

  // Requests: every parsable line not finished before; bad lines are reported and skipped.
  int failed_lines = 0, skipped = 0, queued = 0;
  std::unordered_set<std::string> seen;
  std::string line;
  for (int line_number = 1; std::getline(input, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<engine::Request> request = engine::parse_request_line(line);
    Status status = request.is_ok() ? Status::ok() : request.status();
    if (status.is_ok() && !seen.insert(request->id).second) {
      status = invalid_argument("request id '" + request->id + "' appears twice");
    }
    if (status.is_ok() && done->count(request->id)) {
      ++skipped;
      continue;
    }
    if (status.is_ok()) status = engine.add_request(std::move(request).value());
    if (!status.is_ok()) {
      ++failed_lines;
      MOERT_ERROR(input_path << " line " << line_number << ": " << status.message());
      continue;
    }
    ++queued;
  }
  if (skipped > 0) MOERT_INFO("skipping " << skipped << " request(s) already in " << output_path);

  Result<std::unique_ptr<engine::OutputWriter>> writer = engine::OutputWriter::open_for_append(output_path);
  if (!writer.is_ok()) throw CommandError(writer.status().message());
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  int finished = 0;
  while (engine.has_unfinished()) {
    Result<std::vector<engine::RequestOutput>> outputs = engine.step();
    if (!outputs.is_ok()) throw CommandError(outputs.status().message());
    for (const engine::RequestOutput& output : *outputs) {
      const Status written = (*writer)->write_line(engine::format_output_line(output));
      if (!written.is_ok()) throw CommandError(written.message() + " (" + output_path + ")");
      ++finished;
    }
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_progress).count() >= progress_s) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      MOERT_INFO("progress: " << finished << "/" << queued << " requests, " << engine.num_running() << " running, "
                              << static_cast<int64_t>(engine.stats().output_tokens / elapsed) << " output tok/s");
      last_progress = now;
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << engine_summary(engine.stats(), config, wall) << "\n";
  std::cerr << "requests: " << finished << " finished, " << skipped << " skipped (already done), " << failed_lines
            << " input line(s) failed\n";
  return failed_lines > 0 ? 3 : 0;
}

}  // namespace moert::launch
