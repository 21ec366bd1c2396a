// The DeepSeek multi-token prediction layer through the binary (docs/mtp.md): `moert score
// --mtp-out` against the shared float64 reference, `moert make-model --mtp-layers` (release
// names, copies, the faithful design), FP8 quantisation of a model with the layer, and the
// one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/io/checkpoint.h"
#include "runtime/io/npy.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

using testing::run_command;

std::string moert() { return testing::moert_binary(); }

std::string join(const std::vector<int32_t>& tokens) {
  std::string text;
  for (int32_t t : tokens) text += (text.empty() ? "" : ",") + std::to_string(t);
  return text;
}

void expect_one_line_error(const testing::CommandResult& result, const std::string& needle) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

// A two-layer DeepSeek-V3 model (layer 0 dense, layer 1 MoE) with one MTP layer.
std::string make_mtp_model(const testing::ScratchDir& scratch, const std::string& name, const std::string& extra) {
  const std::string dir = scratch / name;
  const testing::CommandResult made =
      run_command(moert() + " make-model --arch deepseek_v3 --preset tiny --num-layers 2 --hidden-size 128 "
                  "--expert-size 64 --vocab-size 256 --num-heads 4 --head-dim 32 --seed 5 --mtp-layers 1 " + extra +
                  " --out " + dir);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return dir;
}

struct Scored {
  std::vector<int32_t> sequence;  // prompt + generated
  io::NpyArray mtp_logits;        // [n - 1, V]
};

Scored score_with_mtp(const std::string& dir, const std::vector<int32_t>& prompt, int num_generate,
                      const std::string& prefix) {
  const testing::CommandResult scored = run_command(moert() + " score --model " + dir + " --tokens " + join(prompt) +
                                                    " -n " + std::to_string(num_generate) + " --threads 2 --out " +
                                                    prefix + " --mtp-out " + prefix);
  EXPECT_EQ(scored.exit_code, 0) << scored.err;
  Scored out;
  if (scored.exit_code != 0) return out;
  const nlohmann::json summary = nlohmann::json::parse(testing::read_file(prefix + ".json"));
  out.sequence = prompt;
  for (const auto& t : summary.at("gen_tokens")) out.sequence.push_back(t.get<int32_t>());
  Result<io::NpyArray> logits = io::read_npy(prefix + ".mtp_logits.npy");
  EXPECT_TRUE(logits.is_ok()) << logits.status().to_string();
  if (logits.is_ok()) out.mtp_logits = std::move(logits).value();
  return out;
}

// Share of the rows predicting a generated token (rows P-2 .. n-3) whose argmax is that token.
double generated_acceptance(const Scored& s, size_t prompt_length) {
  const int64_t vocab = s.mtp_logits.shape.at(1);
  int accepted = 0, rows = 0;
  for (size_t i = prompt_length - 2; i + 2 < s.sequence.size(); ++i, ++rows) {
    const double* row = s.mtp_logits.values.data() + static_cast<int64_t>(i) * vocab;
    accepted += (std::max_element(row, row + vocab) - row) == s.sequence[i + 2] ? 1 : 0;
  }
  return rows > 0 ? static_cast<double>(accepted) / rows : 0.0;
}

TEST(CliMtp, ScoreWritesTheMtpLogitsOfTheSharedReference) {
  const std::string ref = testing::shared_dir() + "/reference/deepseekv3-tiny-mtp";
  if (testing::shared_dir().empty() || !std::filesystem::exists(ref + "/hf")) GTEST_SKIP() << "no shared MTP case";
  testing::ScratchDir scratch("cli-mtp-ref");
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(ref + "/ref.json"));
  const std::vector<int32_t> prompt = expected.at("prompt_tokens").get<std::vector<int32_t>>();
  const Scored got = score_with_mtp(ref + "/hf", prompt, 32, scratch / "mtp");
  Result<io::NpyArray> want = io::read_npy(ref + "/ref.mtp_logits.npy");
  ASSERT_TRUE(want.is_ok());
  ASSERT_EQ(got.mtp_logits.shape, want->shape);
  ASSERT_EQ(got.mtp_logits.shape, (Shape{55, 1024}));
  std::vector<float> row(1024);
  for (int64_t r = 0; r < 55; ++r) {
    for (int64_t v = 0; v < 1024; ++v) row[static_cast<size_t>(v)] = static_cast<float>(got.mtp_logits.values[r * 1024 + v]);
    EXPECT_LT(testing::relative_l2_error(row.data(), want->values.data() + r * 1024, 1024), 1e-4) << "row " << r;
  }
  EXPECT_EQ(std::vector<int32_t>(got.sequence.begin() + 24, got.sequence.end()),
            expected.at("gen_tokens").get<std::vector<int32_t>>());
}

TEST(CliMtp, MakeModelWritesTheLayerWithReleaseNames) {
  testing::ScratchDir scratch("cli-mtp-make");
  const std::string dir = make_mtp_model(scratch, "m", "");
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(dir + "/config.json"));
  EXPECT_EQ(config.at("num_nextn_predict_layers"), 1);
  EXPECT_EQ(config.at("num_hidden_layers"), 2);
  Result<io::Checkpoint> checkpoint = io::Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  for (const char* name : {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
                           "shared_head.head.weight", "embed_tokens.weight", "input_layernorm.weight",
                           "self_attn.kv_a_proj_with_mqa.weight", "mlp.gate.weight", "mlp.gate.e_score_correction_bias",
                           "mlp.experts.0.down_proj.weight", "mlp.shared_experts.up_proj.weight"}) {
    EXPECT_NE(checkpoint->find(std::string("model.layers.2.") + name), nullptr) << name;
  }
  EXPECT_EQ(checkpoint->get("model.layers.2.eh_proj.weight")->shape, (Shape{128, 256}));
  // The release's copies: the same bytes as the main embedding and head.
  for (auto [copy, main] : {std::pair{"model.layers.2.embed_tokens.weight", "model.embed_tokens.weight"},
                            {"model.layers.2.shared_head.head.weight", "lm_head.weight"}}) {
    const TensorView a = checkpoint->get(copy).value(), b = checkpoint->get(main).value();
    ASSERT_EQ(a.shape, b.shape);
    EXPECT_EQ(0, std::memcmp(a.data, b.data, static_cast<size_t>(a.numel()) * 2)) << copy;
  }
  // Loadable: the MTP logits have one row per token but the last.
  const Scored scored = score_with_mtp(dir, {5, 9, 2, 7, 11, 3}, 4, scratch / "s");
  EXPECT_EQ(scored.mtp_logits.shape, (Shape{9, 256}));
  // The main model does not read the layer: scoring without --mtp-out gives the same tokens.
  const testing::CommandResult plain =
      run_command(moert() + " score --model " + dir + " --tokens 5,9,2,7,11,3 -n 4 --threads 2 --out " + (scratch / "p"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(testing::read_file(scratch / "p.gen_logits.npy"), testing::read_file(scratch / "s.gen_logits.npy"));
}

// The faithful MTP layer (docs/mtp.md §3) predicts the model's own tokens one position ahead;
// a random one almost never does.
TEST(CliMtp, FaithfulLayerPredictsTheModelsTokens) {
  testing::ScratchDir scratch("cli-mtp-faithful");
  const std::string faithful = make_mtp_model(scratch, "faithful", "--faithful-layers 1");
  const std::string random = make_mtp_model(scratch, "random", "");
  const std::vector<int32_t> prompt = {5, 9, 2, 7, 11, 3, 40, 17};
  const Scored f = score_with_mtp(faithful, prompt, 32, scratch / "f");
  const Scored r = score_with_mtp(random, prompt, 32, scratch / "r");
  ASSERT_FALSE(f.mtp_logits.values.empty() || r.mtp_logits.values.empty());
  const double faithful_rate = generated_acceptance(f, prompt.size());
  const double random_rate = generated_acceptance(r, prompt.size());
  std::printf("MTP acceptance on generated tokens: faithful %.3f, random %.3f\n", faithful_rate, random_rate);
  EXPECT_GE(faithful_rate, 0.6);
  EXPECT_LE(random_rate, 0.2);
}

TEST(CliMtp, Fp8QuantisationKeepsEhProjAndTheHeadInBf16) {
  testing::ScratchDir scratch("cli-mtp-fp8");
  const std::string bf16 = make_mtp_model(scratch, "m", "--faithful-layers 1");
  const std::string fp8 = scratch / "fp8";
  const testing::CommandResult quantized =
      run_command(moert() + " quantize --model " + bf16 + " --format fp8 --out " + fp8);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  Result<io::Checkpoint> checkpoint = io::Checkpoint::open(fp8);
  ASSERT_TRUE(checkpoint.is_ok());
  EXPECT_EQ(checkpoint->get("model.layers.2.eh_proj.weight")->dtype, DType::kBF16);
  EXPECT_EQ(checkpoint->get("model.layers.2.shared_head.head.weight")->dtype, DType::kBF16);
  EXPECT_EQ(checkpoint->find("model.layers.2.eh_proj.weight_scale_inv"), nullptr);
  EXPECT_EQ(checkpoint->get("model.layers.2.mlp.experts.0.up_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_NE(checkpoint->find("model.layers.2.self_attn.o_proj.weight_scale_inv"), nullptr);
  const std::vector<int32_t> prompt = {5, 9, 2, 7, 11, 3, 40, 17};
  const Scored scored = score_with_mtp(fp8, prompt, 16, scratch / "s");
  ASSERT_EQ(scored.mtp_logits.shape, (Shape{23, 256}));
  EXPECT_GE(generated_acceptance(scored, prompt.size()), 0.5);
}

TEST(CliMtp, BadRequestsFailInOneLine) {
  testing::ScratchDir scratch("cli-mtp-bad");
  expect_one_line_error(run_command(moert() + " make-model --arch qwen3_moe --mtp-layers 1 --out " + (scratch / "q")),
                        "has no multi-token prediction layers");
  expect_one_line_error(run_command(moert() + " make-model --arch deepseek_v3 --mtp-layers -1 --out " + (scratch / "n")),
                        "MTP layers = -1 must be >= 0");
  const std::string plain = scratch / "plain";
  ASSERT_EQ(run_command(moert() + " make-model --arch deepseek_v3 --num-layers 2 --hidden-size 64 --expert-size 64 "
                        "--vocab-size 256 --head-dim 16 --out " + plain).exit_code, 0);
  expect_one_line_error(run_command(moert() + " score --model " + plain + " --tokens 1,2,3 -n 2 --mtp-out " +
                                    (scratch / "x")),
                        "no multi-token prediction layer (config.json num_nextn_predict_layers = 0)");
  EXPECT_FALSE(std::filesystem::exists(scratch / "x.mtp_logits.npy"));
  // A config that announces the layer, a checkpoint without it (an MTP-less export).
  const std::string dir = make_mtp_model(scratch, "m", "");
  nlohmann::json config = nlohmann::json::parse(testing::read_file(dir + "/config.json"));
  const std::string stripped = scratch / "stripped";
  ASSERT_EQ(run_command(moert() + " make-model --arch deepseek_v3 --preset tiny --num-layers 2 --hidden-size 128 "
                        "--expert-size 64 --vocab-size 256 --num-heads 4 --head-dim 32 --seed 5 --out " + stripped).exit_code,
            0);
  testing::write_file(stripped + "/config.json", config.dump());
  expect_one_line_error(run_command(moert() + " score --model " + stripped + " --tokens 1,2,3 -n 2 --mtp-out " +
                                    (scratch / "y")),
                        "has no 'model.layers.2.eh_proj.weight'");
  // Without --mtp-out the same directory serves the main model as before.
  EXPECT_EQ(run_command(moert() + " score --model " + stripped + " --tokens 1,2,3 -n 2").exit_code, 0);
}

}  // namespace
}  // namespace moert
