// moert score: the single-rank reference forward on one prompt, greedy.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "launch/commands.h"
#include "core/thread_pool.h"
#include "launch/engine_options.h"
#include "runtime/io/npy.h"
#include "runtime/model/reference_forward.h"
#include "runtime/model/weights.h"

namespace po = boost::program_options;

namespace moert::launch {
namespace {

std::string join(const std::vector<int32_t>& tokens) {
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + std::to_string(tokens[i]);
  return text;
}

}  // namespace

int run_score(const std::vector<std::string>& args) {
  po::options_description options("moert score options");
  std::string model_dir, tokens_text, out_prefix, mtp_prefix;
  int num_generate = 32;
  int threads = 0;
  std::string device = "cpu";
  std::string fp4_activations = "f32";
  std::string fp8_activations = "f32";
  std::string bf16_activations = "f32";
  std::string weight_memory = "copy";
  options.add_options()
      ("help,h", "show this help")
      ("model", po::value(&model_dir)->required(), "Hugging Face model directory")
      ("tokens", po::value(&tokens_text)->required(), "prompt token ids, comma separated (e.g. 1,2,3)")
      ("num-tokens,n", po::value(&num_generate)->default_value(32), "greedy tokens to generate")
      ("out", po::value(&out_prefix), "write PREFIX.json, PREFIX.prompt_logits.npy, PREFIX.gen_logits.npy")
      ("mtp-out", po::value(&mtp_prefix),
       "write PREFIX.mtp_logits.npy: the MTP layer's teacher-forced logits over prompt + generated tokens, "
       "row i = its prediction for token i+2 from position i (docs/mtp.md)")
      ("threads", po::value(&threads)->default_value(0), "worker threads (0: MOERT_NUM_THREADS or all cores)")
      ("device", po::value(&device)->default_value("cpu"), "where the model computes: cpu or cuda (GPU local_rank % GPUs: GPU 0 outside a launcher)")
      ("fp4-activations", po::value(&fp4_activations)->default_value("f32"),
       "what NVFP4 / MXFP4 weights are computed with: f32 (exact), int8 (CPU only) or fp4 (docs/quant-formats.md)")
      ("fp8-activations", po::value(&fp8_activations)->default_value("f32"),
       "what FP8 weights are computed with: f32 (exact) or bf16 (CPU only; docs/quant-formats.md)")
      ("bf16-activations", po::value(&bf16_activations)->default_value("f32"),
       "what dense BF16 weights are computed with: f32 (exact) or bf16 (CPU only; docs/quant-formats.md)")
      ("weight-memory", po::value(&weight_memory)->default_value("copy"),
       "where the CPU's weights live: copy, mmap or mlock (as for moert run)");
  po::variables_map vm;
  if (!parse_command_line(args, options, &vm)) return 0;
  if (num_generate < 0) throw CommandError("--num-tokens = " + std::to_string(num_generate) + " must be >= 0");
  const std::vector<int> parsed = parse_int_list(tokens_text, "tokens");
  const std::vector<int32_t> prompt(parsed.begin(), parsed.end());

  const ActivationModes activations = resolve_activation_modes(fp4_activations, fp8_activations, bf16_activations, device);
  ThreadPool pool(threads > 0 ? threads : default_num_threads());
  const std::unique_ptr<backend::Backend> backend = open_device_backend(device, pool);
  const WeightMemory memory = resolve_weight_memory(weight_memory, device);
  std::unique_ptr<LoadedModel> model = load_model_on(model_dir, *backend, activations, memory, !mtp_prefix.empty());
  ReferenceForward forward(model->config, model->weights, *backend);
  const GreedyOutput output = value_or_throw(greedy_generate(forward, prompt, num_generate));

  std::cout << "model: " << describe_model_config(model->config) << "\n";
  std::cout << "prompt: " << join(prompt) << "\n";
  std::cout << "generated: " << join(output.gen_tokens) << "\n";
  if (!out_prefix.empty()) {
    const int64_t vocab = model->config.vocab_size;
    throw_if_error(io::write_npy_f32(out_prefix + ".prompt_logits.npy",
                                     {static_cast<int64_t>(prompt.size()), vocab}, output.prompt_logits.data()));
    throw_if_error(io::write_npy_f32(out_prefix + ".gen_logits.npy",
                                     {static_cast<int64_t>(output.gen_tokens.size()), vocab},
                                     output.gen_logits.data()));
    const nlohmann::json summary = {{"model", model_dir}, {"dtype", "f32"}, {"prompt_tokens", prompt},
                                    {"gen_tokens", output.gen_tokens}};
    std::ofstream out(out_prefix + ".json");
    out << summary.dump() << "\n";
    out.close();
    if (!out) throw CommandError("cannot write " + out_prefix + ".json");
  }
  if (!mtp_prefix.empty()) {
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), output.gen_tokens.begin(), output.gen_tokens.end());
    const std::vector<float> mtp_logits = value_or_throw(mtp_teacher_forced_logits(forward, sequence));
    throw_if_error(io::write_npy_f32(mtp_prefix + ".mtp_logits.npy",
                                     {static_cast<int64_t>(sequence.size()) - 1, model->config.vocab_size},
                                     mtp_logits.data()));
  }
  return 0;
}

}  // namespace moert::launch
