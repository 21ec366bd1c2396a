// moert eval: KL divergence and top-1 agreement of a model against a reference model, or
// (--kv-cache-dtype) of the model through a BF16 / FP8 paged KV cache against an F32 one.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "attention/kv_cache_spec.h"
#include "launch/commands.h"
#include "launch/engine_options.h"
#include "runtime/engine/kv_cache_eval.h"
#include "runtime/model/eval.h"
#include "runtime/model/weights.h"
#include "runtime/sampling/sampler.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_eval(const std::vector<std::string>& args) {
  po::options_description options("moert eval options");
  std::string model_dir, reference_dir, kv_cache_dtype;
  int num_sequences = 8, length = 64, threads = 0;
  uint64_t seed = 0;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "the model to evaluate (e.g. a quantized checkpoint)")
      ("against", po::value(&reference_dir), "the reference model (e.g. its BF16 source)")
      ("kv-cache-dtype", po::value(&kv_cache_dtype),
       "instead of --against: the model through a paged KV cache of this dtype (bf16, fp8_e4m3) against F32")
      ("num-sequences", po::value(&num_sequences)->default_value(8), "token sequences (random ids, seeded)")
      ("length", po::value(&length)->default_value(64), "tokens per sequence; every position is compared")
      ("seed", po::value(&seed)->default_value(0), "seed of the sequences")
      ("threads", po::value(&threads)->default_value(0), "worker threads (0: all cores)");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  if (num_sequences < 1 || length < 1) throw CommandError("--num-sequences and --length must be >= 1");
  if (reference_dir.empty() == kv_cache_dtype.empty()) {
    throw CommandError("give exactly one of --against (another model) and --kv-cache-dtype (this model's KV cache)");
  }
  ThreadPool pool(threads > 0 ? threads : default_num_threads());
  const std::unique_ptr<backend::Backend> cpu = open_device_backend("cpu", pool);
  const std::unique_ptr<LoadedModel> model = load_model_on(model_dir, *cpu, {}, WeightMemory::kCopy);
  const std::unique_ptr<LoadedModel> reference =
      reference_dir.empty() ? nullptr : load_model_on(reference_dir, *cpu, {}, WeightMemory::kCopy);
  const ModelConfig& reference_config = reference != nullptr ? reference->config : model->config;
  std::vector<std::vector<int32_t>> sequences(static_cast<size_t>(num_sequences));
  for (int s = 0; s < num_sequences; ++s) {
    for (int i = 0; i < length; ++i) {
      const double u = sampling::counter_uniform(seed, static_cast<uint64_t>(s), static_cast<uint64_t>(i));
      sequences[static_cast<size_t>(s)].push_back(static_cast<int32_t>(u * reference_config.vocab_size));
    }
  }
  if (reference == nullptr) {
    const DType dtype = value_or_throw(attention::parse_kv_cache_dtype(kv_cache_dtype, DType::kF32));
    if (length > model->config.max_position_embeddings) {
      throw CommandError("--length " + std::to_string(length) + " exceeds max_position_embeddings = " +
                         std::to_string(model->config.max_position_embeddings));
    }
    const TransformerForward forward(model->config, model->weights, *cpu);
    const DistributionComparison result =
        value_or_throw(engine::compare_kv_cache_dtype(forward, dtype, sequences));
    std::printf("eval: %s with a %s KV cache against f32: %lld positions, mean KL %.3g nats, top-1 agreement %.4f\n",
                model_dir.c_str(), attention::kv_cache_dtype_name(dtype), static_cast<long long>(result.positions),
                result.mean_kl(), result.top1_agreement());
    return 0;
  }
  ReferenceForward model_forward(model->config, model->weights, *cpu);
  ReferenceForward reference_forward(reference->config, reference->weights, *cpu);
  const DistributionComparison result = value_or_throw(compare_models(reference_forward, model_forward, sequences));
  std::printf("eval: %s against %s: %lld positions, mean KL %.6f nats, top-1 agreement %.4f\n", model_dir.c_str(),
              reference_dir.c_str(), static_cast<long long>(result.positions), result.mean_kl(),
              result.top1_agreement());
  return 0;
}

}  // namespace moert::launch
