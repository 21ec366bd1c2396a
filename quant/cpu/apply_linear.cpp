#include "quant/cpu/apply_linear.h"

#include <algorithm>
#include <vector>

#include "quant/cpu/int8_linear.h"
#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear.h"

namespace moert::quant {
namespace {

bool int8_activations(const LinearWeight& weight) {
  return weight.packed && weight.packed->activations == ActivationPrecision::kInt8;
}

// Output features [begin, end) of one job, on the calling thread; int8: the job's x quantized
// (int8 weights only).
void job_rows(const LinearJob& job, const Int8RowsView* int8, int64_t begin, int64_t end) {
  if (int8 != nullptr) {
    int8_linear_rows(*int8, *job.weight->packed, job.bias, job.y, begin, end);
  } else if (job.weight->packed) {
    quantized_linear_rows(job.x, job.num_rows, *job.weight->packed, job.bias, job.y, begin, end);
  } else {
    linear_forward_rows(job.x, job.num_rows, job.weight->dense, job.bias, job.y, begin, end);
  }
}

}  // namespace

void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool) {
  if (int8_activations(weight)) {
    const LinearJob job{&weight, x, num_rows, bias, y};
    apply_linears({&job, 1}, pool);
  } else if (weight.packed) {
    quantized_linear_forward(x, num_rows, *weight.packed, bias, y, pool);
  } else {
    linear_forward(x, num_rows, weight.dense, bias, y, pool);
  }
}

void apply_linears(std::span<const LinearJob> jobs, ThreadPool& pool) {
  // The x of every int8 job, quantized once here (jobs reading the same x share it: gate and up).
  thread_local std::vector<Int8Rows> quantized;
  std::vector<const Int8RowsView*> int8(jobs.size(), nullptr);
  std::vector<Int8RowsView> views;
  views.reserve(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    if (!int8_activations(*job.weight)) continue;
    const int64_t k = job.weight->in_features();
    for (size_t i = 0; i < j && int8[j] == nullptr; ++i) {
      if (int8[i] != nullptr && jobs[i].x == job.x && jobs[i].num_rows == job.num_rows && int8[i]->cols == k) {
        int8[j] = int8[i];
      }
    }
    if (int8[j] != nullptr) continue;
    if (quantized.size() <= views.size()) quantized.resize(views.size() + 1);
    quantized[views.size()].quantize(job.x, job.num_rows, k);
    views.push_back(quantized[views.size()].view());
    int8[j] = &views.back();
  }
  int64_t total = 0, max_k = 1;
  for (size_t j = 0; j < jobs.size(); ++j) {
    job_rows(jobs[j], int8[j], 0, 0);  // checks the weight and the shapes here, before any thread starts
    total += jobs[j].weight->out_features();
    max_k = std::max(max_k, jobs[j].weight->in_features());
  }
  // Every thread takes the same share of every job's features (part p of P: features
  // [N p / P, N (p + 1) / P) rounded down to a multiple of 4), so the threads stay balanced
  // when the jobs differ in rows (a prefill's experts get unequal token counts).
  const int64_t parts = std::min<int64_t>(pool.num_threads(), std::max<int64_t>(1, total / linear_row_grain(max_k)));
  auto bound = [&](int64_t n, int64_t part) { return part == parts ? n : n * part / parts / 4 * 4; };
  pool.parallel_for(parts, 1, [&](int64_t first_part, int64_t end_part) {
    for (int64_t part = first_part; part < end_part; ++part) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        const int64_t n = jobs[j].weight->out_features();
        const int64_t begin = bound(n, part), end = bound(n, part + 1);
        if (begin < end) job_rows(jobs[j], int8[j], begin, end);
      }
    }
  });
}

}  // namespace moert::quant
