// moert quantize: rewrites a checkpoint with NVFP4, MXFP4 or FP8 linear weights.
#include <boost/program_options.hpp>
#include <iostream>

#include "launch/commands.h"
#include "runtime/model/quantizer.h"

namespace po = boost::program_options;

namespace moert::launch {

int run_quantize(const std::vector<std::string>& args) {
  po::options_description options("moert quantize options");
  std::string model_dir, out_dir, format_name, exclude;
  double shard_mb = 64.0;
  bool quantize_lm_head = false;
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "input Hugging Face checkpoint (F32/BF16/F16)")
      ("format", po::value(&format_name)->required(), "nvfp4 (ModelOpt), mxfp4 (gpt-oss), fp8 (DeepSeek 128x128), fp8-tensor")
      ("out", po::value(&out_dir)->required(), "output directory")
      ("exclude", po::value(&exclude), "comma-separated globs of modules kept unquantized, e.g. '*self_attn*,model.layers.0.*'")
      ("quantize-lm-head", po::bool_switch(&quantize_lm_head), "also quantize lm_head (kept by default)")
      ("shard-mb", po::value(&shard_mb)->default_value(64.0), "maximum shard size in MiB");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  QuantizeOptions quantize;
  quantize.format = value_or_throw(parse_weight_format(format_name));
  quantize.quantize_lm_head = quantize_lm_head;
  quantize.max_shard_bytes = static_cast<uint64_t>(shard_mb * 1024 * 1024);
  for (size_t start = 0; !exclude.empty() && start <= exclude.size();) {
    size_t comma = exclude.find(',', start);
    if (comma == std::string::npos) comma = exclude.size();
    if (comma > start) quantize.exclude_patterns.push_back(exclude.substr(start, comma - start));
    start = comma + 1;
  }
  const QuantizeReport report = value_or_throw(quantize_checkpoint(model_dir, out_dir, quantize));
  std::cout << "wrote " << out_dir << ": " << report.quantized_tensors << " matrices in " << format_name << " ("
            << report.quantized_weights << " weights, " << report.quantized_bytes << " bytes = "
            << report.bits_per_quantized_weight() << " bits per weight), " << report.kept_tensors
            << " tensors kept, " << report.excluded.size() << " matrices excluded\n";
  return 0;
}

}  // namespace moert::launch
