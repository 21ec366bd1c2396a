// `moert quantize`: rewrites a checkpoint with its linear weights in a packed format, in
// the layouts the ecosystem uses (docs/quant-formats.md):
//   nvfp4  ModelOpt: P.weight U8 [N, K/2], P.weight_scale F8_E4M3 [N, K/16],
//          P.weight_scale_2 F32 [], plus hf_quant_config.json and config.json
//          "quantization_config" {"quant_method": "modelopt", "quant_algo": "NVFP4", ...}
//   mxfp4  gpt-oss: P_blocks U8 [N, K/32, 16], P_scales U8 (E8M0) [N, K/32],
//          "quantization_config" {"quant_method": "mxfp4", "modules_to_not_convert": [...]}
//   fp8    DeepSeek: P.weight F8_E4M3 [N, K], P.weight_scale_inv F32 [ceil(N/128), ceil(K/128)],
//          "quantization_config" {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
// where P is a module name such as model.layers.1.mlp.experts.3.up_proj. Quantized: every
// 2-D `*.weight` of a linear layer (attention projections, dense MLPs, routed and shared
// experts, the DSA indexer's wq_b / wk). Kept: embeddings, norms, routers, shared-expert gates and
// the DSA indexer's weights_proj (named by the checkpoint's
// architecture: ArchSpec::names, runtime/model/arch/tensor_names.h), lm_head (unless asked),
// modules matching an --exclude pattern, and weights whose K the format cannot block (NVFP4
// needs K % 16 == 0, MXFP4 K % 32 == 0). The checkpoint's config.json must name an
// architecture moert knows.
#pragma once

#include <string>
#include <vector>

#include "quant/quantized_weight.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace moert {

struct QuantizeOptions {
  quant::WeightFormat format = quant::WeightFormat::kNvfp4;
  std::vector<std::string> exclude_patterns;  // shell globs over module names, added to the defaults
  bool quantize_lm_head = false;
  uint64_t max_shard_bytes = 64ull << 20;
};

struct QuantizeReport {
  int64_t quantized_tensors = 0;
  int64_t kept_tensors = 0;
  int64_t quantized_weights = 0;       // elements of the quantized matrices
  int64_t quantized_bytes = 0;         // their packed data + scales in the output
  std::vector<std::string> excluded;   // modules kept dense, in order
  double bits_per_quantized_weight() const {
    return quantized_weights > 0 ? 8.0 * quantized_bytes / quantized_weights : 0.0;
  }
};

Result<quant::WeightFormat> parse_weight_format(const std::string& name);  // nvfp4, mxfp4, fp8
bool glob_match(const std::string& pattern, const std::string& text);

Result<QuantizeReport> quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                           const QuantizeOptions& options);

}  // namespace moert
