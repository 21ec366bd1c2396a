// moert make-model: writes a random-weight checkpoint directory.
#include <boost/program_options.hpp>
#include <iostream>

#include "launch/commands.h"
#include "core/thread_pool.h"
#include "runtime/model/generator.h"

namespace po = boost::program_options;

namespace moert::launch {
namespace {

// Accepts the class name or a registered short alias (ArchSpec::aliases).
const ArchSpec* parse_architecture(const std::string& text) {
  if (const ArchSpec* arch = find_architecture(text)) return arch;
  Result<const ArchSpec*> arch = architecture_from_name(text);
  if (!arch.is_ok()) throw CommandError(arch.status().message() + "; short names: " + architecture_short_names());
  return arch.value();
}

}  // namespace

int run_make_model(const std::vector<std::string>& args) {
  po::options_description options("moert make-model options");
  std::string arch_text, preset, out_dir;
  uint64_t seed = 0;
  double shard_mb = 16.0;
  int threads = 0;
  WeightShaping shaping;
  const std::string arch_help = "architecture: " + architecture_short_names() + " (or the HF class name)";
  options.add_options()
      ("help,h", "show this help")
      ("arch", po::value(&arch_text)->default_value(default_architecture()->aliases.front()),
       arch_help.c_str())
      ("preset", po::value(&preset)->default_value("tiny"), "size preset: tiny, small, large")
      ("out", po::value(&out_dir)->required(), "output directory (created)")
      ("seed", po::value(&seed)->default_value(0), "random seed; same seed and shape give the same bytes")
      ("shard-mb", po::value(&shard_mb)->default_value(16.0), "maximum shard size in MiB")
      ("threads", po::value(&threads)->default_value(0), "worker threads (0: MOERT_NUM_THREADS or all cores)")
      ("vocab-size", po::value<int>(), "override: vocabulary size")
      ("hidden-size", po::value<int>(), "override: hidden size")
      ("num-layers", po::value<int>(), "override: number of layers")
      ("num-experts", po::value<int>(), "override: routed experts per MoE layer")
      ("top-k", po::value<int>(), "override: experts per token")
      ("expert-size", po::value<int>(), "override: routed expert width (moe_intermediate_size)")
      ("num-heads", po::value<int>(), "override: query heads")
      ("num-kv-heads", po::value<int>(), "override: key/value heads")
      ("head-dim", po::value<int>(), "override: head dimension")
      ("mtp-layers", po::value<int>(), "DeepSeek multi-token prediction layers to write (num_nextn_predict_layers; "
       "release tensor names, docs/mtp.md); with --faithful-layers they are built from layer 0")
      ("router-skew", po::value(&shaping.router_skew)->default_value(0.0f),
       "skewed router: expert e's router row scaled by 1 + S (E-1-e)/(E-1), so low ids win more often")
      ("faithful-layers", po::value(&shaping.faithful_layers)->default_value(0),
       "draft-friendly target: layers from this one on write residual updates scaled by --late-layer-scale "
       "(make-model --num-layers <this> with the same seed writes its truncated draft); 0: off")
      ("late-layer-scale", po::value(&shaping.late_layer_scale)->default_value(0.05f),
       "residual scale of the layers past --faithful-layers, in (0, 1]");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  ModelShapeOverrides overrides;
  auto take = [&](const char* key, std::optional<int>& field) {
    if (vm.count(key)) field = vm[key].as<int>();
  };
  take("vocab-size", overrides.vocab_size);
  take("hidden-size", overrides.hidden_size);
  take("num-layers", overrides.num_layers);
  take("num-experts", overrides.num_experts);
  take("top-k", overrides.top_k);
  take("expert-size", overrides.moe_intermediate_size);
  take("num-heads", overrides.num_heads);
  take("num-kv-heads", overrides.num_kv_heads);
  take("head-dim", overrides.head_dim);
  take("mtp-layers", overrides.num_mtp_layers);
  if (!(shard_mb > 0.0)) throw CommandError("--shard-mb must be > 0");

  Result<ModelConfig> config = preset_model_config(parse_architecture(arch_text), preset, overrides);
  if (!config.is_ok()) throw CommandError(config.status().message());
  ThreadPool pool(threads > 0 ? threads : default_num_threads());
  throw_if_error(validate_weight_shaping(shaping));
  const Status written = write_random_checkpoint(config.value(), seed, out_dir,
                                                 static_cast<uint64_t>(shard_mb * 1024.0 * 1024.0), pool, shaping);
  if (!written.is_ok()) throw CommandError(written.message());
  const ParameterCounts counts = count_parameters(config.value());
  std::cout << "wrote " << out_dir << ": " << describe_model_config(config.value()) << "\n"
            << "parameters: " << counts.total << " total, " << counts.active_per_token << " active per token\n";
  return 0;
}

}  // namespace moert::launch
