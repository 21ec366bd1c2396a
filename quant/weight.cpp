#include "quant/weight.h"

#include "core/check.h"
#include "quant/bf16.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/formats/minifloat.h"

namespace moert::quant {

LinearWeight LinearWeight::from_dense(const TensorView& view) {
  LinearWeight weight;
  weight.dense = view;
  return weight;
}

LinearWeight LinearWeight::from_packed(const QuantizedWeightView& view) {
  LinearWeight weight;
  weight.packed = view;
  return weight;
}

int64_t LinearWeight::out_features() const { return packed ? packed->rows : dense.dim(0); }
int64_t LinearWeight::in_features() const { return packed ? packed->cols : dense.dim(1); }

const char* LinearWeight::format_name() const {
  return packed ? weight_format_name(packed->format) : dtype_name(dense.dtype).data();
}

int64_t LinearWeight::storage_bytes() const {
  return packed ? quantized_weight_bytes(*packed) : dense.numel() * dtype_bits(dense.dtype) / 8;
}

void dequantize_to_f32(const LinearWeight& weight, float* out) {
  if (!weight.packed) {
    MOERT_CHECK(widen_into_f32(weight.dense, out), "dense weight of dtype " << dtype_name(weight.dense.dtype));
    return;
  }
  const QuantizedWeightView& q = *weight.packed;
  switch (q.format) {
    case WeightFormat::kNvfp4: nvfp4_dequantize(q.data, q.scales, q.global_scale, q.rows, q.cols, out); return;
    case WeightFormat::kMxfp4: mxfp4_dequantize(q.data, q.scales, q.rows, q.cols, out); return;
    case WeightFormat::kFp8Block:
      fp8_block_dequantize(q.data, q.block_scale_inv, q.rows, q.cols, kFp8BlockSize, kFp8BlockSize, out);
      return;
    case WeightFormat::kFp8Tensor:
      for (int64_t i = 0; i < q.rows * q.cols; ++i) out[i] = e4m3_decode(q.data[i]) * q.global_scale;
      return;
  }
}

}  // namespace moert::quant
