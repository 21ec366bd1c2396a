#include "quant/weight.h"

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

}  // namespace moert::quant
