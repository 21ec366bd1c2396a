// End-to-end tests of the `moert` binary on real files: make-model, score, and the
// one-line errors for bad checkpoints and configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "quant/cpu/bf16_linear.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/npy.h"
#include "tests/support/test_support.h"
#if MOERT_TEST_WITH_CHAT
#include "text/tokenizer/tokenizer.h"
#endif

namespace moert {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

std::string moert() { return testing::moert_binary(); }

int count_lines(const std::string& text) {
  int lines = 0;
  for (char ch : text) lines += ch == '\n' ? 1 : 0;
  return lines;
}

// Makes a small two-layer model with several shards; returns its directory.
std::string make_small_model(const testing::ScratchDir& scratch, const std::string& name, const std::string& arch) {
  const std::string dir = scratch / name;
  const testing::CommandResult made =
      run_command(moert() + " make-model --arch " + arch + " --preset tiny --num-layers 2 --hidden-size 64 "
                  "--expert-size 64 --vocab-size 256 --head-dim 16 --shard-mb 0.05 --seed 3 --out " + dir);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return dir;
}

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

// Each bad input: exit code != 0 and exactly one line on stderr naming the problem.
void expect_one_line_error(const testing::CommandResult& result, const std::string& needle) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
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


std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(testing::read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(CliRun, ServesABatchSkipsBadLinesAndResumes) {
  testing::ScratchDir scratch("cli-run");
  const std::string model = make_small_model(scratch, "model", "qwen2_moe");
  const std::string input = scratch / "in.jsonl";
  std::string text;
  for (int r = 0; r < 6; ++r) {
    text += R"({"id": "r)" + std::to_string(r) + R"(", "prompt_token_ids": [)" + std::to_string(r + 1) + ", 7, 9], " +
            R"("max_tokens": )" + std::to_string(3 + r) + "}\n";
  }
  text += "{broken json\n";
  text += R"({"id": "sampled", "prompt_token_ids": [4, 4, 4], "max_tokens": 5, "temperature": 0.9, "n": 2, "seed": 1, "ignore_eos": true})" "\n";
  testing::write_file(input, text);
  const std::string output = scratch / "out.jsonl";
  const std::string run = moert() + " run --model " + model + " --input " + input + " --output " + output + " --threads 2";
  const testing::CommandResult first = run_command(run);
  EXPECT_EQ(first.exit_code, 3) << first.err;  // one malformed line
  EXPECT_NE(first.err.find("in.jsonl line 7: the line is not valid JSON"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("summary: "), std::string::npos);
  EXPECT_NE(first.err.find("prefix-cache hit rate"), std::string::npos);
  const std::vector<nlohmann::json> lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), 8u);  // 7 results and the error line of line 7
  std::map<std::string, nlohmann::json> by_id;
  for (const auto& line : lines) {
    if (line.contains("outputs")) {
      by_id[line["id"]] = line;
    } else {
      EXPECT_TRUE(line["id"].is_null()) << line;
      EXPECT_EQ(line["error"]["line"], 7) << line;
      EXPECT_NE(line["error"]["message"].get<std::string>().find("not valid JSON"), std::string::npos) << line;
    }
  }
  ASSERT_EQ(by_id.size(), 7u);
  for (int r = 0; r < 6; ++r) {
    const nlohmann::json& line = by_id.at("r" + std::to_string(r));
    EXPECT_EQ(line["outputs"][0]["token_ids"].size(), static_cast<size_t>(3 + r));
    EXPECT_EQ(line["outputs"][0]["finish_reason"], "length");
    EXPECT_EQ(line["prompt_tokens"], 3);
  }
  EXPECT_EQ(by_id.at("sampled")["outputs"].size(), 2u);
  EXPECT_EQ(by_id.at("sampled")["output_tokens"], 10);

  // A rerun after a "kill": drop two finished lines; only those two are served again,
  // with the same tokens.
  std::string kept;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i]["id"] != "r2" && lines[i]["id"] != "r4") kept += lines[i].dump() + "\n";
  }
  testing::write_file(output, kept);
  const testing::CommandResult second = run_command(run + " --resume");
  EXPECT_EQ(second.exit_code, 3);
  EXPECT_NE(second.err.find("2 finished, 5 skipped"), std::string::npos) << second.err;
  const std::vector<nlohmann::json> resumed = read_jsonl(output);
  ASSERT_EQ(resumed.size(), 8u);  // the error line is not written twice
  for (const auto& line : resumed) {
    if (line.contains("outputs")) {
      EXPECT_EQ(line["outputs"], by_id.at(line["id"])["outputs"]) << line["id"];
    }
  }
}

TEST(CliRun, BenchPrintsThroughput) {
  testing::ScratchDir scratch("cli-bench");
  const std::string model = make_small_model(scratch, "model", "mixtral");
  const testing::CommandResult bench = run_command(moert() + " bench --model " + model +
                                                   " --num-requests 6 --input-len 20 --output-len 5 --threads 2");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("bench: ranks=1 batch_size=64 requests=6 input_len=20.0 output_len=5.0"), std::string::npos)
      << bench.out;
  EXPECT_NE(bench.out.find("output_tok_s="), std::string::npos);
  EXPECT_NE(bench.out.find("(120 tokens), output"), std::string::npos) << bench.out;
}

// --weight-memory: every choice serves the same tokens (the start-up line names a choice
// other than the default copy); a bad value, a host choice with --device cuda, and mlock past
// RLIMIT_MEMLOCK (the lock capability dropped, as for a user) each fail in one line.
TEST(CliOptions, WeightMemoryChoicesServeTheSameTokensAndRefusalsAreOneLine) {
  testing::ScratchDir scratch("cli-weight-memory");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string input = scratch / "in.jsonl";
  testing::write_file(input, "{\"id\": \"a\", \"prompt_token_ids\": [1, 2, 3, 4, 5], \"max_tokens\": 6}\n"
                             "{\"id\": \"b\", \"prompt_token_ids\": [9, 8, 7], \"max_tokens\": 6}\n");
  std::map<std::string, std::map<std::string, nlohmann::json>> outputs;  // memory -> id -> outputs
  for (const char* memory : {"copy", "mmap", "mlock"}) {
    const std::string output = scratch / (std::string(memory) + ".jsonl");
    const testing::CommandResult run = run_command("MOERT_LOG_LEVEL=info " + moert() + " run --model " + model + " --input " + input +
                                                   " --output " + output + " --threads 2 --weight-memory " + memory);
    ASSERT_EQ(run.exit_code, 0) << memory << ": " << run.err;
    EXPECT_EQ(run.err.find("weight memory " + std::string(memory)) != std::string::npos, std::string(memory) != "copy")
        << run.err;
    std::istringstream lines(testing::read_file(output));
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json result = nlohmann::json::parse(line);
      outputs[memory][result["id"]] = result["outputs"];
    }
    EXPECT_EQ(outputs[memory].size(), 2u) << memory;
  }
  EXPECT_EQ(outputs["mmap"], outputs["copy"]);
  EXPECT_EQ(outputs["mlock"], outputs["copy"]);
  const std::string bench = moert() + " bench --model " + model + " --num-requests 1 --input-len 4 --output-len 2";
  expect_one_line_error(run_command(bench + " --weight-memory swap"),
                        "--weight-memory 'swap' is not one of copy, mmap, mlock");
  expect_one_line_error(run_command(bench + " --weight-memory mmap --device cuda"),
                        "--weight-memory mmap runs on the CPU only");
  expect_one_line_error(run_command(moert() + " score --model " + model + " --tokens 1,2 --weight-memory lock"),
                        "--weight-memory 'lock' is not one of copy, mmap, mlock");
  const std::string as_user = "prlimit --memlock=4096:4096 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock ";
  if (testing::kAddressSanitizer) return;  // its runtime makes mlock a no-op that never fails
  if (run_command(as_user + "true").exit_code != 0) return;  // no util-linux, or no right to drop capabilities
  const testing::CommandResult refused = run_command(as_user + bench + " --weight-memory mlock");
  expect_one_line_error(refused, "cannot lock ");
  EXPECT_NE(refused.err.find("RLIMIT_MEMLOCK 4 KiB (ulimit -l 4)"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("or use --weight-memory copy"), std::string::npos) << refused.err;
}

// --kv-cache-dtype on run/bench/eval: the engine line names the dtype, eval measures the
// drift against F32 (none for f32 itself), and a bad value is one line naming it.
TEST(CliRun, KvCacheDtypes) {
  testing::ScratchDir scratch("cli-kv-dtype");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const testing::CommandResult bench = run_command(moert() + " bench --model " + model +
                                                   " --num-requests 3 --input-len 20 --output-len 4 --threads 2 "
                                                   "--kv-cache-dtype fp8_e4m3");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("tokens (fp8_e4m3)"), std::string::npos) << bench.out;
  const testing::CommandResult exact =
      run_command(moert() + " eval --model " + model + " --kv-cache-dtype f32 --num-sequences 2 --length 12");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_NE(exact.out.find("24 positions, mean KL 0 nats, top-1 agreement 1.0000"), std::string::npos) << exact.out;
  const testing::CommandResult bf16 =
      run_command(moert() + " eval --model " + model + " --kv-cache-dtype bf16 --num-sequences 2 --length 12");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_NE(bf16.out.find("with a bf16 KV cache against f32: 24 positions"), std::string::npos) << bf16.out;
  EXPECT_EQ(bf16.out.find("mean KL 0 nats"), std::string::npos) << bf16.out;
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --num-requests 1 --kv-cache-dtype int4"),
                        "--kv-cache-dtype 'int4'");
  expect_one_line_error(run_command(moert() + " eval --model " + model + " --kv-cache-dtype bf16 --against " + model),
                        "exactly one of --against");
}


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


// Speculative decoding (rollback after rejected drafts) on the release-shaped architectures:
// gpt-oss (sliding windows in the target's and the draft's caches) and DeepSeek-V3 (latent
// caches). The model drafting for itself accepts everything, and both it and the n-gram
// proposer give the outputs of plain decoding.
class CliRunSelfDraft : public ::testing::TestWithParam<std::string> {};

TEST_P(CliRunSelfDraft, EqualsPlainDecoding) {
  const std::string model = testing::shared_dir() + "/reference/" + GetParam() + "/hf";
  if (testing::shared_dir().empty() || !fs::exists(model)) GTEST_SKIP() << "no shared " << GetParam() << " case";
  testing::ScratchDir scratch("cli-self-draft-" + GetParam());
  std::string text;
  for (int i = 0; i < 4; ++i) {
    std::vector<int> prompt;
    const int phrase = 3 + i;  // repeats give the n-gram proposer something to propose
    for (int j = 0; j < 30 + 11 * i; ++j) prompt.push_back(i % 2 == 0 ? (i * 97 + j * 13 + 1) % 1000 : (i * 31 + (j % phrase) * 7) % 1000);
    text += nlohmann::json({{"id", "s" + std::to_string(i)}, {"prompt_token_ids", prompt}, {"max_tokens", 20}}).dump() + "\n";
  }
  testing::write_file(scratch / "in.jsonl", text);
  auto run = [&](const std::string& name, const std::string& extra) {
    const testing::CommandResult result =
        run_command(moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --output " +
                    (scratch / name) + " --threads 1 --block-size 8 " + extra);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result;
  };
  auto outputs = [&](const std::string& name) {
    std::map<std::string, nlohmann::json> by_id;
    for (const auto& line : read_jsonl(scratch / name)) by_id[line["id"]] = line["outputs"];
    return by_id;
  };
  run("plain.jsonl", "");
  const testing::CommandResult spec = run("draft.jsonl", "--spec draft --draft-model " + model + " --spec-k 3");
  EXPECT_NE(spec.err.find("accepted (rate 1.000)"), std::string::npos) << spec.err;
  EXPECT_EQ(read_jsonl(scratch / "draft.jsonl").size(), 4u);
  EXPECT_EQ(outputs("draft.jsonl"), outputs("plain.jsonl"));
  run("ngram.jsonl", "--spec ngram --spec-k 4");
  EXPECT_EQ(outputs("ngram.jsonl"), outputs("plain.jsonl"));
}

INSTANTIATE_TEST_SUITE_P(ReleaseShapes, CliRunSelfDraft, ::testing::Values("gptoss-tiny", "deepseekv3-tiny"),
                         [](const auto& info) { return testing::test_param_name(info.param); });

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

}  // namespace
}  // namespace moert


namespace moert {
namespace {

// --config FILE gives any long option as `key = value` (the command line wins; unknown keys
// and missing files are one-line errors); --kv-cache-memory-fraction sizes the pool from
// the available memory and refuses values outside (0, 1]; `moert run` prints progress
// lines with the request total, rate, ETA and KV use when stderr is not a terminal.
TEST(CliOptions, ConfigFileMemoryFractionAndProgressLines) {
  testing::ScratchDir scratch("cli-options");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  testing::write_file(scratch / "bench.ini", "# bench settings\ninput-len = 12\noutput-len = 3\nwarmup = 0\n"
                                             "repeats = 1\nbatch-sizes = 2\nthreads = 1\n");
  const testing::CommandResult bench =
      run_command(moert() + " bench --model " + model + " --config " + (scratch / "bench.ini") + " --output-len 5");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("batch_size=2 requests=8 input_len=12.0 output_len=5.0"), std::string::npos) << bench.out;
  testing::write_file(scratch / "bad.ini", "no-such-option = 3\n");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --config " + (scratch / "bad.ini")),
                        "unrecognised option 'no-such-option'");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --config " + (scratch / "none.ini")),
                        "--config: cannot open");

  const testing::CommandResult fraction = run_command(moert() + " bench --model " + model +
                                                      " --kv-cache-memory-fraction 0.001 --batch-sizes 1 --repeats 1 "
                                                      "--warmup 0 --input-len 8 --output-len 2 --threads 1");
  ASSERT_EQ(fraction.exit_code, 0) << fraction.err;
  EXPECT_NE(fraction.out.find("engine: "), std::string::npos);
  EXPECT_EQ(fraction.out.find("engine: 16384 KV blocks"), std::string::npos) << "the default 1 GiB pool was used";
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --kv-cache-memory-fraction 1.5"),
                        "--kv-cache-memory-fraction = 1.5");

  // --input: the file's requests, cycled to --num-requests (10-token prompts, 3 new tokens).
  testing::write_file(scratch / "requests.jsonl",
                      "{\"id\": \"a\", \"prompt_token_ids\": [1,2,3,4,5,6,7,8,9,10], \"max_tokens\": 3}\n\n"
                      "{\"id\": \"b\", \"prompt_token_ids\": [9,8,7,6,5,4,3,2,1,0], \"max_tokens\": 3}\n");
  const testing::CommandResult from_file =
      run_command(moert() + " bench --model " + model + " --input " + (scratch / "requests.jsonl") +
                  " --num-requests 5 --batch-sizes 2 --warmup 0 --repeats 1 --threads 1 --json " + (scratch / "f.json"));
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  const nlohmann::json file_result = nlohmann::json::parse(testing::read_file(scratch / "f.json"));
  EXPECT_EQ(file_result["results"][0]["num_requests"], 5);
  EXPECT_EQ(file_result["results"][0]["input_len"], 10.0);
  EXPECT_EQ(file_result["results"][0]["output_len"], 3.0);
  testing::write_file(scratch / "broken.jsonl", "{\"id\": \"a\"}\n");
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --input " + (scratch / "broken.jsonl")),
                        "broken.jsonl line 1");

  std::string text;
  for (int i = 0; i < 24; ++i) {
    text += "{\"id\": \"r" + std::to_string(i) + "\", \"prompt_token_ids\": [" + std::to_string(i + 1) +
            ", 3, 5, 7], \"max_tokens\": 40}\n";
  }
  testing::write_file(scratch / "in.jsonl", text);
  const testing::CommandResult run = run_command("MOERT_LOG_LEVEL=info " + moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") +
                                                 " --output " + (scratch / "out.jsonl") +
                                                 " --threads 1 --max-seqs 2 --progress-interval 0.000001");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("/24 requests, "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(", ETA "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" blocks)"), std::string::npos) << run.err;
}


// The results file is never lost or mixed up (docs/outputs.md): a non-empty output is only
// continued by --resume of the same job (model, input, result-changing options, recorded in
// OUTPUT.manifest.json); every refusal is one line and leaves the bytes as they were; a
// file locked by another job is refused; a torn last line is cut before resuming; the
// output may not be the input or the metrics file; "-" streams to stdout; a full disk is an
// error naming the file. Ids of any JSON type come back as given.
TEST(CliOutputSafety, RefusesForeignOutputsLocksCutsTornLinesAndStreams) {
  testing::ScratchDir scratch("cli-output-safety");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string other = make_small_model(scratch, "other", "mixtral");
  std::string text;
  const std::vector<std::string> ids = {"\"a\"", "7", "-3.5", "true", "[1, \"x\"]", "{\"k\": 1}",
                                        "\"" + std::string(5000, 'z') + "\""};
  for (size_t i = 0; i < ids.size(); ++i) {
    text += "{\"id\": " + ids[i] + ", \"prompt_token_ids\": [" + std::to_string(i + 1) + ", 2, 3], \"max_tokens\": 4}\n";
  }
  const std::string input = scratch / "in.jsonl", output = scratch / "out.jsonl";
  testing::write_file(input, text);
  const std::string run = moert() + " run --input " + input + " --threads 1 ";
  const testing::CommandResult first = run_command(run + "--model " + model + " --output " + output);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::vector<nlohmann::json> lines = read_jsonl(output);
  ASSERT_EQ(lines.size(), ids.size());
  std::set<std::string> echoed;
  for (const auto& line : lines) echoed.insert(line["id"].dump());
  for (const std::string& id : ids) EXPECT_EQ(echoed.count(nlohmann::json::parse(id).dump()), 1u) << id;
  const std::string written = testing::read_file(output);

  // Refusals: bytes unchanged, one line each.
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output), "pass --resume");
  expect_one_line_error(run_command(run + "--model " + other + " --output " + output + " --resume"),
                        "was written by another job: model is");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output + " --resume --kv-cache-dtype bf16"),
                        "kv_cache_dtype is f32 there and bf16 here");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + input), "is the input file");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + output + " --resume --metrics " + output),
                        "is the output file");
  EXPECT_EQ(testing::read_file(output), written);
  EXPECT_EQ(testing::read_file(input), text);
  const std::string foreign = scratch / "foreign.jsonl";
  testing::write_file(foreign, "{\"id\": \"mine\"}\n");
  expect_one_line_error(run_command(run + "--model " + model + " --output " + foreign + " --resume"),
                        "not written by a moert job with a manifest");
  EXPECT_EQ(testing::read_file(foreign), "{\"id\": \"mine\"}\n");

  // Another process holds the lock: refused; the file is untouched.
  const testing::CommandResult locked =
      run_command("flock " + output + " -c '" + moert() + " run --input " + input + " --threads 1 --model " + model +
                  " --output " + output + " --resume'");
  EXPECT_NE(locked.exit_code, 0);
  EXPECT_NE(locked.err.find("another job is writing it"), std::string::npos) << locked.err;
  EXPECT_EQ(testing::read_file(output), written);

  // A torn last line (killed mid-write) and two results missing: --resume cuts the fragment
  // and serves exactly the missing ones; every line is whole JSON.
  std::string partial;
  for (size_t i = 0; i + 2 < lines.size(); ++i) partial += lines[i].dump() + "\n";
  partial += lines.back().dump().substr(0, 40);
  testing::write_file(output, partial);
  const testing::CommandResult resumed = run_command(run + "--model " + model + " --output " + output + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("cut a torn last line of 40 bytes"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("2 finished, 5 skipped"), std::string::npos) << resumed.err;
  const std::vector<nlohmann::json> after = read_jsonl(output);  // throws on a broken line
  EXPECT_EQ(after.size(), ids.size());

  // "-" writes the results to stdout (logs stay on stderr); /dev/full fails with its name.
  const testing::CommandResult streamed = run_command(run + "--model " + model + " --output -");
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(std::count(streamed.out.begin(), streamed.out.end(), '\n'), static_cast<long>(ids.size()));
  const testing::CommandResult full = run_command(run + "--model " + model + " --output /dev/full");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.err.find("/dev/full"), std::string::npos) << full.err;
}


// Inputs that are not regular files (a directory, a device, a FIFO) and model paths that are
// not directories are one-line errors, never a hang on an endless read.
TEST(CliFiles, NonRegularInputsAndModelPaths) {
  testing::ScratchDir scratch("cli-files");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  const std::string fifo = scratch / "fifo";
  ASSERT_EQ(run_command("mkfifo " + fifo).exit_code, 0);
  const std::string run = moert() + " run --model " + model + " --output " + (scratch / "out.jsonl") + " --input ";
  expect_one_line_error(run_command(run + "/dev/zero"), "input /dev/zero is not a regular file");
  expect_one_line_error(run_command(run + scratch.path()), "is a directory");
  expect_one_line_error(run_command(run + fifo), "is not a regular file");
  expect_one_line_error(run_command(run + (scratch / "missing.jsonl")), "cannot open input");
  EXPECT_FALSE(std::filesystem::exists(scratch / "out.jsonl"));
  expect_one_line_error(run_command(moert() + " bench --model " + model + " --input /dev/zero"), "not a regular file");
  testing::write_file(scratch / "file", "x");
  const testing::CommandResult not_dir = run_command(moert() + " score --model " + (scratch / "file") + " --tokens 1");
  expect_one_line_error(not_dir, "Not a directory");
}


// Resource requests beyond what the node has, and impossible values, are one-line errors
// before anything is allocated or written: a huge make-model vocabulary, a KV pool larger
// than the available memory, --threads outside [1, 4096].
TEST(CliResources, ImpossibleRequestsFailBeforeAllocating) {
  testing::ScratchDir scratch("cli-resources");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  expect_one_line_error(run_command(moert() + " make-model --arch qwen3_moe --preset tiny --vocab-size 2000000000 --out " +
                                    (scratch / "big")),
                        "MiB in memory, more than the");
  EXPECT_FALSE(std::filesystem::exists(scratch / "big"));
  testing::write_file(scratch / "in.jsonl", "{\"id\": \"a\", \"prompt_token_ids\": [1, 2], \"max_tokens\": 2, \"n\": 5}\n"
                                            "{\"id\": \"b\", \"prompt_token_ids\": [3, 4], \"max_tokens\": 2, \"n\": 2}\n");
  const std::string run = moert() + " run --model " + model + " --input " + (scratch / "in.jsonl") + " --output ";
  expect_one_line_error(run_command(run + (scratch / "o1.jsonl") + " --kv-cache-mb 1000000"),
                        "more than the");
  expect_one_line_error(run_command(run + (scratch / "o2.jsonl") + " --threads 0"), "--threads '0' must be auto");
  expect_one_line_error(run_command(run + (scratch / "o3.jsonl") + " --threads 99999"), "in [1, 4096]");
  // n above --max-seqs runs in waves (docs/requests.md): both served.
  const testing::CommandResult capped = run_command(run + (scratch / "o4.jsonl") + " --max-seqs 3 --threads 1");
  EXPECT_EQ(capped.exit_code, 0) << capped.err;
  const std::vector<nlohmann::json> capped_lines = read_jsonl(scratch / "o4.jsonl");
  ASSERT_EQ(capped_lines.size(), 2u);
  for (const nlohmann::json& line : capped_lines) {
    EXPECT_EQ(line["outputs"].size(), line["id"] == "a" ? 5u : 2u) << line;
  }
}


// An unreadable model directory or input says why (the permission), run as an unprivileged
// user (root reads everything); skipped where runuser or the nobody account is missing.
TEST(CliFiles, UnreadableModelDirectorySaysWhy) {
  if (run_command("runuser -u nobody -- true").exit_code != 0) GTEST_SKIP() << "cannot run as nobody here";
  testing::ScratchDir scratch("cli-unreadable");
  const std::string model = make_small_model(scratch, "model", "qwen3_moe");
  ASSERT_EQ(run_command("chmod 755 " + scratch.path() + " && chmod 700 " + model).exit_code, 0);
  const testing::CommandResult denied =
      run_command("runuser -u nobody -- " + moert() + " score --model " + model + " --tokens 1,2");
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_EQ(count_lines(denied.err), 1) << denied.err;
  EXPECT_NE(denied.err.find("Permission denied"), std::string::npos) << denied.err;
}


// `moert tokenize` gives exactly Hugging Face tokenizers' ids, decode and skip-special decode
// on every oracle text of the three real tokenizers (tests/data/tokenizers), from a folder
// holding only the tokenizer files; a malformed line gets its own error line, the others run.
TEST(CliTokenize, EqualsTheTokenizersOracleAndReportsBadLines) {
  testing::ScratchDir scratch("cli-tokenize");
  for (const std::string name : {"qwen3", "deepseek_v3", "gpt_oss"}) {
    const std::string dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/" + name;
    std::vector<nlohmann::json> expected;
    std::string input;
    for (const nlohmann::json& line : read_jsonl(dir + "/oracle.jsonl")) {
      if (!line.contains("text")) continue;  // decode-only cases
      expected.push_back(line);
      input += nlohmann::json({{"text", line["text"]}}).dump() + "\n";
    }
    input += "{broken\n";
    testing::write_file(scratch / (name + ".in.jsonl"), input);
    const std::string out = scratch / (name + ".out.jsonl");
    const testing::CommandResult result = run_command(moert() + " tokenize --model " + dir + " --input " +
                                                      (scratch / (name + ".in.jsonl")) + " --output " + out);
    if (result.err.find("built without the tokenizer") != std::string::npos) GTEST_SKIP() << result.err;
    EXPECT_EQ(result.exit_code, 3) << result.err;  // the one broken line
    EXPECT_NE(result.err.find("line " + std::to_string(expected.size() + 1)), std::string::npos) << result.err;
    const std::vector<nlohmann::json> got = read_jsonl(out);
    ASSERT_EQ(got.size(), expected.size() + 1) << name;
    ASSERT_GT(expected.size(), 300u) << name;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(got[i]["ids"], expected[i]["ids"]) << name << " line " << i + 1 << ": " << expected[i]["text"];
      EXPECT_EQ(got[i]["decoded"], expected[i]["decode"]) << name << " line " << i + 1;
      EXPECT_EQ(got[i]["decoded_skip_special"], expected[i]["decode_skip"]) << name << " line " << i + 1;
    }
    EXPECT_TRUE(got.back().contains("error"));
  }
}

#if MOERT_TEST_WITH_CHAT
// Chats through the checkpoint's chat template: every oracle conversation of Qwen3 and
// DeepSeek-V3 (rendered by @huggingface/jinja with the generation prompt) gives the ids of the
// oracle's text; the conversations the template refuses give an error line.
TEST(CliTokenize, ChatsGiveTheIdsOfTheRenderedTemplate) {
  testing::ScratchDir scratch("cli-tokenize-chat");
  for (const std::string name : {"qwen3", "deepseek_v3"}) {
    const std::string dir = std::string(MOERT_TOKENIZER_DATA_DIR) + "/" + name;
    const text::Tokenizer tokenizer = text::Tokenizer::load(dir);
    std::string input;
    std::vector<nlohmann::ordered_json> cases;
    // Ordered: tool definitions must reach the template with their keys in the file's order.
    std::istringstream oracle(testing::read_file(std::string(MOERT_CHAT_TEMPLATE_DATA_DIR) + "/" + name + ".oracle.jsonl"));
    for (std::string text; std::getline(oracle, text);) {
      const nlohmann::ordered_json c = nlohmann::ordered_json::parse(text);
      const nlohmann::ordered_json& context = c["context"];
      if (context.value("add_generation_prompt", false) != true) continue;
      nlohmann::ordered_json line = {{"messages", context["messages"]}};
      if (!context["tools"].is_null()) line["tools"] = context["tools"];
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
      for (const auto& [key, value] : context.items()) {
        if (key != "messages" && key != "tools" && key != "documents" && key != "add_generation_prompt") kwargs[key] = value;
      }
      line["chat_template_kwargs"] = kwargs;
      input += line.dump() + "\n";
      cases.push_back(c);
    }
    ASSERT_GE(cases.size(), 10u) << name;
    testing::write_file(scratch / (name + ".in.jsonl"), input);
    const std::string out = scratch / (name + ".out.jsonl");
    const testing::CommandResult result = run_command(moert() + " tokenize --model " + dir + " --input " +
                                                      (scratch / (name + ".in.jsonl")) + " --output " + out);
    const std::vector<nlohmann::json> got = read_jsonl(out);
    ASSERT_EQ(got.size(), cases.size()) << result.err;
    int errors = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(name + " " + cases[i]["case"].get<std::string>());
      if (cases[i].contains("output")) {
        EXPECT_EQ(got[i]["ids"], nlohmann::json(tokenizer.encode(cases[i]["output"].get<std::string>())));
        EXPECT_EQ(got[i]["decoded"], cases[i]["output"]);
      } else {
        ++errors;
        ASSERT_TRUE(got[i].contains("error")) << got[i];
        if (cases[i].value("raised", false)) {
          EXPECT_NE(got[i]["error"].get<std::string>().find(cases[i]["error"].get<std::string>()), std::string::npos);
        }
      }
    }
    EXPECT_EQ(result.exit_code, errors > 0 ? 3 : 0) << result.err;
  }
}
#endif

}  // namespace
}  // namespace moert
