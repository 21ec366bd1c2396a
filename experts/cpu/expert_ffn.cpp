#include "experts/cpu/expert_ffn.h"

#include <vector>

#include "quant/cpu/apply_linear.h"

namespace moert::experts {

void swiglu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate,
                        const quant::LinearWeight& up, const quant::LinearWeight& down, float* out, ThreadPool& pool) {
  glu_ffn_forward(x, num_rows, gate, nullptr, up, nullptr, down, nullptr, GluActivation{}, out, pool);
}

void glu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate, const float* gate_bias,
                     const quant::LinearWeight& up, const float* up_bias, const quant::LinearWeight& down,
                     const float* down_bias, const GluActivation& activation, float* out, ThreadPool& pool) {
  const int64_t width = gate.out_features();
  std::vector<float> gate_out(static_cast<size_t>(num_rows * width));
  std::vector<float> up_out(static_cast<size_t>(num_rows * width));
  quant::apply_linear(gate, x, num_rows, gate_bias, gate_out.data(), pool);
  quant::apply_linear(up, x, num_rows, up_bias, up_out.data(), pool);
  for (size_t i = 0; i < gate_out.size(); ++i) gate_out[i] = glu(activation, gate_out[i], up_out[i]);
  quant::apply_linear(down, gate_out.data(), num_rows, down_bias, out, pool);
}

}  // namespace moert::experts
