// moert eval: KL divergence and top-1 agreement of a model against a reference model.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "launch/commands.h"
#include "runtime/model/eval.h"
#include "runtime/model/weights.h"
#include "runtime/sampling/sampler.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_eval(const std::vector<std::string>& args) {
  po::options_description options("moert eval options");
  std::string model_dir, reference_dir;
  int num_sequences = 8, length = 64, threads = 0;
  uint64_t seed = 0;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "the model to evaluate (e.g. a quantized checkpoint)")
      ("against", po::value(&reference_dir)->required(), "the reference model (e.g. its BF16 source)")
      ("num-sequences", po::value(&num_sequences)->default_value(8), "token sequences (random ids, seeded)")
      ("length", po::value(&length)->default_value(64), "tokens per sequence; every position is compared")
      ("seed", po::value(&seed)->default_value(0), "seed of the sequences")
      ("threads", po::value(&threads)->default_value(0), "worker threads (0: all cores)");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  if (num_sequences < 1 || length < 1) throw CommandError("--num-sequences and --length must be >= 1");
  const std::unique_ptr<LoadedModel> model = value_or_throw(load_model(model_dir));
  const std::unique_ptr<LoadedModel> reference = value_or_throw(load_model(reference_dir));
  ThreadPool pool(threads > 0 ? threads : default_num_threads());
  ReferenceForward model_forward(model->config, model->weights, pool);
  ReferenceForward reference_forward(reference->config, reference->weights, pool);
  std::vector<std::vector<int32_t>> sequences(static_cast<size_t>(num_sequences));
  for (int s = 0; s < num_sequences; ++s) {
    for (int i = 0; i < length; ++i) {
      const double u = sampling::counter_uniform(seed, static_cast<uint64_t>(s), static_cast<uint64_t>(i));
      sequences[static_cast<size_t>(s)].push_back(static_cast<int32_t>(u * reference->config.vocab_size));
    }
  }
  const DistributionComparison result = value_or_throw(compare_models(reference_forward, model_forward, sequences));
  std::printf("eval: %s against %s: %lld positions, mean KL %.6f nats, top-1 agreement %.4f\n", model_dir.c_str(),
              reference_dir.c_str(), static_cast<long long>(result.positions), result.mean_kl(),
              result.top1_agreement());
  return 0;
}

}  // namespace moert::launch
