// End-to-end tests of the `moert` binary on real files: make-model, score, --device, and the
// one-line errors for bad checkpoints and configs. The other commands' tests of this binary
// (cli_test) are beside it: cli_run_test.cpp, cli_quantize_test.cpp, cli_files_test.cpp,
// cli_tokenize_test.cpp; their helpers in cli_test_support.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/checkpoint.h"
#include "runtime/io/npy.h"
#include "tests/launch/cli_test_support.h"

namespace moert::cli_test {
namespace {

std::string first_shard(const std::string& dir) {
  return dir + "/model-00001-of-" + [&] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(dir)) n += entry.path().extension() == ".safetensors";
    char buffer[16];
    std::snprintf(buffer, sizeof(buffer), "%05d", n);
    return std::string(buffer);
  }() + ".safetensors";
}

TEST(Cli, MakeModelThenScoreWritesTheReferenceLayout) {
  testing::ScratchDir scratch("cli-score");
  for (const char* arch : {"qwen3_moe", "qwen2_moe", "mixtral", "glm4_moe"}) {
    const std::string dir = make_small_model(scratch, arch, arch);
    const std::string prefix = scratch / (std::string(arch) + "-out");
    const testing::CommandResult scored =
        run_command(moert() + " score --model " + dir + " --tokens 5,9,2,7 -n 5 --threads 2 --out " + prefix);
    ASSERT_EQ(scored.exit_code, 0) << scored.err;
    EXPECT_NE(scored.out.find("generated: "), std::string::npos);
    const nlohmann::json summary = nlohmann::json::parse(testing::read_file(prefix + ".json"));
    EXPECT_EQ(summary.at("prompt_tokens"), nlohmann::json({5, 9, 2, 7}));
    EXPECT_EQ(summary.at("gen_tokens").size(), 5u);
    Result<io::NpyArray> prompt_logits = io::read_npy(prefix + ".prompt_logits.npy");
    Result<io::NpyArray> gen_logits = io::read_npy(prefix + ".gen_logits.npy");
    ASSERT_TRUE(prompt_logits.is_ok() && gen_logits.is_ok());
    EXPECT_EQ(prompt_logits->shape, (Shape{4, 256}));
    EXPECT_EQ(gen_logits->shape, (Shape{5, 256}));
    // gen_logits row 0 is the last prompt row, and each generated token is its row's argmax.
    for (int i = 0; i < 256; ++i) ASSERT_EQ(gen_logits->values[i], prompt_logits->values[3 * 256 + i]);
    for (int j = 0; j < 5; ++j) {
      const double* row = gen_logits->values.data() + j * 256;
      const int argmax = static_cast<int>(std::max_element(row, row + 256) - row);
      EXPECT_EQ(summary.at("gen_tokens")[j].get<int>(), argmax);
    }
  }
}

TEST(Cli, ScoreReproducesTheSharedReference) {
  if (testing::reference_model_names().empty()) GTEST_SKIP() << "no shared reference models";
  testing::ScratchDir scratch("cli-ref");
  const std::string ref = testing::shared_dir() + "/reference/qwen3moe-tiny";
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "/ref.json"));
  std::string tokens;
  for (const auto& t : expected.at("prompt_tokens")) tokens += (tokens.empty() ? "" : ",") + std::to_string(t.get<int>());
  const testing::CommandResult scored =
      run_command(moert() + " score --model " + ref + "/hf --tokens " + tokens + " -n 32 --out " + (scratch / "q3"));
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  const nlohmann::json got = nlohmann::json::parse(testing::read_file(scratch / "q3.json"));
  EXPECT_EQ(got.at("gen_tokens"), expected.at("gen_tokens"));
}

// --device: a bad value, and cuda where this build or machine has no GPU, fail in one line
// before anything is loaded; with a GPU (the cuda-labelled tests cover it) this skips.
TEST(Cli, DeviceChoiceFailsInOneLineWithoutAGpu) {
  testing::ScratchDir scratch("cli-device");
  const std::string dir = make_small_model(scratch, "m", "qwen3_moe");
  expect_one_line_error(run_command(moert() + " score --device tpu --model " + dir + " --tokens 1,2"),
                        "--device 'tpu' is not cpu or cuda");
  testing::write_file(scratch / "in.jsonl", "{\"id\": \"a\", \"prompt_token_ids\": [1, 2], \"max_tokens\": 2}\n");
  const std::string run_on_cpu = moert() + " run --model " + dir + " --input " + (scratch / "in.jsonl") + " --output " +
                                 (scratch / "out.jsonl");
  expect_one_line_error(run_command(run_on_cpu + " --ep-transport ucx"), "--ep-transport 'ucx' is not auto, nccl or mpi");
  expect_one_line_error(run_command(run_on_cpu + " --ep-transport nccl"), "--ep-transport nccl moves device buffers");
  EXPECT_FALSE(std::filesystem::exists(scratch / "out.jsonl"));  // nothing written
  const testing::CommandResult scored = run_command(moert() + " score --device cuda --model " + dir + " --tokens 1,2");
  if (scored.exit_code == 0) GTEST_SKIP() << "a GPU is visible";
  expect_one_line_error(scored, "--device cuda: ");
  const testing::CommandResult ran = run_command(moert() + " run --device cuda --model " + dir + " --input " +
                                                 (scratch / "in.jsonl") + " --output " + (scratch / "out.jsonl"));
  expect_one_line_error(ran, "--device cuda: ");
  EXPECT_FALSE(std::filesystem::exists(scratch / "out.jsonl"));  // nothing written
}

class CliBadInput : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_small_model(scratch_, "model", "qwen3_moe"); }
  testing::CommandResult score() { return run_command(moert() + " score --model " + dir_ + " --tokens 1,2,3 -n 2"); }

  testing::ScratchDir scratch_{"cli-bad"};
  std::string dir_;
};

TEST_F(CliBadInput, TruncatedShard) {
  const std::string shard = first_shard(dir_);
  const std::string bytes = testing::read_file(shard);
  testing::write_file(shard, bytes.substr(0, bytes.size() - 100));
  expect_one_line_error(score(), "model-00001-of-");
}

TEST_F(CliBadInput, CorruptHeader) {
  const std::string shard = first_shard(dir_);
  std::string bytes = testing::read_file(shard);
  bytes[9] = '#';  // inside the JSON header
  testing::write_file(shard, bytes);
  expect_one_line_error(score(), "model-00001-of-00011.safetensors: header is not valid JSON");
}

TEST_F(CliBadInput, UnknownArchitecture) {
  nlohmann::json config = nlohmann::json::parse(testing::read_file(dir_ + "/config.json"));
  config["architectures"] = {"FancyMoeForCausalLM"};
  testing::write_file(dir_ + "/config.json", config.dump());
  expect_one_line_error(score(), "unknown architecture 'FancyMoeForCausalLM'");
}

TEST_F(CliBadInput, MissingTensor) {
  nlohmann::json index = nlohmann::json::parse(testing::read_file(dir_ + "/model.safetensors.index.json"));
  index["weight_map"].erase("model.layers.1.mlp.experts.3.up_proj.weight");
  testing::write_file(dir_ + "/model.safetensors.index.json", index.dump());
  expect_one_line_error(score(), "model.layers.1.mlp.experts.3.up_proj.weight");
}

TEST_F(CliBadInput, MisShapedTensor) {
  nlohmann::json config = nlohmann::json::parse(testing::read_file(dir_ + "/config.json"));
  config["moe_intermediate_size"] = 63;
  testing::write_file(dir_ + "/config.json", config.dump());
  expect_one_line_error(score(), "has shape [64, 64], expected [63, 64]");
}

// Copies checkpoint `dir` with `mutate(name, bytes)` applied to every tensor's bytes.
void rewrite_checkpoint(const std::string& dir, const std::function<void(const std::string&, std::string&)>& mutate) {
  const std::string copy = dir + "-copy";
  std::filesystem::rename(dir, copy);
  std::filesystem::create_directories(dir);
  {
    const io::Checkpoint in = io::Checkpoint::open(copy).value();
    std::vector<std::string> storage;
    std::vector<io::NamedTensor> named;
    storage.reserve(in.tensor_names().size());
    for (const std::string& name : in.tensor_names()) {
      const TensorView view = in.get(name).value();
      std::string& bytes = storage.emplace_back(static_cast<const char*>(view.data),
                                                static_cast<size_t>(view.numel() * dtype_bits(view.dtype) / 8));
      mutate(name, bytes);
      named.push_back({name, TensorView::contiguous(view.dtype, view.shape, bytes.data())});
    }
    ASSERT_TRUE(io::write_sharded_checkpoint(dir, named, 1 << 30).is_ok());
  }
  for (const char* file : {"config.json", "generation_config.json", "hf_quant_config.json"}) {
    if (std::filesystem::exists(copy + "/" + file)) std::filesystem::copy_file(copy + "/" + file, dir + "/" + file);
  }
  std::filesystem::remove_all(copy);
}

// Numbers moert cannot compute with are refused at load with the tensor, element and value:
// NaN / Inf weights (BF16, FP8 codes), negative FP8 block scales, a zero NVFP4 global scale;
// config values out of their domain; a checkpoint with more layers than the config.
TEST_F(CliBadInput, UnusableNumbersAndLayerCounts) {
  rewrite_checkpoint(dir_, [](const std::string& name, std::string& bytes) {
    if (name == "model.layers.1.post_attention_layernorm.weight") {
      bytes[10] = static_cast<char>(0xC0);  // BF16 element 5 = 0x7FC0, a NaN
      bytes[11] = 0x7F;
    }
  });
  expect_one_line_error(score(), "tensor 'model.layers.1.post_attention_layernorm.weight' holds NaN at element 5");
  rewrite_checkpoint(dir_, [](const std::string& name, std::string& bytes) {
    if (name == "model.layers.1.post_attention_layernorm.weight") bytes[10] = bytes[11] = 0;
    if (name == "model.layers.0.mlp.experts.2.down_proj.weight") {
      bytes[2] = static_cast<char>(0x80);  // BF16 element 1 = 0xFF80, -Inf
      bytes[3] = static_cast<char>(0xFF);
    }
  });
  expect_one_line_error(score(), "tensor 'model.layers.0.mlp.experts.2.down_proj.weight' holds Inf at element 1");
  // The last element of a tensor larger than the scan's 4096-element blocks.
  size_t last = 0;
  rewrite_checkpoint(dir_, [&](const std::string& name, std::string& bytes) {
    if (name == "model.layers.0.mlp.experts.2.down_proj.weight") bytes[2] = bytes[3] = 0;
    if (name == "model.embed_tokens.weight") {
      last = bytes.size() / 2 - 1;
      bytes[bytes.size() - 2] = static_cast<char>(0x81);  // 0x7F81, a NaN
      bytes[bytes.size() - 1] = 0x7F;
    }
  });
  ASSERT_GT(last, 4096u);
  expect_one_line_error(score(), "tensor 'model.embed_tokens.weight' holds NaN at element " + std::to_string(last));
  rewrite_checkpoint(dir_, [](const std::string& name, std::string& bytes) {
    if (name == "model.embed_tokens.weight") bytes[bytes.size() - 2] = bytes[bytes.size() - 1] = 0;
  });
  ASSERT_EQ(score().exit_code, 0) << score().err;

  const std::string fp8 = scratch_ / "fp8", nvfp4 = scratch_ / "nvfp4";
  ASSERT_EQ(run_command(moert() + " quantize --model " + dir_ + " --format fp8 --out " + fp8).exit_code, 0);
  rewrite_checkpoint(fp8, [](const std::string& name, std::string& bytes) {
    if (name == "model.layers.1.self_attn.o_proj.weight_scale_inv") bytes[3] = static_cast<char>(bytes[3] | 0x80);
  });
  expect_one_line_error(run_command(moert() + " score --model " + fp8 + " --tokens 1,2"),
                        "tensor 'model.layers.1.self_attn.o_proj.weight_scale_inv' holds a negative scale");
  rewrite_checkpoint(fp8, [](const std::string& name, std::string& bytes) {
    if (name == "model.layers.1.self_attn.o_proj.weight_scale_inv") bytes[3] = static_cast<char>(bytes[3] & 0x7F);
    if (name == "model.layers.1.self_attn.o_proj.weight") bytes[7] = static_cast<char>(0xFF);  // an E4M3 NaN
  });
  expect_one_line_error(run_command(moert() + " score --model " + fp8 + " --tokens 1,2"),
                        "tensor 'model.layers.1.self_attn.o_proj.weight' holds NaN at element 7");
  ASSERT_EQ(run_command(moert() + " quantize --model " + dir_ + " --format nvfp4 --out " + nvfp4).exit_code, 0);
  rewrite_checkpoint(nvfp4, [](const std::string& name, std::string& bytes) {
    if (name == "model.layers.0.mlp.experts.0.up_proj.weight_scale_2") bytes.assign(4, '\0');
  });
  expect_one_line_error(run_command(moert() + " score --model " + nvfp4 + " --tokens 1,2"),
                        "tensor 'model.layers.0.mlp.experts.0.up_proj.weight_scale_2' holds a zero global scale");

  const nlohmann::json config = nlohmann::json::parse(testing::read_file(dir_ + "/config.json"));
  for (const auto& [key, value, needle] :
       {std::tuple{"rope_theta", nlohmann::json(0), "'rope_theta' = 0.000000 must be finite and > 0"},
        std::tuple{"rms_norm_eps", nlohmann::json(-1e-6), "'rms_norm_eps'"},
        std::tuple{"num_hidden_layers", nlohmann::json(1), "the checkpoint holds layer 1"},
        std::tuple{"num_experts", nlohmann::json(4294967300LL), "'num_experts' = 4294967300 is outside"},
        std::tuple{"max_position_embeddings", nlohmann::json(-5), "'max_position_embeddings' = -5 must be > 0"}}) {
    nlohmann::json bad = config;
    bad[key] = value;
    testing::write_file(dir_ + "/config.json", bad.dump());
    expect_one_line_error(score(), needle);
  }
}

TEST_F(CliBadInput, MissingModelAndBadTokens) {
  expect_one_line_error(run_command(moert() + " score --model " + (scratch_ / "nowhere") + " --tokens 1"), "nowhere");
  expect_one_line_error(run_command(moert() + " score --model " + dir_ + " --tokens 1,x,3"), "'x'");
  expect_one_line_error(run_command(moert() + " score --model " + dir_ + " --tokens 1,999"),
                        "token id 999 at index 1 is outside the vocabulary [0, 256)");
  expect_one_line_error(run_command(moert() + " score --model " + dir_), "tokens");
  expect_one_line_error(run_command(moert() + " frobnicate"), "unknown command 'frobnicate'");
}

}  // namespace
}  // namespace moert::cli_test
