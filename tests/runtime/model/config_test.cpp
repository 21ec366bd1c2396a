#include "runtime/model/config.h"
#include "runtime/model/generator.h"

#include <gtest/gtest.h>

#include <functional>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace moert {
namespace {

using nlohmann::json;

json qwen3_json() {
  return json::parse(R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 1024, "hidden_size": 256,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 1024, "moe_intermediate_size": 512, "num_experts": 8, "num_experts_per_tok": 2,
    "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [1], "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "rope_scaling": null, "eos_token_id": 1021})");
}

TEST(ModelConfig, Qwen3ResolvesLayerKindsAndRouter) {
  Result<ModelConfig> c = parse_model_config(qwen3_json());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, find_architecture("qwen3_moe"));
  EXPECT_EQ(c->layer_is_moe, (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->router.norm_topk_prob);
  EXPECT_EQ(c->router.score_func, experts::ScoreFunc::kSoftmax);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->shared_expert, SharedExpertKind::kNone);
  EXPECT_EQ(c->eos_token_id, 1021);
}

TEST(ModelConfig, UnknownArchitectureIsNamed) {
  json j = qwen3_json();
  j["architectures"] = {"LlamaForCausalLM"};
  Result<ModelConfig> c = parse_model_config(j);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(c.status().message().find("unknown architecture 'LlamaForCausalLM'"), std::string::npos);
  EXPECT_NE(c.status().message().find("Qwen3MoeForCausalLM"), std::string::npos);
}

TEST(ModelConfig, BadValuesAreNamed) {
  struct Case {
    const char* key;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {"num_key_value_heads", 3, "'num_key_value_heads' = 3 must divide 'num_attention_heads' = 4"},
      {"hidden_size", 0, "'hidden_size' = 0 must be > 0"},
      {"num_experts_per_tok", 9, "top_k"},
      {"vocab_size", "big", "'vocab_size' = \"big\" must be an integer"},
      {"rope_scaling", json{{"type", "yarn"}}, "'rope_scaling'"},
  };
  for (const Case& test : cases) {
    json j = qwen3_json();
    j[test.key] = test.value;
    Result<ModelConfig> c = parse_model_config(j);
    ASSERT_FALSE(c.is_ok()) << test.key;
    EXPECT_NE(c.status().message().find(test.expected), std::string::npos) << c.status().message();
  }
  json missing = qwen3_json();
  missing.erase("num_experts");
  EXPECT_NE(parse_model_config(missing).status().message().find("lacks 'num_experts'"), std::string::npos);
}

// rope_scaling values that need a companion (docs/rope.md): a type without the fields it
// requires, a scaling field without a type or under a type that does not read it, and types
// that disagree are refused by name; what transformers accepts for yarn and default parses.
TEST(ModelConfig, RopeScalingFieldsNeedTheirCompanions) {
  struct Case {
    json scaling;
    const char* expected;  // "" : parses
  };
  const Case cases[] = {
      {{{"rope_type", "yarn"}, {"original_max_position_embeddings", 4096}},
       "config.json 'rope_scaling' type \"yarn\" lacks 'factor', which it requires"},
      {{{"type", "yarn"}, {"factor", nullptr}}, "type \"yarn\" lacks 'factor'"},
      {{{"factor", 4.0}, {"original_max_position_embeddings", 4096}},
       "config.json 'rope_scaling' has 'factor' = 4.0 but no 'rope_type' saying which scaling it is for"},
      {{{"rope_type", "default"}, {"factor", 4.0}}, "type \"default\" does not use 'factor' = 4.0"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1.0}}, "type \"yarn\" does not use 'low_freq_factor'"},
      {{{"rope_type", "yarn"}, {"type", "linear"}, {"factor", 4.0}}, "has 'rope_type' \"yarn\" and 'type' \"linear\""},
      {{{"rope_type", "llama3"}, {"factor", 8.0}}, "type \"llama3\" is not supported (default, yarn)"},
      {{{"rope_type", "yarn"}, {"factor", 0.5}}, "'factor' = 0.5 must be finite and >= 1"},
      {{{"rope_type", 3}}, "'rope_type' = 3 must be a string"},
      {{{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}, "holds 'partial_rotary_factor' = 0.5"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}}, ""},
      {{{"type", "yarn"}, {"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 32}, {"mscale", 1.0}}, ""},
      {{{"rope_type", "default"}, {"rope_theta", 1e6}}, ""},
      {json::object(), ""},
  };
  for (const Case& test : cases) {
    json j = qwen3_json();
    j["rope_scaling"] = test.scaling;
    Result<ModelConfig> c = parse_model_config(j);
    if (std::string(test.expected).empty()) {
      EXPECT_TRUE(c.is_ok()) << test.scaling << ": " << c.status().to_string();
    } else {
      ASSERT_FALSE(c.is_ok()) << test.scaling;
      EXPECT_NE(c.status().message().find(test.expected), std::string::npos) << c.status().message();
    }
  }
  json v5 = qwen3_json();
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 2.0}, {"rope_theta", 5e5}};
  const ModelConfig c = parse_model_config(v5).value();
  EXPECT_EQ(c.rope_scaling.kind, attention::RopeScaling::Kind::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_positions, c.max_position_embeddings);  // transformers' fallback
  EXPECT_EQ(c.rope_theta, 5e5);
}

// Integers are the user's numbers in every message: 2^64 - 1 is not -1, 2^32 + 5 is not 5.
TEST(ModelConfig, IntegersAreReportedAsWritten) {
  struct Case {
    const char* key;
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"eos_token_id", "18446744073709551615", "'eos_token_id' = 18446744073709551615 is outside [0, 2147483647]"},
      {"bos_token_id", "4294967301", "'bos_token_id' = 4294967301 is outside [0, 2147483647]"},
      {"eos_token_id", "[4294967301, 2]", "'eos_token_id'[0] = 4294967301 is outside"},
      {"mlp_only_layers", "[18446744073709551615]", "'mlp_only_layers' entry = 18446744073709551615 is outside"},
      {"num_experts", "100000000000000000000000", "'num_experts' is an integer out of range"},
  };
  for (const Case& test : cases) {
    json j = qwen3_json();
    j[test.key] = json::parse(test.value);
    Result<ModelConfig> c = parse_model_config(j);
    ASSERT_FALSE(c.is_ok()) << test.key << " = " << test.value;
    EXPECT_NE(c.status().message().find(test.expected), std::string::npos) << c.status().message();
  }
}

TEST(ModelConfig, SharedReferenceConfigsParse) {
  if (testing::reference_model_names().empty()) GTEST_SKIP() << "no shared reference models";
  for (const std::string& name : testing::reference_model_names()) {
    Result<ModelConfig> c = load_model_config(testing::shared_dir() + "/reference/" + name + "/hf");
    ASSERT_TRUE(c.is_ok()) << name << ": " << c.status().to_string();
    const bool hybrid = name == "qwen35moe-tiny" || name == "qwen3next-tiny";  // the 2026 cases are narrower
    EXPECT_EQ(c->hidden_size, hybrid || name == "glm5dsa-tiny" ? 128 : 256) << name;
    if (hybrid) {  // docs/gated-deltanet.md; Qwen3.5's keys under text_config
      EXPECT_EQ(c->layer_is_linear_attention, (std::vector<bool>{true, true, true, false})) << name;
      const LinearAttentionDims& l = c->linear_attention;
      EXPECT_EQ(std::vector<int>({l.num_key_heads, l.key_head_dim, l.num_value_heads, l.value_head_dim, l.conv_width}),
                std::vector<int>({2, 32, 4, 24, 4}))
          << name;
      EXPECT_EQ(l.grouped_projections, name == "qwen3next-tiny");
      EXPECT_EQ(c->fused_gate_up_experts, name == "qwen35moe-tiny");
      EXPECT_EQ(c->head_dim, 48);
      EXPECT_EQ(c->rotary_dim, 12);  // partial_rotary_factor 0.25 (in rope_parameters for Qwen3.5)
      EXPECT_EQ(c->rope_theta, 1e7);
      EXPECT_TRUE(c->attention_output_gate && c->norm_weights_offset_by_one && c->qk_norm);
      EXPECT_EQ(c->shared_expert, SharedExpertKind::kSigmoidGated);
      EXPECT_TRUE(c->router.norm_topk_prob);
      EXPECT_EQ(c->eos_token_id, 1021);
    }
    if (name == "glm5dsa-tiny") {  // docs/sparse-attention.md
      EXPECT_EQ(c->dsa.index_topk, 8);
      EXPECT_EQ(c->dsa.index_n_heads, 8);
      EXPECT_EQ(c->dsa.index_head_dim, 32);
      EXPECT_EQ(c->dsa.rope_pairing, attention::RopePairing::kInterleaved);
      EXPECT_EQ(c->rope_pairing, attention::RopePairing::kInterleaved);
      EXPECT_FLOAT_EQ(c->mla.norm_eps, 1e-6f);
      EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
      EXPECT_FLOAT_EQ(c->attention_softmax_scale, 1.0f / std::sqrt(32.0f));
      EXPECT_EQ(c->rope_scaling.kind, attention::RopeScaling::Kind::kNone);
    }
    if (name == "glm4moe-tiny") {
      EXPECT_EQ(c->router.score_func, experts::ScoreFunc::kSigmoid);
      EXPECT_EQ(c->router.n_group, 2);
      EXPECT_EQ(c->router.topk_group, 1);
      EXPECT_FLOAT_EQ(c->router.routed_scaling_factor, 2.5f);
      EXPECT_EQ(c->rotary_dim, 32);
      EXPECT_EQ(c->layer_is_moe, (std::vector<bool>{false, true, true, true}));
      EXPECT_EQ(c->shared_expert, SharedExpertKind::kUngated);
      EXPECT_EQ(c->shared_intermediate_size, 512);
      EXPECT_EQ(c->dense_intermediate_size, 1024);
      EXPECT_TRUE(c->qkv_bias && c->qk_norm);
    }
    if (name == "qwen2moe-tiny") {
      EXPECT_EQ(c->shared_expert, SharedExpertKind::kSigmoidGated);
      EXPECT_FALSE(c->router.norm_topk_prob);
      EXPECT_TRUE(c->qkv_bias);
    }
    if (name == "mixtral-tiny") EXPECT_TRUE(c->router.norm_topk_prob);
  }
}

// Qwen3.5 / Qwen3-Next configs with a bad key: one message naming it (docs/gated-deltanet.md).
TEST(ModelConfig, LinearAttentionConfigErrorsNameTheKey) {
  const json qwen35 = model_config_to_json(preset_model_config(find_architecture("qwen3_5_moe"), "tiny").value());
  ASSERT_TRUE(qwen35.contains("text_config"));
  ASSERT_TRUE(parse_model_config(qwen35).is_ok());
  struct Case {
    std::function<void(json&)> edit;
    const char* expected;
  };
  const Case cases[] = {
      {[](json& j) { j.erase("text_config"); }, "lacks the 'text_config' object"},
      {[](json& j) { j["text_config"]["layer_types"].erase(0); }, "'layer_types' must list one type per layer (4"},
      {[](json& j) { j["text_config"]["layer_types"][1] = "sliding_attention"; }, "'layer_types'[1] = \"sliding_attention\""},
      {[](json& j) { j["text_config"]["linear_num_key_heads"] = 3; }, "'linear_num_key_heads' = 3 must divide"},
      {[](json& j) { j["text_config"].erase("linear_value_head_dim"); }, "lacks 'linear_value_head_dim'"},
      {[](json& j) { j["text_config"]["linear_conv_kernel_dim"] = 0; }, "'linear_conv_kernel_dim' = 0 must be > 0"},
      {[](json& j) { j["text_config"].erase("head_dim"); }, "lacks 'head_dim'"},
      {[](json& j) { j["text_config"]["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}; },
       "and 'rope_parameters' 'partial_rotary_factor' = 0.5 disagree"},
  };
  for (const Case& test : cases) {
    json j = qwen35;
    test.edit(j);
    const Result<ModelConfig> c = parse_model_config(j);
    ASSERT_FALSE(c.is_ok()) << test.expected;
    EXPECT_NE(c.status().message().find(test.expected), std::string::npos) << c.status().message();
  }
  // Without layer_types: every full_attention_interval-th layer is full.
  json interval = qwen35;
  interval["text_config"].erase("layer_types");
  interval["text_config"]["full_attention_interval"] = 2;
  EXPECT_EQ(parse_model_config(interval).value().layer_is_linear_attention, (std::vector<bool>{true, false, true, false}));
}

// DeepSeek Sparse Attention's keys (docs/sparse-attention.md): each bad value is one error
// naming its key; V3.2's indexer RoPE is rotate-half unless the config says otherwise.
TEST(ModelConfig, SparseAttentionKeysAreCheckedAndNamed) {
  for (const char* name : {"glm_moe_dsa", "deepseek_v32"}) {
    const json good = model_config_to_json(preset_model_config(find_architecture(name), "tiny").value());
    ASSERT_TRUE(parse_model_config(good).is_ok()) << name;
    const struct {
      const char* key;
      const char* value;
      const char* expected;
    } cases[] = {
        {"index_topk", "0", "'index_topk' = 0 must be > 0"},
        {"index_n_heads", "-2", "'index_n_heads' = -2 must be > 0"},
        {"index_head_dim", "8", "'index_head_dim' = 8 must be >= 'qk_rope_head_dim'"},
        {"index_topk", "null", "lacks 'index_topk'"},
        {"indexer_rope_interleave", "3", "'indexer_rope_interleave' must be true or false"},
        {"indexer_types", "[\"full\", \"shared\"]", "'indexer_types' must be a list of 4 entries"},
        {"indexer_types", "[\"full\", \"half\", \"full\", \"full\"]", "'indexer_types' has \"half\""},
        {"indexer_types", "[\"shared\", \"full\", \"full\", \"full\"]", "layer 0 \"shared\""},
        {"index_topk_freq", "0", "'index_topk_freq' = 0 must be > 0"},
        {"q_lora_rank", "null", "'q_lora_rank' must be > 0 with a lightning indexer"},
    };
    for (const auto& test : cases) {
      json j = good;
      if (std::string(test.value) == "null" && std::string(test.key) == "index_topk") {
        j.erase(test.key);
      } else {
        j[test.key] = json::parse(test.value);
      }
      Result<ModelConfig> c = parse_model_config(j);
      ASSERT_FALSE(c.is_ok()) << name << " " << test.key << " = " << test.value;
      EXPECT_NE(c.status().message().find(test.expected), std::string::npos) << c.status().message();
    }
    // GLM-5.2's schedule (models-2026.md §3.3): full iff max(L - offset + 1, 0) % freq == 0.
    json glm52 = good;
    glm52["index_topk_freq"] = 4;
    glm52["index_skip_topk_offset"] = 3;
    Result<ModelConfig> scheduled = parse_model_config(glm52);
    ASSERT_TRUE(scheduled.is_ok()) << scheduled.status().to_string();
    EXPECT_EQ(scheduled->dsa.shared_layers, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(model_config_to_json(*scheduled)["indexer_types"], json({"full", "full", "full", "shared"}));
    EXPECT_EQ(parse_model_config(model_config_to_json(*scheduled))->dsa.shared_layers, scheduled->dsa.shared_layers);
    json unsaid = good;
    unsaid.erase("indexer_rope_interleave");
    EXPECT_EQ(parse_model_config(unsaid)->dsa.rope_pairing, std::string(name) == "glm_moe_dsa"
                                                                 ? attention::RopePairing::kInterleaved
                                                                 : attention::RopePairing::kRotateHalf);
  }
}

TEST(ModelConfig, JsonRoundTripForEveryArchitecture) {
  for (const ArchSpec* arch : registered_architectures()) {
    json j = qwen3_json();
    ModelConfig base = parse_model_config(j).value();
    base.arch = arch;
    if (arch == find_architecture("glm4_moe")) {
      base.router.score_func = experts::ScoreFunc::kSigmoid;
      base.router.n_group = 2;
      base.router.routed_scaling_factor = 2.5f;
      base.router_has_correction_bias = true;
      base.rotary_dim = 32;
      base.shared_expert = SharedExpertKind::kUngated;
      base.shared_intermediate_size = 512;
      base.layer_is_moe = {false, true, true, true};
    }
    if (arch == find_architecture("qwen2_moe")) {
      base.shared_expert = SharedExpertKind::kSigmoidGated;
      base.shared_intermediate_size = 256;
      base.qkv_bias = true;
      base.qk_norm = false;
    }
    if (arch == find_architecture("mixtral")) {
      base.qk_norm = false;
      base.layer_is_moe.assign(4, true);
      base.dense_intermediate_size = base.moe_intermediate_size;
    }
    if (arch == find_architecture("glm4_moe")) base.qk_norm = true;
    if (arch == find_architecture("gpt_oss")) {
      base.qk_norm = false;
      base.qkv_bias = true;
      base.layer_is_moe.assign(4, true);
      base.dense_intermediate_size = base.moe_intermediate_size;
      base.sliding_windows = {16, 0, 16, 0};
      base.rope_scaling.kind = attention::RopeScaling::Kind::kYarn;
      base.rope_scaling.factor = 32.0;
      base.rope_scaling.original_max_positions = 256.0;
      base.rope_scaling.truncate = false;
    }
    if (arch == find_architecture("deepseek_v3") || arch == find_architecture("glm_moe_dsa") ||
        arch == find_architecture("deepseek_v32") || arch == find_architecture("qwen3_next") ||
        arch == find_architecture("qwen3_5_moe") || arch == find_architecture("kimi_k25")) {
      base = preset_model_config(arch, "tiny").value();
    }
    Result<ModelConfig> again = parse_model_config(model_config_to_json(base));
    ASSERT_TRUE(again.is_ok()) << architecture_name(arch) << ": " << again.status().to_string();
    EXPECT_EQ(model_config_to_json(again.value()), model_config_to_json(base)) << architecture_name(arch);
    EXPECT_EQ(again->layer_is_moe, base.layer_is_moe);
    EXPECT_EQ(again->rotary_dim, base.rotary_dim);
    EXPECT_EQ(again->shared_expert, base.shared_expert);
  }
}

}  // namespace
}  // namespace moert

namespace moert {
namespace {

// gpt-oss: sliding layers and window, YaRN, the clamped SwiGLU and the stacked-expert flags
// come from config.json; bad layer kinds are refused by name.
TEST(ModelConfig, GptOssLayerKindsYarnAndExperts) {
  nlohmann::json j = model_config_to_json(preset_model_config(find_architecture("qwen3_moe"), "tiny").value());
  j["architectures"] = {"GptOssForCausalLM"};
  j["model_type"] = "gpt_oss";
  j["num_local_experts"] = 8;
  j["intermediate_size"] = 64;
  j["sliding_window"] = 16;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  j["num_hidden_layers"] = 4;
  j["swiglu_limit"] = 5.0;
  j["attention_bias"] = true;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 256},
                       {"truncate", false}};
  const ModelConfig c = parse_model_config(j).value();
  EXPECT_EQ(c.sliding_windows, (std::vector<int>{16, 0, 16, 0}));
  EXPECT_EQ(c.layers[0].attention, AttentionKind::kSlidingWindow);
  EXPECT_EQ(c.layers[0].sliding_window, 16);
  EXPECT_EQ(c.layers[1].attention, AttentionKind::kFull);
  EXPECT_EQ(c.rope_scaling.kind, attention::RopeScaling::Kind::kYarn);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.expert_activation.kind, experts::GluActivation::Kind::kClampedSwiglu);
  EXPECT_EQ(c.expert_activation.limit, 5.0f);
  EXPECT_TRUE(c.attention_sinks && c.router_bias && c.expert_bias && c.stacked_experts && c.o_bias);
  nlohmann::json bad = j;
  bad["layer_types"][2] = "chunked_attention";
  EXPECT_NE(parse_model_config(bad).status().message().find("\"chunked_attention\""), std::string::npos);
  bad = j;
  bad["rope_scaling"]["rope_type"] = "longrope";
  EXPECT_EQ(parse_model_config(bad).status().code(), StatusCode::kUnsupported);
  bad = j;
  bad.erase("sliding_window");
  EXPECT_FALSE(parse_model_config(bad).is_ok());
}

}  // namespace
}  // namespace moert

namespace moert {
namespace {

// DeepSeek-V3 as released (docs/mla.md): latent attention dims, the absorbed geometry the
// kernels see, interleaved RoPE, the softmax scale with YaRN's mscale squared, the router
// and dense layers; q LoRA may be null; other routers are refused by name.
nlohmann::json deepseek_v3_release_json() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "deepseek_v3"}, {"vocab_size", 129280},
          {"hidden_size", 7168}, {"intermediate_size", 18432}, {"moe_intermediate_size", 2048},
          {"num_hidden_layers", 61}, {"num_attention_heads", 128}, {"num_key_value_heads", 128},
          {"n_shared_experts", 1}, {"n_routed_experts", 256}, {"routed_scaling_factor", 2.5}, {"kv_lora_rank", 512},
          {"q_lora_rank", 1536}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"qk_nope_head_dim", 128},
          {"n_group", 8}, {"topk_group", 4}, {"num_experts_per_tok", 8}, {"first_k_dense_replace", 3},
          {"norm_topk_prob", true}, {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"},
          {"max_position_embeddings", 163840}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000},
          {"rope_scaling", {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 1.0},
                            {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096}, {"type", "yarn"}}},
          {"num_nextn_predict_layers", 1}, {"tie_word_embeddings", false}};
}

TEST(ModelConfig, DeepseekV3ReleaseConfig) {
  const ModelConfig c = parse_model_config(deepseek_v3_release_json()).value();
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 576);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_pairing, attention::RopePairing::kInterleaved);
  EXPECT_NEAR(c.attention_softmax_scale, 0.1352338, 1e-6);  // 192^-0.5 * (0.1 ln 40 + 1)^2
  EXPECT_EQ(c.router.n_group, 8);
  EXPECT_EQ(c.router.topk_group, 4);
  EXPECT_EQ(c.router.score_func, experts::ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.router_has_correction_bias);
  EXPECT_EQ(c.shared_expert, SharedExpertKind::kUngated);
  EXPECT_EQ(c.shared_intermediate_size, 2048);
  for (int layer = 0; layer < 61; ++layer) {
    EXPECT_EQ(c.layer_is_moe[static_cast<size_t>(layer)], layer >= 3) << layer;
    EXPECT_EQ(c.layers[static_cast<size_t>(layer)].attention, AttentionKind::kMla);
  }
  // Round trip writes what Hugging Face writes.
  const nlohmann::json again = model_config_to_json(c);
  EXPECT_EQ(again.at("num_key_value_heads"), 128);
  EXPECT_EQ(again.at("head_dim"), 64);
  EXPECT_EQ(model_config_to_json(parse_model_config(again).value()), again);

  nlohmann::json lite = deepseek_v3_release_json();  // DeepSeek-V2-Lite-style: no q LoRA, no YaRN
  lite["q_lora_rank"] = nullptr;
  lite["rope_scaling"] = nullptr;
  lite["rope_interleave"] = false;
  const ModelConfig plain = parse_model_config(lite).value();
  EXPECT_EQ(plain.mla.q_lora_rank, 0);
  EXPECT_EQ(plain.rope_pairing, attention::RopePairing::kRotateHalf);
  EXPECT_NEAR(plain.attention_softmax_scale, 1.0 / std::sqrt(192.0), 1e-7);

  for (auto [key, value] : {std::pair{"scoring_func", "softmax"}, {"topk_method", "greedy"}}) {
    nlohmann::json bad = deepseek_v3_release_json();
    bad[key] = value;
    const Status status = parse_model_config(bad).status();
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << key;
    EXPECT_NE(status.message().find(key), std::string::npos) << status.message();
  }
  nlohmann::json missing = deepseek_v3_release_json();
  missing.erase("kv_lora_rank");
  EXPECT_NE(parse_model_config(missing).status().message().find("lacks 'kv_lora_rank'"), std::string::npos);
}

}  // namespace
}  // namespace moert
