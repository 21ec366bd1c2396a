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
  // Every thread takes the same share of every job's features (part p of P: features
  // [N p / P, N (p + 1) / P) rounded down to a multiple of 4), so the threads stay balanced
  // when the jobs differ in rows (a prefill's experts get unequal token counts).
  const int64_t parts = std::min<int64_t>(pool.num_threads(), std::max<int64_t>(1, total / linear_row_grain(max_k)));
  auto bound = [&](int64_t n, int64_t part) { return part == parts ? n : n * part / parts / 4 * 4; };
  pool.parallel_for(parts, 1, [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      for (const LinearJob& job : jobs) {
        const int64_t n = job.weight->out_features();
        const int64_t begin = bound(n, part), end = bound(n, part + 1);
        if (begin < end) job_rows(job, begin, end);
      }
    }
  });
}

}  // namespace moert::quant
