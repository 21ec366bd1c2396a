#include "quant/cpu/apply_linear.h"

#include <algorithm>
#include <vector>

#include "quant/cpu/bf16_linear.h"
#include "quant/cpu/int8_linear.h"
#include "quant/cpu/linear.h"
#include "quant/cpu/quantized_linear.h"
#include "quant/formats/fp4.h"

namespace moert::quant {
namespace {

ActivationPrecision activations_of(const LinearWeight& weight) {
  return weight.packed ? weight.packed->activations : weight.dense_activations;
}

// x [rows, cols] rounded row by row through the weight's FP4 format (ActivationPrecision::kFp4).
void round_trip_fp4_rows(WeightFormat format, const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    if (format == WeightFormat::kNvfp4) {
      nvfp4_round_trip_row(x + r * cols, cols, out + r * cols);
    } else {
      mxfp4_round_trip_row(x + r * cols, cols, out + r * cols);
    }
  }
}

// What one job's rows read: x as given, x rounded through FP4, x quantized to int8 or x
// rounded to BF16.
struct JobInput {
  const float* x = nullptr;
  const Int8RowsView* int8 = nullptr;
  const Bf16RowsView* bf16 = nullptr;
};

// Output features [begin, end) of one job, on the calling thread.
void job_rows(const LinearJob& job, const JobInput& input, int64_t begin, int64_t end) {
  if (input.int8 != nullptr) {
    int8_linear_rows(*input.int8, *job.weight->packed, job.bias, job.y, begin, end);
  } else if (input.bf16 != nullptr && job.weight->packed) {
    bf16_linear_rows(*input.bf16, *job.weight->packed, job.bias, job.y, begin, end);
  } else if (input.bf16 != nullptr) {
    bf16_dense_linear_rows(*input.bf16, *job.weight, job.bias, job.y, begin, end);
  } else if (job.weight->packed) {
    quantized_linear_rows(input.x, job.num_rows, *job.weight->packed, job.bias, job.y, begin, end);
  } else {
    linear_forward_rows(input.x, job.num_rows, job.weight->dense, job.bias, job.y, begin, end);
  }
}

}  // namespace

void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool) {
  // One job through apply_linears: the same shares, balanced by the threads' speeds, as a group.
  const LinearJob job{&weight, x, num_rows, bias, y};
  apply_linears({&job, 1}, pool);
}

void apply_linears(std::span<const LinearJob> jobs, ThreadPool& pool, const FeaturesDone& features_done) {
  // The x of every int8, BF16 or FP4 job, converted once here (jobs reading the same x the same
  // way share it: gate and up).
  thread_local std::vector<Int8Rows> quantized;
  thread_local std::vector<Bf16Rows> bf16_rounded;
  thread_local std::vector<std::vector<float>> rounded;
  std::vector<JobInput> inputs(jobs.size());
  std::vector<Int8RowsView> views;
  views.reserve(jobs.size());
  std::vector<Bf16RowsView> bf16_views;
  bf16_views.reserve(jobs.size());
  size_t num_rounded = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LinearJob& job = jobs[j];
    inputs[j].x = job.x;
    const ActivationPrecision precision = activations_of(*job.weight);
    if (precision == ActivationPrecision::kF32) continue;
    const int64_t k = job.weight->in_features();
    bool shared = false;
    for (size_t i = 0; i < j && !shared; ++i) {
      const LinearJob& other = jobs[i];
      // int8 codes and BF16 values depend on x only; FP4 rounding also on the weight's format.
      const bool same_rounding = precision == ActivationPrecision::kInt8 || precision == ActivationPrecision::kBf16 ||
                                 other.weight->packed->format == job.weight->packed->format;
      if (other.x == job.x && other.num_rows == job.num_rows && other.weight->in_features() == k &&
          activations_of(*other.weight) == precision && same_rounding) {
        inputs[j] = inputs[i];
        shared = true;
      }
    }
    if (shared) continue;
    if (precision == ActivationPrecision::kInt8) {
      if (quantized.size() <= views.size()) quantized.resize(views.size() + 1);
      quantized[views.size()].quantize(job.x, job.num_rows, k);
      views.push_back(quantized[views.size()].view());
      inputs[j].int8 = &views.back();
    } else if (precision == ActivationPrecision::kBf16) {
      if (bf16_rounded.size() <= bf16_views.size()) bf16_rounded.resize(bf16_views.size() + 1);
      bf16_rounded[bf16_views.size()].round(job.x, job.num_rows, k);
      bf16_views.push_back(bf16_rounded[bf16_views.size()].view());
      inputs[j].bf16 = &bf16_views.back();
    } else {
      if (rounded.size() <= num_rounded) rounded.resize(num_rounded + 1);
      std::vector<float>& out = rounded[num_rounded++];
      out.resize(static_cast<size_t>(job.num_rows * k));
      round_trip_fp4_rows(job.weight->packed->format, job.x, job.num_rows, k, out.data());
      inputs[j].x = out.data();
    }
  }
  int64_t total = 0, max_k = 1;
  for (size_t j = 0; j < jobs.size(); ++j) {
    job_rows(jobs[j], inputs[j], 0, 0);  // checks the weight and the shapes here, before any thread starts
    total += jobs[j].weight->out_features();
    max_k = std::max(max_k, jobs[j].weight->in_features());
  }
  // Every thread takes the same fraction of every job's features (fraction [u0, u1) of
  // kShareUnits: features [N u0 / kShareUnits, N u1 / kShareUnits) rounded down to a multiple of
  // 4), so the threads stay balanced when the jobs differ in rows (a prefill's experts get
  // unequal token counts). The fractions follow the threads' measured speeds
  // (ThreadPool::parallel_for_balanced): a feature's bits do not depend on which thread or
  // share computes it (core/cpu/dot.h, quant/cpu/int8_linear.h).
  constexpr int64_t kShareUnits = int64_t{1} << 16;
  auto bound = [&](int64_t n, int64_t unit) { return unit == kShareUnits ? n : n * unit / kShareUnits / 4 * 4; };
  const auto run_units = [&](int64_t first_unit, int64_t end_unit) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t n = jobs[j].weight->out_features();
      const int64_t begin = bound(n, first_unit), end = bound(n, end_unit);
      if (begin < end) {
        job_rows(jobs[j], inputs[j], begin, end);
        if (features_done) features_done(j, begin, end);
      }
    }
  };
  const int64_t parts = std::min<int64_t>(pool.num_threads(), std::max<int64_t>(1, total / linear_row_grain(max_k)));
  if (parts == pool.num_threads()) return pool.parallel_for_balanced(kShareUnits, 1, run_units);
  // Too little work for every thread: `parts` equal shares.
  pool.parallel_for(parts, 1, [&](int64_t first_part, int64_t end_part) {
    run_units(first_part * kShareUnits / parts, end_part * kShareUnits / parts);
  });
}

}  // namespace moert::quant
