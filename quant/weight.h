// One linear layer's weight, [N, K] (out x in): either a dense F32/BF16/F16 matrix read in
// place, or a packed format (NVFP4, MXFP4, FP8) read in place by the fused kernels. The
// model and the expert FFN only see this type, so a quantized checkpoint runs through the
// same forward code.
#pragma once

#include <optional>

#include "quant/cpu/quantized_linear.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::quant {

struct LinearWeight {
  TensorView dense;                           // valid when !packed
  std::optional<QuantizedWeightView> packed;  // set for quantized weights

  static LinearWeight from_dense(const TensorView& view);
  static LinearWeight from_packed(const QuantizedWeightView& view);
  int64_t out_features() const;
  int64_t in_features() const;
  // "BF16", "NVFP4", ... for banners and errors.
  const char* format_name() const;
  // Bytes the weight occupies (data + scales).
  int64_t storage_bytes() const;
};

// y[T, N] = x[T, K] . W^T (+ bias[N]); row-invariant like both kernels behind it.
void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool);

}  // namespace moert::quant
