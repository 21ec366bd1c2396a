#include "quant/cpu/apply_linear.h"

#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear.h"

namespace moert::quant {

void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool) {
  if (weight.packed) {
    quantized_linear_forward(x, num_rows, *weight.packed, bias, y, pool);
  } else {
    linear_forward(x, num_rows, weight.dense, bias, y, pool);
  }
}

}  // namespace moert::quant
