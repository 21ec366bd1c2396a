#include "experts/cpu/expert_ffn.h"

#include <vector>

#include "core/reused_buffer.h"
#include "quant/cpu/apply_linear.h"

namespace moert::experts {

void swiglu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate,
                        const quant::LinearWeight& up, const quant::LinearWeight& down, float* out, ThreadPool& pool) {
  glu_ffn_forward(x, num_rows, gate, nullptr, up, nullptr, down, nullptr, GluActivation{}, out, pool);
}

void glu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate, const float* gate_bias,
                     const quant::LinearWeight& up, const float* up_bias, const quant::LinearWeight& down,
                     const float* down_bias, const GluActivation& activation, float* out, ThreadPool& pool) {
  const GluFfnJob job{x, num_rows, &gate, gate_bias, &up, up_bias, &down, down_bias, activation, out};
  glu_ffn_forward_batch({&job, 1}, pool);
}

void glu_ffn_forward_batch(std::span<const GluFfnJob> jobs, ThreadPool& pool) {
  // gate_out and up_out of job j at offsets[j] (R_j * I_j values each).
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const GluFfnJob& job : jobs) {
    offsets.push_back(total);
    total += static_cast<size_t>(job.num_rows * job.gate->out_features());
  }
  thread_local ReusedBuffer gate_buffer, up_buffer;
  float* gate_out = gate_buffer.get(total);
  float* up_out = up_buffer.get(total);
  std::vector<quant::LinearJob> linears;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const GluFfnJob& job = jobs[j];
    linears.push_back({job.gate, job.x, job.num_rows, job.gate_bias, gate_out + offsets[j]});
    linears.push_back({job.up, job.x, job.num_rows, job.up_bias, up_out + offsets[j]});
  }
  quant::apply_linears(linears, pool);
  linears.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const GluFfnJob& job = jobs[j];
    const size_t end = j + 1 < jobs.size() ? offsets[j + 1] : total;
    for (size_t i = offsets[j]; i < end; ++i) gate_out[i] = glu(job.activation, gate_out[i], up_out[i]);
    linears.push_back({job.down, gate_out + offsets[j], job.num_rows, job.down_bias, job.out});
  }
  quant::apply_linears(linears, pool);
}

}  // namespace moert::experts
