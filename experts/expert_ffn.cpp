#include "experts/expert_ffn.h"

#include <vector>

#include "quant/cpu/linear.h"

namespace moert::experts {

void swiglu_ffn_forward(const float* x, int64_t num_rows, const TensorView& gate, const TensorView& up,
                        const TensorView& down, float* out, ThreadPool& pool) {
  const int64_t width = gate.dim(0);
  std::vector<float> gate_out(static_cast<size_t>(num_rows * width));
  std::vector<float> up_out(static_cast<size_t>(num_rows * width));
  quant::linear_forward(x, num_rows, gate, nullptr, gate_out.data(), pool);
  quant::linear_forward(x, num_rows, up, nullptr, up_out.data(), pool);
  for (size_t i = 0; i < gate_out.size(); ++i) gate_out[i] = silu(gate_out[i]) * up_out[i];
  quant::linear_forward(gate_out.data(), num_rows, down, nullptr, out, pool);
}

}  // namespace moert::experts
