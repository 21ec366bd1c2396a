#include "runtime/model/quantizer.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/regular_file.h"
#include "core/strict_json.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "runtime/io/checkpoint.h"
#include "runtime/model/arch/arch.h"
#include "runtime/model/weights.h"

namespace moert {
namespace {

using nlohmann::json;

// Kept in full precision (globs over module names, the checkpoint architecture's): the
// embedding, lm_head (unless `quantize_lm_head`), the routers and the shared-expert gates; the
// DeepSeek MTP layers' embed_tokens, eh_proj and shared_head.head (BF16 in the FP8 release;
// docs/mtp.md), their blocks quantised as any layer; the linear-attention gate inputs b and a
// (BF16 in the Qwen3.5 FP8 releases) and Qwen3-Next's fused, grouped projections (whose blocks
// would span the groups the loader takes apart; docs/gated-deltanet.md).
std::vector<std::string> default_excludes(const TensorNames& n, bool quantize_lm_head) {
  std::vector<std::string> excludes = {
      n.embed_tokens, n.every_layer({n.moe_block, n.router}), n.every_layer({n.moe_block, n.shared_expert_gate}),
      n.every_layer({n.mtp_embed_tokens}), n.every_layer({n.mtp_eh_proj}), n.every_layer({n.mtp_head}),
      // The DSA indexer's head weights stay BF16 in every FP8 release (docs/sparse-attention.md).
      n.every_layer({n.attention, n.indexer, n.indexer_weights_proj})};
  for (const char* projection : {n.in_proj_a, n.in_proj_b, n.in_proj_ba, n.in_proj_qkvz}) {
    excludes.push_back(n.every_layer({n.linear_attention, projection}));
  }
  if (!quantize_lm_head) excludes.push_back(n.lm_head);
  return excludes;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How the stacked experts' names end (docs/gpt-oss.md): ".experts.gate_up_proj", ".experts.down_proj".
std::array<std::string, 2> stacked_expert_suffixes(const TensorNames& n) {
  const std::string experts = std::string(".") + n.experts + ".";
  return {experts + n.stacked_experts[0], experts + n.stacked_experts[1]};
}

// A stacked experts tensor: [E, in, out] in the BF16 layout.
bool is_stacked_experts(const std::array<std::string, 2>& suffixes, const std::string& name, const TensorView& view) {
  return view.ndim() == 3 && (ends_with(name, suffixes[0]) || ends_with(name, suffixes[1]));
}

// Owns the bytes of every output tensor until the shards are written.
class OutputTensors {
 public:
  void add_copy(const std::string& name, const TensorView& view) { named_.push_back({name, view}); }
  template <typename T>
  void add_owned(const std::string& name, DType dtype, Shape shape, const std::vector<T>& values) {
    auto buffer = std::make_unique<Buffer>(dtype, std::move(shape));
    std::memcpy(buffer->view().data, values.data(), values.size() * sizeof(T));
    named_.push_back({name, buffer->view()});
    owned_.push_back(std::move(buffer));
  }
  const std::vector<io::NamedTensor>& named() const { return named_; }

 private:
  std::vector<io::NamedTensor> named_;
  std::vector<std::unique_ptr<Buffer>> owned_;
};

// Quantizes one [N, K] matrix into `out` under module name `module`; returns packed bytes.
Result<int64_t> quantize_matrix(quant::WeightFormat format, const std::string& module, const std::vector<float>& x,
                                int64_t n, int64_t k, OutputTensors& out) {
  switch (format) {
    case quant::WeightFormat::kNvfp4: {
      MOERT_ASSIGN_OR_RETURN(quant::Nvfp4Tensor t, quant::nvfp4_quantize(x.data(), n, k));
      out.add_owned(module + ".weight", DType::kU8, {n, k / 2}, t.packed);
      out.add_owned(module + ".weight_scale", DType::kF8E4M3, {n, k / 16}, t.block_scales);
      out.add_owned(module + ".weight_scale_2", DType::kF32, {}, std::vector<float>{t.global_scale});
      return static_cast<int64_t>(t.packed.size() + t.block_scales.size() + 4);
    }
    case quant::WeightFormat::kMxfp4: {
      MOERT_ASSIGN_OR_RETURN(quant::Mxfp4Tensor t, quant::mxfp4_quantize(x.data(), n, k, quant::Mxfp4ScaleRule::kOcpFloor));
      out.add_owned(module + "_blocks", DType::kU8, {n, k / 32, 16}, t.packed);
      out.add_owned(module + "_scales", DType::kU8, {n, k / 32}, t.scales);
      return static_cast<int64_t>(t.packed.size() + t.scales.size());
    }
    case quant::WeightFormat::kFp8Block: {
      MOERT_ASSIGN_OR_RETURN(quant::Fp8BlockTensor t, quant::fp8_block_quantize(x.data(), n, k));
      const int64_t blocks_n = (n + 127) / 128, blocks_k = (k + 127) / 128;
      out.add_owned(module + ".weight", DType::kF8E4M3, {n, k}, t.data);
      out.add_owned(module + ".weight_scale_inv", DType::kF32, {blocks_n, blocks_k}, t.scale_inv);
      return static_cast<int64_t>(t.data.size() + t.scale_inv.size() * 4);
    }
    case quant::WeightFormat::kFp8Tensor: {
      MOERT_ASSIGN_OR_RETURN(quant::Fp8TensorScaled t, quant::fp8_tensor_quantize(x.data(), n, k));
      out.add_owned(module + ".weight", DType::kF8E4M3, {n, k}, t.data);
      out.add_owned(module + ".weight_scale", DType::kF32, {}, std::vector<float>{t.scale});
      return static_cast<int64_t>(t.data.size() + 4);
    }
  }
  return internal_error("unhandled format");
}

bool format_can_block(quant::WeightFormat format, int64_t k) {
  if (format == quant::WeightFormat::kNvfp4) return k % 16 == 0;
  if (format == quant::WeightFormat::kMxfp4) return k % 32 == 0;
  return true;
}

json quantization_config(quant::WeightFormat format, const std::vector<std::string>& excluded) {
  switch (format) {
    case quant::WeightFormat::kNvfp4:
      return {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", excluded}};
    case quant::WeightFormat::kMxfp4:
      return {{"quant_method", "mxfp4"}, {"modules_to_not_convert", excluded}};
    case quant::WeightFormat::kFp8Block:
      return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
              {"weight_block_size", {128, 128}}, {"modules_to_not_convert", excluded}};
    case quant::WeightFormat::kFp8Tensor:
      return {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"exclude_modules", excluded}};
  }
  return {};
}

// The gpt-oss MXFP4 release layout of one stacked tensor: each expert transposed to
// [out, in] and quantized, written as NAME_blocks [E, out, in/32, 16] and NAME_scales
// [E, out, in/32]. Returns packed bytes.
Result<int64_t> quantize_stacked_mxfp4(const std::string& name, const TensorView& view, OutputTensors& out) {
  const int64_t experts = view.dim(0), in = view.dim(1), outs = view.dim(2);
  if (in % 32 != 0) return invalid_argument("'" + name + "': in = " + std::to_string(in) + " is not a multiple of 32");
  MOERT_ASSIGN_OR_RETURN(std::vector<float> values, widen_to_f32(name, view));
  std::vector<uint8_t> blocks, scales;
  std::vector<float> transposed(static_cast<size_t>(in * outs));
  for (int64_t e = 0; e < experts; ++e) {
    const float* src = values.data() + e * in * outs;
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t o = 0; o < outs; ++o) transposed[static_cast<size_t>(o * in + i)] = src[i * outs + o];
    }
    MOERT_ASSIGN_OR_RETURN(quant::Mxfp4Tensor t,
                           quant::mxfp4_quantize(transposed.data(), outs, in, quant::Mxfp4ScaleRule::kOcpFloor));
    blocks.insert(blocks.end(), t.packed.begin(), t.packed.end());
    scales.insert(scales.end(), t.scales.begin(), t.scales.end());
  }
  out.add_owned(name + "_blocks", DType::kU8, {experts, outs, in / 32, 16}, blocks);
  out.add_owned(name + "_scales", DType::kU8, {experts, outs, in / 32}, scales);
  return static_cast<int64_t>(blocks.size() + scales.size());
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  return out ? Status::ok() : io_error("cannot write " + path);
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& text) {
  return fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

Result<quant::WeightFormat> parse_weight_format(const std::string& name) {
  if (name == "nvfp4") return quant::WeightFormat::kNvfp4;
  if (name == "mxfp4") return quant::WeightFormat::kMxfp4;
  if (name == "fp8") return quant::WeightFormat::kFp8Block;
  if (name == "fp8-tensor") return quant::WeightFormat::kFp8Tensor;
  return invalid_argument("unknown format '" + name + "' (nvfp4, mxfp4, fp8, fp8-tensor)");
}

Result<QuantizeReport> quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                           const QuantizeOptions& options) {
  std::error_code ec;
  if (std::filesystem::weakly_canonical(in_dir, ec) == std::filesystem::weakly_canonical(out_dir, ec)) {
    return invalid_argument("--out must differ from --model (" + out_dir + ")");
  }
  MOERT_ASSIGN_OR_RETURN(io::Checkpoint checkpoint, io::Checkpoint::open(in_dir));
  MOERT_ASSIGN_OR_RETURN(json config, read_strict_json_file(in_dir + "/config.json", kMaxConfigJsonBytes));
  if (!config.is_object()) return corrupt(in_dir + "/config.json is not a JSON object");
  if (config.contains("quantization_config")) {
    return invalid_argument(in_dir + " is already quantized (config.json has 'quantization_config')");
  }
  MOERT_ASSIGN_OR_RETURN(const ArchSpec* arch, architecture_of_config(config));
  const TensorNames& n = arch->names;
  std::vector<std::string> excludes = default_excludes(n, options.quantize_lm_head);
  excludes.insert(excludes.end(), options.exclude_patterns.begin(), options.exclude_patterns.end());

  QuantizeReport report;
  OutputTensors out;
  // A checkpoint with stacked experts (gpt-oss) quantized to MXFP4 takes the release layout:
  // only the experts are MXFP4; attention, router, embeddings and lm_head stay as they are.
  const std::array<std::string, 2> stacked_suffixes = stacked_expert_suffixes(n);
  bool stacked = false;
  for (const std::string& name : checkpoint.tensor_names()) stacked = stacked || ends_with(name, stacked_suffixes[0]);
  const bool release_mxfp4 = stacked && options.format == quant::WeightFormat::kMxfp4;
  for (const std::string& name : checkpoint.tensor_names()) {
    MOERT_ASSIGN_OR_RETURN(TensorView view, checkpoint.get(name));
    if (release_mxfp4 && is_stacked_experts(stacked_suffixes, name, view)) {
      Result<int64_t> bytes = quantize_stacked_mxfp4(name, view, out);
      if (!bytes.is_ok()) return bytes.status().with_context("tensor '" + name + "'");
      report.quantized_bytes += bytes.value();
      report.quantized_weights += view.numel();
      ++report.quantized_tensors;
      continue;
    }
    if (release_mxfp4 || is_stacked_experts(stacked_suffixes, name, view)) {  // kept: other formats have no stacked layout
      out.add_copy(name, view);
      ++report.kept_tensors;
      continue;
    }
    const bool is_matrix = ends_with(name, ".weight") && view.ndim() == 2;
    const std::string module = is_matrix ? name.substr(0, name.size() - 7) : name;
    bool excluded = !is_matrix;
    for (const std::string& pattern : excludes) excluded = excluded || glob_match(pattern, module);
    if (is_matrix && !excluded && !format_can_block(options.format, view.dim(1))) excluded = true;
    if (excluded) {
      if (is_matrix) report.excluded.push_back(module);
      out.add_copy(name, view);
      ++report.kept_tensors;
      continue;
    }
    MOERT_ASSIGN_OR_RETURN(std::vector<float> values, widen_to_f32(name, view));
    Result<int64_t> bytes = quantize_matrix(options.format, module, values, view.dim(0), view.dim(1), out);
    if (!bytes.is_ok()) return bytes.status().with_context("tensor '" + name + "'");
    report.quantized_bytes += bytes.value();
    report.quantized_weights += view.numel();
    ++report.quantized_tensors;
  }
  MOERT_RETURN_IF_ERROR(io::write_sharded_checkpoint(out_dir, out.named(), options.max_shard_bytes));
  config["quantization_config"] = quantization_config(options.format, report.excluded);
  if (release_mxfp4) {
    config["quantization_config"]["modules_to_not_convert"] = {
        n.every_layer({n.attention}), n.every_layer({n.moe_block, n.router}), n.embed_tokens, n.lm_head};
  }
  MOERT_RETURN_IF_ERROR(write_text(out_dir + "/config.json", config.dump(2) + "\n"));
  if (options.format == quant::WeightFormat::kNvfp4 || options.format == quant::WeightFormat::kFp8Tensor) {
    const json hf_quant = {{"producer", {{"name", "modelopt"}, {"version", "moert-0.1"}}},
                           {"quantization",
                            {{"quant_algo", options.format == quant::WeightFormat::kNvfp4 ? "NVFP4" : "FP8"},
                             {"kv_cache_quant_algo", nullptr},
                             {"group_size", 16},
                             {"exclude_modules", report.excluded}}}};
    MOERT_RETURN_IF_ERROR(write_text(out_dir + "/hf_quant_config.json", hf_quant.dump(2) + "\n"));
  }
  std::filesystem::copy_file(in_dir + "/generation_config.json", out_dir + "/generation_config.json",
                             std::filesystem::copy_options::overwrite_existing, ec);  // optional file
  return report;
}

}  // namespace moert
