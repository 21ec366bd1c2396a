#include "quant/weight.h"

#include "quant/cpu/linear.h"

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

void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool) {
  if (weight.packed) {
    quantized_linear_forward(x, num_rows, *weight.packed, bias, y, pool);
  } else {
    linear_forward(x, num_rows, weight.dense, bias, y, pool);
  }
}

}  // namespace moert::quant
