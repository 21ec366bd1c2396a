#include "quant/cpu/apply_linear.h"

#include <algorithm>

#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear.h"

namespace moert::quant {
namespace {

// Output features [begin, end) of one job, on the calling thread.
void job_rows(const LinearJob& job, int64_t begin, int64_t end) {
  if (job.weight->packed) {
    quantized_linear_rows(job.x, job.num_rows, *job.weight->packed, job.bias, job.y, begin, end);
  } else {
    linear_forward_rows(job.x, job.num_rows, job.weight->dense, job.bias, job.y, begin, end);
  }
}

}  // namespace

void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool) {
  if (weight.packed) {
    quantized_linear_forward(x, num_rows, *weight.packed, bias, y, pool);
  } else {
    linear_forward(x, num_rows, weight.dense, bias, y, pool);
  }
}

void apply_linears(std::span<const LinearJob> jobs, ThreadPool& pool) {
  int64_t total = 0, max_k = 1;
  for (const LinearJob& job : jobs) {
    job_rows(job, 0, 0);  // checks the weight and the shapes here, before any thread starts
    total += job.weight->out_features();
    max_k = std::max(max_k, job.weight->in_features());
  }
  pool.parallel_for(total, linear_row_grain(max_k), [&](int64_t begin, int64_t end) {
    int64_t first = 0;  // global index of the current job's feature 0
    for (const LinearJob& job : jobs) {
      const int64_t n = job.weight->out_features();
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + n);
      if (lo < hi) job_rows(job, lo - first, hi - first);
      first += n;
      if (first >= end) break;
    }
  });
}

}  // namespace moert::quant
