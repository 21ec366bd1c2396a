// Quantized checkpoints end to end: `quantize_checkpoint` writes the ecosystem layouts,
// the loader reads them in place, the fused kernels agree with a dense model built from
// the dequantized weights, and eval reports the distance to the BF16 source.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_weight_layout.h"
#include "tests/support/laid_out_model.h"
#include "quant/cpu/quantized_linear.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "runtime/io/checkpoint.h"
#include "runtime/model/eval.h"
#include "runtime/model/generator.h"
#include "runtime/model/quantizer.h"
#include "runtime/model/weights.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

namespace fs = std::filesystem;

// A dense F32 copy of a quantized checkpoint: every packed matrix dequantized by the codecs.
void write_dequantized_copy(const std::string& quantized_dir, const std::string& out_dir, const ModelConfig& config) {
  io::Checkpoint checkpoint = io::Checkpoint::open(quantized_dir).value();
  std::vector<std::unique_ptr<Buffer>> owned;
  std::vector<io::NamedTensor> tensors;
  auto add_f32 = [&](const std::string& name, int64_t n, int64_t k, auto&& fill) {
    auto buffer = std::make_unique<Buffer>(DType::kF32, Shape{n, k});
    fill(buffer->data<float>());
    tensors.push_back({name, buffer->view()});
    owned.push_back(std::move(buffer));
  };
  for (const std::string& name : checkpoint.tensor_names()) {
    const TensorView view = checkpoint.get(name).value();
    auto scalar = [&](const std::string& key) { return checkpoint.get(key).value().as<const float>()[0]; };
    auto ends_with = [&](const std::string& suffix) {
      return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const std::string base = name.substr(0, name.rfind('.'));
    if (ends_with("_scales") || name.find(".weight_scale") != std::string::npos) continue;  // read with their data
    if (ends_with("_blocks")) {
      const std::string module = name.substr(0, name.size() - 7);
      const int64_t n = view.dim(0), k = view.dim(1) * 32;
      add_f32(module + ".weight", n, k, [&](float* out) {
        quant::mxfp4_dequantize(view.as<const uint8_t>(), checkpoint.get(module + "_scales").value().as<const uint8_t>(),
                                n, k, out);
      });
    } else if (view.dtype == DType::kU8 && view.ndim() == 2) {
      const int64_t n = view.dim(0), k = view.dim(1) * 2;
      add_f32(name, n, k, [&](float* out) {
        quant::nvfp4_dequantize(view.as<const uint8_t>(), checkpoint.get(base + ".weight_scale").value().as<const uint8_t>(),
                                scalar(base + ".weight_scale_2"), n, k, out);
      });
    } else if (view.dtype == DType::kF8E4M3) {
      const int64_t n = view.dim(0), k = view.dim(1);
      add_f32(name, n, k, [&](float* out) {
        quant::fp8_block_dequantize(view.as<const uint8_t>(),
                                    checkpoint.get(base + ".weight_scale_inv").value().as<const float>(), n, k, 128, 128, out);
      });
    } else {
      tensors.push_back({name, view});
    }
  }
  ASSERT_TRUE(io::write_sharded_checkpoint(out_dir, tensors, 1 << 30).is_ok());
  testing::write_file(out_dir + "/config.json", model_config_to_json(config).dump());
}

class QuantizedModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::ScratchDir("quantized");
    ModelShapeOverrides shape;
    shape.vocab_size = 256;
    shape.hidden_size = 128;
    shape.num_layers = 2;
    shape.moe_intermediate_size = 96;
    shape.head_dim = 32;
    ThreadPool pool(2);
    backend::CpuBackend cpu(pool);
    config_ = new ModelConfig(preset_model_config(find_architecture("glm4_moe"), "tiny", shape).value());
    ASSERT_TRUE(write_random_checkpoint(*config_, 4, scratch_->path() + "/bf16", 1 << 30, pool).is_ok());
  }
  static void TearDownTestSuite() {
    delete config_;
    delete scratch_;
  }
  static std::string dir(const std::string& name) { return scratch_->path() + "/" + name; }

  static testing::ScratchDir* scratch_;
  static ModelConfig* config_;
};
testing::ScratchDir* QuantizedModel::scratch_ = nullptr;
ModelConfig* QuantizedModel::config_ = nullptr;

std::vector<std::vector<int32_t>> eval_sequences() {
  std::vector<std::vector<int32_t>> sequences(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 20; ++i) sequences[s].push_back((s * 101 + i * 37) % 256);
  }
  return sequences;
}

TEST_F(QuantizedModel, EveryFormatLoadsAndMatchesItsDequantizedTwin) {
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::unique_ptr<LoadedModel> bf16 = load_model(dir("bf16")).value();
  ReferenceForward bf16_forward(bf16->config, bf16->weights, cpu);
  for (const char* format : {"nvfp4", "mxfp4", "fp8"}) {
    QuantizeOptions options;
    options.format = parse_weight_format(format).value();
    const std::string out = dir(format);
    Result<QuantizeReport> report = quantize_checkpoint(dir("bf16"), out, options);
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    // Laid out on the CPU backend, as `moert run` does (FP4 codes repacked, weights copied).
    Result<std::unique_ptr<LoadedModel>> model = testing::load_laid_out(out, cpu);
    ASSERT_TRUE(*model != nullptr) << format;
    const LayerWeights& moe_layer = (*model)->weights.layers[1];
    ASSERT_TRUE(moe_layer.moe.experts[0].up.weight.packed.has_value()) << format;
    EXPECT_EQ(moe_layer.moe.experts[0].up.weight.packed->format, options.format);
    EXPECT_TRUE(moe_layer.attention.q.weight.packed.has_value());
    EXPECT_FALSE((*model)->weights.lm_head.packed.has_value());  // kept by default
    const bool fp4 = options.format == quant::WeightFormat::kNvfp4 || options.format == quant::WeightFormat::kMxfp4;
    EXPECT_EQ(moe_layer.moe.experts[0].up.weight.packed->code_order,
              fp4 ? quant::preferred_fp4_code_order(options.format) : quant::Fp4CodeOrder::kCheckpoint)
        << format << ": FP4 codes are repacked at load into the order this CPU's path prefers";

    write_dequantized_copy(out, dir(std::string(format) + "-dequantized"), *config_);
    const std::unique_ptr<LoadedModel> twin = load_model(dir(std::string(format) + "-dequantized")).value();
    ReferenceForward packed_forward((*model)->config, (*model)->weights, cpu);
    ReferenceForward twin_forward(twin->config, twin->weights, cpu);
    const DistributionComparison same = compare_models(twin_forward, packed_forward, eval_sequences()).value();
    EXPECT_LT(same.mean_kl(), 1e-9) << format;
    EXPECT_EQ(same.top1_agreement(), 1.0) << format;
    // The checkpoint's code order computes the same bits as the repacked one.
    const std::unique_ptr<LoadedModel> unpacked = load_model(out).value();
    EXPECT_EQ(unpacked->weights.layers[1].moe.experts[0].up.weight.packed->code_order, quant::Fp4CodeOrder::kCheckpoint);
    ReferenceForward unpacked_forward(unpacked->config, unpacked->weights, cpu);
    EXPECT_EQ(compare_models(unpacked_forward, packed_forward, eval_sequences()).value().mean_kl(), 0.0) << format;
    // An expert-parallel rank repacks only the routed experts it computes (here the even ones);
    // the mix of orders computes the same bits too.
    const std::unique_ptr<LoadedModel> mixed = load_model(out).value();
    backend::cpu_weights::repack_fp4_codes(mixed->weights, [](int /*layer*/, int expert) { return expert % 2 == 0; });
    const auto order_of = [&](int expert) {
      return mixed->weights.layers[1].moe.experts[static_cast<size_t>(expert)].up.weight.packed->code_order;
    };
    EXPECT_EQ(order_of(0), moe_layer.moe.experts[0].up.weight.packed->code_order) << format;
    EXPECT_EQ(order_of(1), quant::Fp4CodeOrder::kCheckpoint) << format;
    EXPECT_EQ(mixed->weights.layers[1].attention.q.weight.packed->code_order,
              moe_layer.attention.q.weight.packed->code_order) << format;
    ReferenceForward mixed_forward(mixed->config, mixed->weights, cpu);
    EXPECT_EQ(compare_models(mixed_forward, packed_forward, eval_sequences()).value().mean_kl(), 0.0) << format;

    // --fp4-activations int8 marks the FP4 weights only; their logits move by the activation
    // rounding (docs/quant-formats.md §5b), far less than the weights' own quantization.
    const std::unique_ptr<LoadedModel> int8 =
        load_model(out, LoadOptions{.fp4_activations = quant::ActivationPrecision::kInt8}).value();
    EXPECT_EQ(int8->weights.layers[1].moe.experts[0].up.weight.packed->activations,
              fp4 ? quant::ActivationPrecision::kInt8 : quant::ActivationPrecision::kF32) << format;
    ReferenceForward int8_forward(int8->config, int8->weights, cpu);
    const DistributionComparison rounding = compare_models(packed_forward, int8_forward, eval_sequences()).value();
    if (fp4) {
      EXPECT_GT(rounding.mean_kl(), 0.0) << format;
      EXPECT_LT(rounding.mean_kl(), 1e-3) << format;
    } else {
      EXPECT_EQ(rounding.mean_kl(), 0.0) << format;
    }
    // --fp8-activations bf16 likewise marks the FP8 weights only (quant/cpu/bf16_linear.h).
    const std::unique_ptr<LoadedModel> bf16x =
        testing::load_laid_out(out, cpu, {.fp8_activations = quant::ActivationPrecision::kBf16});
    const bool fp8 = std::string(format).starts_with("fp8");
    EXPECT_EQ(bf16x->weights.layers[1].moe.experts[0].up.weight.packed->activations,
              fp8 ? quant::ActivationPrecision::kBf16 : quant::ActivationPrecision::kF32) << format;
    ReferenceForward bf16x_forward(bf16x->config, bf16x->weights, cpu);
    const DistributionComparison bf16_rounding = compare_models(packed_forward, bf16x_forward, eval_sequences()).value();
    if (fp8) {
      EXPECT_GT(bf16_rounding.mean_kl(), 0.0) << format;
      EXPECT_LT(bf16_rounding.mean_kl(), 1e-3) << format;
      std::printf("%s bf16 activations vs f32: mean KL %.2e, top-1 %.3f\n", format, bf16_rounding.mean_kl(),
                  bf16_rounding.top1_agreement());
    } else {
      EXPECT_EQ(bf16_rounding.mean_kl(), 0.0) << format;
    }

    const DistributionComparison drift = compare_models(bf16_forward, packed_forward, eval_sequences()).value();
    EXPECT_GT(drift.mean_kl(), 0.0) << format;
    EXPECT_LT(drift.mean_kl(), 0.5) << format;
    std::printf("%s vs bf16: mean KL %.5f, top-1 %.3f\n", format, drift.mean_kl(), drift.top1_agreement());
  }
}

// --bf16-activations bf16 marks the dense BF16 linear weights (attention, experts, shared
// experts, dense MLPs, lm_head), never the router; logits move by x's BF16 rounding only.
TEST_F(QuantizedModel, Bf16ActivationsForDenseBf16Weights) {
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  const std::unique_ptr<LoadedModel> exact = load_model(dir("bf16")).value();
  const std::unique_ptr<LoadedModel> rounded =
      testing::load_laid_out(dir("bf16"), cpu, {.bf16_activations = quant::ActivationPrecision::kBf16});
  const LayerWeights& layer = rounded->weights.layers[1];
  ASSERT_TRUE(layer.is_moe);
  for (const quant::LinearWeight* w : std::initializer_list<const quant::LinearWeight*>{
           &layer.attention.q.weight, &layer.attention.o.weight,
                                       &layer.moe.experts[0].up.weight, &layer.moe.experts[3].down.weight,
                                       &rounded->weights.lm_head}) {
    EXPECT_EQ(w->dense_activations, quant::ActivationPrecision::kBf16);
  }
  EXPECT_EQ(exact->weights.layers[1].moe.experts[0].up.weight.dense_activations, quant::ActivationPrecision::kF32);
  ReferenceForward exact_forward(exact->config, exact->weights, cpu);
  ReferenceForward rounded_forward(rounded->config, rounded->weights, cpu);
  const DistributionComparison moved = compare_models(exact_forward, rounded_forward, eval_sequences()).value();
  // This random GLM model's attention is unusually sensitive (its FP8 copy drifts by KL 0.06):
  // with the attention projections left exact the same comparison gives ~1e-5 (measured).
  EXPECT_GT(moved.mean_kl(), 0.0);
  EXPECT_LT(moved.mean_kl(), 0.05);
  EXPECT_GE(moved.top1_agreement(), 0.95);
  std::printf("bf16 weights, bf16 activations vs f32: mean KL %.2e, top-1 %.3f\n", moved.mean_kl(),
              moved.top1_agreement());
}

TEST_F(QuantizedModel, Nvfp4Layout) {
  QuantizeOptions options;
  const std::string out = dir("nvfp4-layout");
  const QuantizeReport report = quantize_checkpoint(dir("bf16"), out, options).value();
  EXPECT_NEAR(report.bits_per_quantized_weight(), 4.5, 4.5 * 0.05);
  const io::Checkpoint checkpoint = io::Checkpoint::open(out).value();
  const std::string p = "model.layers.1.mlp.experts.2.down_proj";
  EXPECT_EQ(checkpoint.find(p + ".weight")->dtype, DType::kU8);
  EXPECT_EQ(checkpoint.find(p + ".weight")->shape, (Shape{128, 48}));
  EXPECT_EQ(checkpoint.find(p + ".weight_scale")->dtype, DType::kF8E4M3);
  EXPECT_EQ(checkpoint.find(p + ".weight_scale")->shape, (Shape{128, 6}));
  EXPECT_EQ(checkpoint.find(p + ".weight_scale_2")->shape, Shape{});
  EXPECT_EQ(checkpoint.find("model.layers.1.mlp.gate.weight")->dtype, DType::kBF16);  // router kept
  const nlohmann::json hf_quant = nlohmann::json::parse(testing::read_file(out + "/hf_quant_config.json"));
  EXPECT_EQ(hf_quant["quantization"]["quant_algo"], "NVFP4");
  const nlohmann::json config = nlohmann::json::parse(testing::read_file(out + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "modelopt");
}

// File size on expert-sized matrices (512 x 512), where safetensors headers are negligible.
TEST_F(QuantizedModel, Nvfp4FileSizeIsFourAndAHalfBitsPerWeight) {
  ModelShapeOverrides shape;
  shape.vocab_size = 256;
  shape.hidden_size = 512;
  shape.num_layers = 2;
  shape.moe_intermediate_size = 512;
  ThreadPool pool(2);
  const ModelConfig config = preset_model_config(find_architecture("qwen3_moe"), "tiny", shape).value();
  ASSERT_TRUE(write_random_checkpoint(config, 4, dir("size-bf16"), 1 << 30, pool).is_ok());
  const std::string out = dir("size-nvfp4");
  const QuantizeReport report = quantize_checkpoint(dir("size-bf16"), out, QuantizeOptions{}).value();
  const io::Checkpoint checkpoint = io::Checkpoint::open(out).value();
  // The bytes beyond the kept tensors are within 5% of 4.5 bits per quantized weight.: the bytes beyond the kept tensors are within 5% of 4.5 bits per quantized weight.
  int64_t total_bytes = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.path().extension() == ".safetensors") total_bytes += static_cast<int64_t>(fs::file_size(entry.path()));
  }
  const io::Checkpoint source = io::Checkpoint::open(dir("size-bf16")).value();
  int64_t kept_bytes = 0;
  for (const std::string& name : checkpoint.tensor_names()) {
    const io::TensorInfo* info = checkpoint.find(name);
    const bool quantized_part = info->dtype == DType::kU8 || info->dtype == DType::kF8E4M3 ||
                                name.find("weight_scale_2") != std::string::npos;
    if (!quantized_part) kept_bytes += static_cast<int64_t>(info->end - info->begin);
  }
  const double bits = 8.0 * static_cast<double>(total_bytes - kept_bytes) / static_cast<double>(report.quantized_weights);
  EXPECT_NEAR(bits, 4.5, 4.5 * 0.05);
  EXPECT_LT(total_bytes, static_cast<int64_t>(source.total_bytes()));
}

TEST_F(QuantizedModel, ExcludePatternsAndErrors) {
  QuantizeOptions options;
  options.format = quant::WeightFormat::kFp8Block;
  options.exclude_patterns = {"*self_attn*"};
  const QuantizeReport report = quantize_checkpoint(dir("bf16"), dir("fp8-no-attn"), options).value();
  const std::unique_ptr<LoadedModel> model = load_model(dir("fp8-no-attn")).value();
  EXPECT_FALSE(model->weights.layers[0].attention.q.weight.packed.has_value());
  EXPECT_TRUE(model->weights.layers[0].dense_mlp.up.weight.packed.has_value());
  EXPECT_GE(report.excluded.size(), 8u);  // 4 projections x 2 layers, plus lm_head and routers

  // Quantizing a quantized checkpoint, unknown formats, and inconsistent layouts are errors.
  EXPECT_NE(quantize_checkpoint(dir("fp8-no-attn"), dir("again"), options).status().message().find("already quantized"),
            std::string::npos);
  EXPECT_NE(quantize_checkpoint(dir("bf16"), dir("bf16") + "/", options).status().message().find("must differ"),
            std::string::npos);
  EXPECT_NE(parse_weight_format("int3").status().message().find("unknown format 'int3'"), std::string::npos);
  QuantizeOptions nvfp4;
  quantize_checkpoint(dir("bf16"), dir("nvfp4-broken"), nvfp4).value();
  nlohmann::json config = nlohmann::json::parse(testing::read_file(dir("nvfp4-broken") + "/config.json"));
  config["moe_intermediate_size"] = 80;  // expert matrices no longer match their packed shapes
  testing::write_file(dir("nvfp4-broken") + "/config.json", config.dump());
  Result<std::unique_ptr<LoadedModel>> broken = load_model(dir("nvfp4-broken"));
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("model.layers.1.mlp.experts.0.gate_proj.weight' has shape [96, 64], expected [80, 64]"),
            std::string::npos)
      << broken.status().message();
}

// Overwrites bytes [byte_offset, byte_offset + bytes.size()) of tensor `name`'s data in a
// checkpoint directory (single file or sharded), in place.
void poke_tensor_bytes(const std::string& dir, const std::string& name, int64_t byte_offset, const std::string& bytes) {
  std::string file = dir + "/" + io::kSingleFileName;
  if (!fs::exists(file)) {
    const nlohmann::json index = nlohmann::json::parse(testing::read_file(dir + "/" + io::kIndexFileName));
    file = dir + "/" + index["weight_map"][name].get<std::string>();
  }
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;
  stream.read(reinterpret_cast<char*>(&header_bytes), 8);  // little-endian, as this host
  std::string header(header_bytes, '\0');
  stream.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const int64_t begin = nlohmann::json::parse(header)[name]["data_offsets"][0].get<int64_t>();
  stream.seekp(static_cast<std::streamoff>(8 + header_bytes + begin + byte_offset));
  stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(stream.good()) << file;
}

// A block scale of 0 is legal only over a block of +-0 codes (docs/quant-formats.md, 3c):
// otherwise the load stops naming the scale tensor, the block and the first non-zero code,
// for FP8 block scales and NVFP4 block scales alike.
TEST_F(QuantizedModel, ZeroBlockScalesNeedZeroCodes) {
  const std::string tensor = "model.layers.1.mlp.experts.0.up_proj";
  const std::string zero_f32(4, '\0');
  for (const char* format : {"fp8", "nvfp4"}) {
    QuantizeOptions options;
    options.format = parse_weight_format(format).value();
    const std::string out = dir(std::string(format) + "-zero-scale");
    ASSERT_TRUE(quantize_checkpoint(dir("bf16"), out, options).is_ok());
    const bool fp8 = std::string(format) == "fp8";
    const std::string scale = tensor + (fp8 ? ".weight_scale_inv" : ".weight_scale");
    poke_tensor_bytes(out, scale, 0, fp8 ? zero_f32 : std::string(1, '\0'));  // block [0, 0]
    Result<std::unique_ptr<LoadedModel>> model = load_model(out);
    ASSERT_FALSE(model.is_ok()) << format;
    const std::string expected = fp8 ? "tensor '" + scale + "': scale block [0, 0] (rows 0..95, columns 0..127) is 0 but code"
                                     : "tensor '" + scale + "': scale block [0, 0] (rows 0..0, columns 0..15) is 0 but code";
    EXPECT_NE(model.status().message().find(expected), std::string::npos) << model.status().message();
    // The same zero scale over all-zero codes (an all-zero block) loads.
    const int64_t block_code_bytes = fp8 ? 96 * 128 : 8;  // FP8: the one block is the whole [96, 128] matrix
    poke_tensor_bytes(out, tensor + ".weight", 0, std::string(static_cast<size_t>(block_code_bytes), '\0'));
    model = load_model(out);
    EXPECT_TRUE(model.is_ok()) << format << ": " << model.status().to_string();
  }
}

}  // namespace
}  // namespace moert
