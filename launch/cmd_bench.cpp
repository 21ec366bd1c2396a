// moert bench: offline throughput of the engine on synthetic requests.
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "launch/commands.h"
#include "launch/engine_options.h"
#include "runtime/model/weights.h"
#include "runtime/sampling/sampler.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_bench(const std::vector<std::string>& args) {
  po::options_description options("moert bench options");
  std::string model_dir;
  int num_requests = 32, input_len = 128, output_len = 64;
  uint64_t seed = 0;
  EngineOptions engine_options;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "Hugging Face model directory (e.g. from moert make-model)")
      ("num-requests", po::value(&num_requests)->default_value(32), "synthetic requests")
      ("input-len", po::value(&input_len)->default_value(128), "prompt tokens per request (random ids)")
      ("output-len", po::value(&output_len)->default_value(64), "generated tokens per request (no stop tokens)")
      ("seed", po::value(&seed)->default_value(0), "seed of the random prompts");
  add_engine_options(options, engine_options);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  if (num_requests < 1 || input_len < 1 || output_len < 1) {
    throw CommandError("--num-requests, --input-len and --output-len must be >= 1");
  }
  const std::unique_ptr<LoadedModel> loaded = value_or_throw(load_model(model_dir));
  const LoadedModel& model = *loaded;
  const engine::EngineConfig config = resolve_engine_config(engine_options, model.config);
  const int threads = resolve_threads(engine_options);
  std::cout << "model: " << describe_model_config(model.config) << "\n" << describe_engine_config(config, threads) << "\n";
  ThreadPool pool(threads);
  TransformerForward forward(model.config, model.weights, pool);
  engine::Engine engine(forward, config);
  for (int r = 0; r < num_requests; ++r) {
    engine::Request request;
    request.id = "bench-" + std::to_string(r);
    for (int i = 0; i < input_len; ++i) {
      const double u = sampling::counter_uniform(seed, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
      request.prompt.push_back(static_cast<int32_t>(u * model.config.vocab_size));
    }
    request.params.max_tokens = output_len;
    const Status added = engine.add_request(std::move(request));
    if (!added.is_ok()) throw CommandError(added.message());
  }
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished()) {
    Result<std::vector<engine::RequestOutput>> outputs = engine.step();
    if (!outputs.is_ok()) throw CommandError(outputs.status().message());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const engine::EngineStats& s = engine.stats();
  std::cout << engine_summary(s, config, wall) << "\n";
  std::printf("bench: requests=%d input_len=%d output_len=%d max_seqs=%d threads=%d wall_s=%.3f "
              "input_tok_s=%.1f output_tok_s=%.1f total_tok_s=%.1f\n",
              num_requests, input_len, output_len, config.scheduler.max_seqs, threads, wall, s.prompt_tokens / wall,
              s.output_tokens / wall, (s.prompt_tokens + s.output_tokens) / wall);
  return 0;
}

}  // namespace moert::launch
