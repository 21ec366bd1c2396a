// One linear layer's weight, [N, K] (out x in): either a dense F32/BF16/F16 matrix read in
// place, or a packed format (NVFP4, MXFP4, FP8) read in place by the fused kernels. The
// model and the expert FFN only see this type, so a quantized checkpoint runs through the
// same forward code.
#pragma once

#include <optional>

#include "core/tensor.h"
#include "quant/quantized_weight.h"

namespace moert::quant {

struct LinearWeight {
  TensorView dense;                           // valid when !packed
  std::optional<QuantizedWeightView> packed;  // set for quantized weights
  // What x is computed as with a dense weight: kF32, or kBf16 for an admitted BF16 weight under
  // `--bf16-activations bf16` (quant/cpu/bf16_linear.h enable_bf16_activations; CPU only).
  ActivationPrecision dense_activations = ActivationPrecision::kF32;

  static LinearWeight from_dense(const TensorView& view);
  static LinearWeight from_packed(const QuantizedWeightView& view);
  int64_t out_features() const;
  int64_t in_features() const;
  // "BF16", "NVFP4", ... for banners and errors.
  const char* format_name() const;
  // Bytes the weight occupies (data + scales).
  int64_t storage_bytes() const;
};

// W as F32 [N, K] into `out`, exactly what every kernel computes with (the codecs'
// dequantizers, quant/formats): for load-time transforms of small matrices (MLA's kv_b_proj,
// docs/mla.md), never for the forward.
void dequantize_to_f32(const LinearWeight& weight, float* out);

// Computed by a backend: quant/cpu/apply_linear.h on the CPU.

}  // namespace moert::quant
