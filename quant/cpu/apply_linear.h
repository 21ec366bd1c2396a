// The CPU linear layer over a LinearWeight of any format: dense F32/BF16/F16 weights go to
// linear_forward, packed ones to quantized_linear_forward (both in this folder).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/thread_pool.h"
#include "quant/weight.h"

namespace moert::quant {

// y[T, N] = x[T, K] . W^T (+ bias[N]); row-invariant like both kernels behind it.
void apply_linear(const LinearWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
                  ThreadPool& pool);

// One layer of a batch for apply_linears: y[num_rows, N] = x[num_rows, K] . W^T (+ bias[N]).
struct LinearJob {
  const LinearWeight* weight = nullptr;
  const float* x = nullptr;
  int64_t num_rows = 0;
  const float* bias = nullptr;  // [N] or null
  float* y = nullptr;
};

// Called on the thread that computed them, once job j's output features [begin, end) (every
// row) are done, and after every earlier job's features of the same share: work on a slice of
// the outputs (the GLU of a gate and up pair) without another wake-up of the threads.
using FeaturesDone = std::function<void(size_t job, int64_t begin, int64_t end)>;

// apply_linear of every job in one parallel_for, each thread taking an equal share of every
// job's output features: one wake-up of the threads for, e.g., the gate and up projections of
// every expert a MoE layer runs, instead of one per matrix (docs/perf/cpu-roofline.md). Each
// output element has the bits apply_linear gives it. Outputs must not alias any job's input.
// Jobs with the same number of output features get the same [begin, end) shares.
void apply_linears(std::span<const LinearJob> jobs, ThreadPool& pool, const FeaturesDone& features_done = {});

}  // namespace moert::quant
