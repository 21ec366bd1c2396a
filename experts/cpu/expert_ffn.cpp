#include "experts/cpu/expert_ffn.h"

#include <vector>

#include "core/check.h"
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
    MOERT_CHECK(job.up->out_features() == job.gate->out_features(),
                "GLU gate has " << job.gate->out_features() << " features, up " << job.up->out_features());
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
  // The GLU of each thread's share of features, by that thread as soon as its up share is done
  // (linear 2j + 1; gate 2j, the same share, came just before): in parallel and in cache.
  quant::apply_linears(linears, pool, [&](size_t linear, int64_t begin, int64_t end) {
    if (linear % 2 == 0) return;
    const GluFfnJob& job = jobs[linear / 2];
    const int64_t features = job.gate->out_features();
    for (int64_t r = 0; r < job.num_rows; ++r) {
      const size_t row = offsets[linear / 2] + static_cast<size_t>(r * features);
      for (size_t i = row + static_cast<size_t>(begin); i < row + static_cast<size_t>(end); ++i) {
        gate_out[i] = glu(job.activation, gate_out[i], up_out[i]);
      }
    }
  });
  linears.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const GluFfnJob& job = jobs[j];
    linears.push_back({job.down, gate_out + offsets[j], job.num_rows, job.down_bias, job.out});
  }
  quant::apply_linears(linears, pool);
}

}  // namespace moert::experts
