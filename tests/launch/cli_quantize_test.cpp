// `moert quantize` through the binary (cli_test): quantized checkpoints score and evaluate,
// and the gpt-oss MXFP4 and DeepSeek FP8 outputs are the release layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/cpu/bf16_linear.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/npy.h"
#include "tests/launch/cli_test_support.h"

namespace moert::cli_test {
namespace {

TEST(CliQuantize, QuantizeScoreAndEval) {
  testing::ScratchDir scratch("cli-quantize");
  const std::string model = make_small_model(scratch, "bf16", "qwen3_moe");
  const std::string nvfp4 = scratch / "nvfp4";
  const testing::CommandResult quantized =
      run_command(moert() + " quantize --model " + model + " --format nvfp4 --out " + nvfp4);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  EXPECT_NE(quantized.out.find("4.5"), std::string::npos) << quantized.out;  // bits per weight
  EXPECT_TRUE(fs::exists(nvfp4 + "/hf_quant_config.json"));
  const testing::CommandResult scored = run_command(moert() + " score --model " + nvfp4 + " --tokens 3,1,4,1,5 -n 4");
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  EXPECT_NE(scored.out.find("generated: "), std::string::npos);
  // --fp4-activations int8 / fp4: the NVFP4 model's logits move by the activation rounding only
  // (int8: steps of amax / 127 per 16 elements; fp4: E2M1's 3 bits per element, much coarser).
  const std::string f32_prefix = scratch / "f32";
  ASSERT_EQ(run_command(moert() + " score --model " + nvfp4 + " --tokens 3,1,4,1,5 -n 4 --out " + f32_prefix).exit_code, 0);
  const io::NpyArray f32_logits = io::read_npy(f32_prefix + ".prompt_logits.npy").value();
  for (const auto& [mode, bound] : {std::pair<std::string, double>{"int8", 0.05}, {"fp4", 0.3}}) {
    const std::string prefix = scratch / mode;
    const testing::CommandResult scored = run_command(moert() + " score --model " + nvfp4 +
                                                      " --tokens 3,1,4,1,5 -n 4 --fp4-activations " + mode + " --out " + prefix);
    ASSERT_EQ(scored.exit_code, 0) << scored.err;
    const io::NpyArray logits = io::read_npy(prefix + ".prompt_logits.npy").value();
    ASSERT_EQ(f32_logits.values.size(), logits.values.size());
    double max_diff = 0.0, max_logit = 0.0;
    for (size_t i = 0; i < f32_logits.values.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(f32_logits.values[i] - logits.values[i]));
      max_logit = std::max(max_logit, std::fabs(f32_logits.values[i]));
    }
    EXPECT_GT(max_diff, 0.0) << mode << " activations must change the logits";
    EXPECT_LT(max_diff, bound * max_logit) << mode << " activations moved the logits by " << max_diff << " of " << max_logit;
    std::cout << mode << " activations: logits moved by " << max_diff / max_logit << " of the largest\n";
  }
  const testing::CommandResult bench_int8 = run_command(moert() + " bench --model " + nvfp4 +
                                                        " --num-requests 2 --input-len 8 --output-len 2 --fp4-activations int8");
  ASSERT_EQ(bench_int8.exit_code, 0) << bench_int8.err;
  EXPECT_NE(bench_int8.out.find(", device cpu, fp4 activations int8, 1 rank(s)"), std::string::npos) << bench_int8.out;
  // --fp8-activations bf16 (an FP8 model) and --bf16-activations bf16 (the BF16 model): the
  // logits move by x's BF16 rounding only (8 bits); the start-up line names the mode's path.
  const std::string fp8 = scratch / "fp8";
  ASSERT_EQ(run_command(moert() + " quantize --model " + model + " --format fp8 --out " + fp8).exit_code, 0);
  for (const auto& [dir, option] : {std::pair<std::string, std::string>{fp8, "--fp8-activations"},
                                    {model, "--bf16-activations"}}) {
    const std::string name = option.substr(2, 4);  // fp8- / bf16
    double moved[2] = {};
    for (const std::string mode : {"f32", "bf16"}) {
      const std::string prefix = scratch / (name + "-" + mode);
      ASSERT_EQ(run_command(moert() + " score --model " + dir + " --tokens 3,1,4,1,5 -n 4 " + option + " " + mode +
                            " --out " + prefix).exit_code, 0);
      const io::NpyArray logits = io::read_npy(prefix + ".prompt_logits.npy").value();
      const io::NpyArray reference = io::read_npy(scratch / (name + "-f32.prompt_logits.npy")).value();
      ASSERT_EQ(reference.values.size(), logits.values.size());
      double max_diff = 0.0, max_logit = 0.0;
      for (size_t i = 0; i < logits.values.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(reference.values[i] - logits.values[i]));
        max_logit = std::max(max_logit, std::fabs(reference.values[i]));
      }
      moved[mode == "bf16"] = max_diff / max_logit;
    }
    EXPECT_GT(moved[1], 0.0) << option << " bf16 must change the logits";
    EXPECT_LT(moved[1], 0.02) << option << " bf16 moved the logits too far";
    std::cout << option << " bf16: logits moved by " << moved[1] << " of the largest\n";
    const testing::CommandResult bench_bf16 =
        run_command(moert() + " bench --model " + dir + " --num-requests 2 --input-len 8 --output-len 2 " + option + " bf16");
    ASSERT_EQ(bench_bf16.exit_code, 0) << bench_bf16.err;
    const std::string mode_name = option.substr(2, option.find('-', 2) - 2);  // fp8 / bf16
    EXPECT_NE(bench_bf16.out.find(", device cpu, " + mode_name + " activations bf16 (" +
                                  std::string(quant::bf16_linear_isa_name()) + "), 1 rank(s)"),
              std::string::npos)
        << bench_bf16.out;
  }
  expect_one_line_error(run_command(moert() + " score --model " + nvfp4 + " --tokens 1,2 --fp4-activations int4"),
                        "--fp4-activations 'int4' is not one of f32, int8, fp4");
  expect_one_line_error(run_command(moert() + " score --model " + nvfp4 + " --tokens 1,2 --fp4-activations bf16"),
                        "--fp4-activations 'bf16' is not one of f32, int8, fp4");
  expect_one_line_error(run_command(moert() + " bench --model " + nvfp4 + " --num-requests 1 --fp8-activations int8"),
                        "--fp8-activations 'int8' is not one of f32, bf16");
  expect_one_line_error(
      run_command(moert() + " run --model " + nvfp4 + " --fp8-activations bf16 --device cuda --input x --output -"),
      "--fp8-activations bf16 runs on the CPU only");
  expect_one_line_error(run_command(moert() + " score --model " + model + " --tokens 1,2 --bf16-activations int8"),
                        "--bf16-activations 'int8' is not one of f32, bf16");
  expect_one_line_error(
      run_command(moert() + " bench --model " + model + " --num-requests 1 --bf16-activations bf16 --device cuda"),
      "--bf16-activations bf16 runs on the CPU only");
  expect_one_line_error(
      run_command(moert() + " score --model " + nvfp4 + " --tokens 1,2 --fp4-activations int8 --device cuda"),
      "--fp4-activations int8 runs on the CPU only");
  expect_one_line_error(run_command(moert() + " bench --model " + nvfp4 + " --num-requests 1 --cuda-graph-max-batch 17"),
                        "--cuda-graph-max-batch = 17 must be in [0, 16]");
  expect_one_line_error(run_command(moert() + " run --model " + nvfp4 + " --cuda-graph-max-batch -1 --input x --output -"),
                        "--cuda-graph-max-batch = -1 must be in [0, 16]");
  expect_one_line_error(run_command(moert() + " bench --model " + nvfp4 + " --num-requests 1 --spec draft --draft-model " +
                                    nvfp4 + " --draft-fp4-activations f16"),
                        "--draft-fp4-activations 'f16' is not one of f32, int8, fp4");
  const testing::CommandResult self =
      run_command(moert() + " eval --model " + model + " --against " + model + " --num-sequences 2 --length 8");
  ASSERT_EQ(self.exit_code, 0) << self.err;
  EXPECT_NE(self.out.find("16 positions, mean KL 0.000000 nats, top-1 agreement 1.0000"), std::string::npos) << self.out;
  const testing::CommandResult drift =
      run_command(moert() + " eval --model " + nvfp4 + " --against " + model + " --num-sequences 2 --length 8");
  ASSERT_EQ(drift.exit_code, 0) << drift.err;
  EXPECT_EQ(drift.out.find("mean KL 0.000000"), std::string::npos) << drift.out;
  expect_one_line_error(run_command(moert() + " quantize --model " + model + " --format int2 --out " + (scratch / "x")),
                        "unknown format 'int2'");
  expect_one_line_error(run_command(moert() + " quantize --model " + nvfp4 + " --format fp8 --out " + (scratch / "y")),
                        "already quantized");
  // The tensor names kept in full precision are the architecture's (ArchSpec::names).
  nlohmann::json config = nlohmann::json::parse(testing::read_file(model + "/config.json"));
  config["architectures"] = {"FooForCausalLM"};
  testing::write_file(model + "/config.json", config.dump());
  expect_one_line_error(run_command(moert() + " quantize --model " + model + " --format fp8 --out " + (scratch / "z")),
                        "unknown architecture 'FooForCausalLM'");
}

// Bytes of checkpoint `mine` that differ from `release` (every tensor of one must be in the
// other with the same dtype and shape, else -1). E4M3 zeros may differ in sign (a tiny
// negative weight may round to -0 in one and +0 in the other): not counted.
int64_t bytes_differing_from_release(const std::string& mine_dir, const std::string& release_dir) {
  const io::Checkpoint mine = io::Checkpoint::open(mine_dir).value();
  const io::Checkpoint release = io::Checkpoint::open(release_dir).value();
  std::vector<std::string> names = mine.tensor_names(), release_names = release.tensor_names();
  std::sort(names.begin(), names.end());
  std::sort(release_names.begin(), release_names.end());
  EXPECT_EQ(names, release_names);
  if (names != release_names) return -1;
  int64_t differing = 0;
  for (const std::string& name : names) {
    const TensorView a = mine.get(name).value(), b = release.get(name).value();
    EXPECT_EQ(a.dtype, b.dtype) << name;
    EXPECT_EQ(a.shape, b.shape) << name;
    if (a.dtype != b.dtype || a.shape != b.shape) return -1;
    const size_t bytes = static_cast<size_t>(a.numel() * dtype_bits(a.dtype) / 8);
    const auto* x = static_cast<const uint8_t*>(a.data);
    const auto* y = static_cast<const uint8_t*>(b.data);
    for (size_t i = 0; i < bytes; ++i) {
      const bool both_zero = a.dtype == DType::kF8E4M3 && (x[i] & 0x7F) == 0 && (y[i] & 0x7F) == 0;
      differing += x[i] != y[i] && !both_zero ? 1 : 0;
    }
  }
  return differing;
}

// `moert quantize --format mxfp4` of a BF16 gpt-oss checkpoint writes the release layout:
// only the stacked experts become _blocks/_scales ([E, out, in/32, 16] / [E, out, in/32]),
// byte for byte what the shared MXFP4 reference case holds, with the release's
// modules_to_not_convert; and the result serves.
TEST(CliQuantize, GptOssMxfp4IsTheReleaseLayout) {
  const std::string ref = testing::shared_dir() + "/reference/";
  if (testing::shared_dir().empty() || !fs::exists(ref + "gptoss-tiny-mxfp4/hf")) GTEST_SKIP() << "no shared gpt-oss cases";
  testing::ScratchDir scratch("cli-quantize-gptoss");
  const std::string out = scratch / "mxfp4";
  const testing::CommandResult quantized =
      run_command(moert() + " quantize --model " + ref + "gptoss-tiny/hf --format mxfp4 --out " + out);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  EXPECT_EQ(bytes_differing_from_release(out, ref + "gptoss-tiny-mxfp4/hf"), 0);
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(out + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "mxfp4");
  EXPECT_EQ(config["quantization_config"]["modules_to_not_convert"].size(), 4u);
  const testing::CommandResult scored = run_command(moert() + " score --model " + out + " --tokens 3,1,4,1,5 -n 4");
  EXPECT_EQ(scored.exit_code, 0) << scored.err;
}

// `moert quantize --format fp8` of the BF16 DeepSeek-V3 checkpoint writes the DeepSeek
// release layout (F8_E4M3 weight + F32 weight_scale_inv per 128x128 tile, ragged edges):
// the same tensors, dtypes and shapes as the shared FP8 case, and it serves with the
// greedy tokens of that case.
TEST(CliQuantize, DeepseekFp8IsTheReleaseLayout) {
  const std::string ref = testing::shared_dir() + "/reference/";
  if (testing::shared_dir().empty() || !fs::exists(ref + "deepseekv3-tiny-fp8/hf")) GTEST_SKIP() << "no shared DeepSeek cases";
  testing::ScratchDir scratch("cli-quantize-deepseek");
  const std::string out = scratch / "fp8";
  const testing::CommandResult quantized =
      run_command(moert() + " quantize --model " + ref + "deepseekv3-tiny/hf --format fp8 --out " + out);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  EXPECT_EQ(bytes_differing_from_release(out, ref + "deepseekv3-tiny-fp8/hf"), 0);
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(out + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], nlohmann::json({128, 128}));
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "deepseekv3-tiny-fp8/ref.json"));
  std::string prompt;
  for (int t : expected["prompt_tokens"]) prompt += (prompt.empty() ? "" : ",") + std::to_string(t);
  const testing::CommandResult scored = run_command(moert() + " score --model " + out + " --tokens " + prompt + " -n 8");
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  std::string first_eight;
  for (int i = 0; i < 8; ++i) first_eight += (i ? " " : "") + std::to_string(expected["gen_tokens"][static_cast<size_t>(i)].get<int>());
  EXPECT_NE(scored.out.find("generated: " + first_eight), std::string::npos) << scored.out;
}

// A DSA checkpoint in the FP8 release layout (docs/sparse-attention.md): the indexer's wq_b and
// wk become F8_E4M3 + 128x128 weight_scale_inv, weights_proj and k_norm stay BF16; moert loads
// it, and `moert run` over the paged cache gives `moert score`'s greedy tokens.
TEST(CliQuantize, GlmDsaFp8KeepsTheIndexerWeightsProjectionAndServes) {
  const std::string ref = testing::shared_dir() + "/reference/glm5dsa-tiny";
  if (testing::shared_dir().empty() || !fs::exists(ref + "/hf")) GTEST_SKIP() << "no shared glm5dsa-tiny case";
  testing::ScratchDir scratch("cli-quantize-glm5dsa");
  const std::string out = scratch / "fp8";
  const testing::CommandResult quantized =
      run_command(moert() + " quantize --model " + ref + "/hf --format fp8 --out " + out);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const io::Checkpoint checkpoint = io::Checkpoint::open(out).value();
  const std::string indexer = "model.layers.2.self_attn.indexer.";
  for (const char* name : {"wq_b", "wk"}) {
    EXPECT_EQ(checkpoint.get(indexer + name + ".weight").value().dtype, DType::kF8E4M3) << name;
    EXPECT_EQ(checkpoint.get(indexer + name + ".weight_scale_inv").value().dtype, DType::kF32) << name;
  }
  for (const char* name : {"weights_proj.weight", "k_norm.weight", "k_norm.bias"}) {
    EXPECT_EQ(checkpoint.get(indexer + name).value().dtype, DType::kBF16) << name;
  }
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "/ref.json"));
  std::vector<int> prompt_ids = expected["prompt_tokens"].get<std::vector<int>>();
  std::string prompt;
  for (int t : prompt_ids) prompt += (prompt.empty() ? "" : ",") + std::to_string(t);
  const testing::CommandResult scored = run_command(moert() + " score --model " + out + " --tokens " + prompt + " -n 12");
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  const size_t at = scored.out.find("generated: ");
  ASSERT_NE(at, std::string::npos) << scored.out;
  std::vector<int> generated;
  std::istringstream tokens(scored.out.substr(at + 11));
  for (int id; generated.size() < 12 && tokens >> id;) generated.push_back(id);
  const std::string input = scratch / "in.jsonl", output = scratch / "out.jsonl";
  testing::write_file(input, nlohmann::json({{"id", "a"}, {"prompt_token_ids", prompt_ids}, {"max_tokens", 12}}).dump() + "\n");
  const testing::CommandResult served = run_command(moert() + " run --model " + out + " --input " + input +
                                                    " --output " + output +
                                                    " --threads 1 --max-batched-tokens 16 --block-size 8 --kv-cache-dtype f32");
  ASSERT_EQ(served.exit_code, 0) << served.err;
  const nlohmann::json line = nlohmann::json::parse(testing::read_file(output));
  EXPECT_EQ(line["outputs"][0]["token_ids"], nlohmann::json(generated));
}

}  // namespace
}  // namespace moert::cli_test
