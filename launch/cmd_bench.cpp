// moert bench: offline throughput of the engine on synthetic requests.
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "launch/commands.h"
#include "launch/engine_options.h"
#include "launch/spec_options.h"
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
  SpecOptions spec_options;
  bool repetitive = false;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "Hugging Face model directory (e.g. from moert make-model)")
      ("num-requests", po::value(&num_requests)->default_value(32), "synthetic requests")
      ("input-len", po::value(&input_len)->default_value(128), "prompt tokens per request (random ids)")
      ("output-len", po::value(&output_len)->default_value(64), "generated tokens per request (no stop tokens)")
      ("seed", po::value(&seed)->default_value(0), "seed of the random prompts")
      ("repetitive", po::bool_switch(&repetitive), "prompts repeat a random 8-token phrase (where n-gram drafting shines)");
  add_engine_options(options, engine_options);
  add_spec_options(options, spec_options);
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  if (num_requests < 1 || input_len < 1 || output_len < 1) {
    throw CommandError("--num-requests, --input-len and --output-len must be >= 1");
  }
  const std::unique_ptr<LoadedModel> loaded = value_or_throw(load_model(model_dir));
  const LoadedModel& model = *loaded;
  engine::EngineConfig config = resolve_engine_config(engine_options, model.config);
  SpecSetup spec_setup(spec_options, model.config, &config);
  const int threads = resolve_threads(engine_options);
  std::cout << "model: " << describe_model_config(model.config) << "\n" << describe_engine_config(config, threads) << "\n"
            << spec_setup.describe() << "\n";
  ThreadPool pool(threads);
  TransformerForward forward(model.config, model.weights, pool);
  engine::Engine engine(forward, config);
  engine.set_proposer(spec_setup.start(pool, config));
  for (int r = 0; r < num_requests; ++r) {
    engine::Request request;
    request.id = "bench-" + std::to_string(r);
    for (int i = 0; i < input_len; ++i) {
      const int at = repetitive ? i % 8 : i;  // a repetitive prompt repeats its first 8 tokens
      const double u = sampling::counter_uniform(seed, static_cast<uint64_t>(r), static_cast<uint64_t>(at));
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
  std::cout << engine_summary(s, config, model.config, wall) << "\n";
  if (spec_setup.enabled()) std::cout << spec_setup.summary(s) << "\n";
  std::printf("bench: requests=%d input_len=%d output_len=%d max_seqs=%d threads=%d spec=%s spec_k=%s wall_s=%.3f "
              "input_tok_s=%.1f output_tok_s=%.1f total_tok_s=%.1f acceptance=%.3f tokens_per_pass=%.3f\n",
              num_requests, input_len, output_len, config.scheduler.max_seqs, threads, spec_options.method.c_str(),
              spec_options.num_draft.c_str(), wall, s.prompt_tokens / wall, s.output_tokens / wall,
              (s.prompt_tokens + s.output_tokens) / wall, s.acceptance.acceptance_rate(),
              s.acceptance.mean_tokens_per_pass());
  return 0;
}

}  // namespace moert::launch
