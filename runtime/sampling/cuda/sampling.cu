#include "runtime/sampling/cuda/sampling.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kThreads = 128;
constexpr double kTopPRelTolerance = 1e-12;  // runtime/sampling/sampler.cpp

// Block-wide reductions over kThreads threads, all calling; every thread gets the result.
// The shared scratch is reused: a barrier closes each call before the next one writes.
template <typename T>
__device__ __forceinline__ T block_sum(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ uint64_t double_bits(double value) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// The largest bit pattern c (weights are >= 0, so patterns order like values) with
// f(c) = sum over kept i with bits_i >= c of g(i) at least `needed`: bit by bit from the top.
// Count (g = 1) gives the k-th largest weight; mass (g = w) the nucleus boundary.
template <bool kMass>
__device__ uint64_t largest_threshold(const double* w, int64_t vocab, double needed, double* scratch) {
  uint64_t threshold = 0;
  for (int bit = 63; bit >= 0; --bit) {
    const uint64_t candidate = threshold | (uint64_t{1} << bit);
    double part = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      if (w[i] > 0.0 && double_bits(w[i]) >= candidate) part += kMass ? w[i] : 1.0;
    }
    if (block_sum(part, scratch) >= needed) threshold = candidate;
  }
  return threshold;
}

// Among the ids whose weight has bit pattern `tie`, the smallest id x such that `base` plus
// the sum of g over tied ids <= x reaches `needed` (ties are taken lowest id first).
template <bool kMass>
__device__ int64_t tie_cutoff(const double* w, int64_t vocab, uint64_t tie, double base, double needed,
                              double* scratch) {
  int64_t low = 0, high = vocab - 1;  // the answer lies in [low, high]
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    double part = 0.0;
    for (int64_t i = threadIdx.x; i <= middle; i += kThreads) {
      if (w[i] > 0.0 && double_bits(w[i]) == tie) part += kMass ? w[i] : 1.0;
    }
    if (base + block_sum(part, scratch) >= needed) {
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  return low;
}

// Zeroes every weight outside {bits > threshold} + {bits == threshold, id <= cutoff}.
__device__ void keep_prefix(double* w, int64_t vocab, uint64_t threshold, int64_t cutoff) {
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t bits = double_bits(w[i]);
    if (!(bits > threshold || (bits == threshold && i <= cutoff))) w[i] = 0.0;
  }
  __syncthreads();
}

// One block per row.
__global__ void sample_rows_kernel(const float* logits, int64_t vocab, const SampleRowParams* params, double* workspace,
                                   int32_t* out) {
  __shared__ double scratch[kThreads];
  __shared__ float max_scratch[kThreads];
  __shared__ int64_t index_scratch[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  double* w = workspace + static_cast<int64_t>(blockIdx.x) * vocab;
  const SampleRowParams p = params[blockIdx.x];
  const int64_t argmax = block_argmax<kThreads>(row, vocab, max_scratch, index_scratch);
  const double max_logit = row[argmax];
  if (p.temperature == 0.0f) {
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(argmax);
    return;  // uniform over the block: no thread waits at a later barrier
  }

  // Unnormalised weights in (0, 1]; the maximum has weight 1; -inf logits weigh 0.
  const double temperature = p.temperature;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) w[i] = exp((static_cast<double>(row[i]) - max_logit) / temperature);
  __syncthreads();

  if (p.top_k > 0 && p.top_k < vocab) {
    const uint64_t kth = largest_threshold<false>(w, vocab, static_cast<double>(p.top_k), scratch);
    double above = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) above += double_bits(w[i]) > kth ? 1.0 : 0.0;
    above = block_sum(above, scratch);
    const int64_t cutoff = tie_cutoff<false>(w, vocab, kth, above, static_cast<double>(p.top_k), scratch);
    keep_prefix(w, vocab, kth, cutoff);
  }
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) total += w[i];
    total = block_sum(total, scratch);
    const double target = static_cast<double>(p.top_p) * total * (1.0 - kTopPRelTolerance);
    const uint64_t boundary = largest_threshold<true>(w, vocab, target, scratch);
    double above = 0.0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) above += double_bits(w[i]) > boundary ? w[i] : 0.0;
    above = block_sum(above, scratch);
    const int64_t cutoff = tie_cutoff<true>(w, vocab, boundary, above, target, scratch);
    keep_prefix(w, vocab, boundary, cutoff);
  }

  // Inverse CDF in ascending ids: thread t sums ids [t * chunk, (t + 1) * chunk); thread 0
  // walks the chunk sums, then the crossing chunk id by id.
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t begin = static_cast<int64_t>(threadIdx.x) * chunk;
  const int64_t end = begin + chunk < vocab ? begin + chunk : vocab;
  double part = 0.0;
  for (int64_t i = begin; i < end; ++i) part += w[i];
  scratch[threadIdx.x] = part;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int64_t last_positive = argmax;  // the maximum always keeps weight 1
    for (int t = 0; t < kThreads; ++t) total += scratch[t];
    for (int64_t i = vocab - 1; i >= 0; --i) {
      if (w[i] > 0.0) {
        last_positive = i;
        break;
      }
    }
    const double target = p.uniform * total;
    double cumulative = 0.0;
    int64_t token = last_positive;
    for (int t = 0; t < kThreads && token == last_positive; ++t) {
      if (cumulative + scratch[t] <= target) {
        cumulative += scratch[t];
        continue;
      }
      const int64_t first = static_cast<int64_t>(t) * chunk;
      const int64_t stop = first + chunk < vocab ? first + chunk : vocab;
      for (int64_t i = first; i < stop && i < last_positive; ++i) {
        if (w[i] > 0.0) {
          cumulative += w[i];
          if (target < cumulative) {
            token = i;
            break;
          }
        }
      }
      break;
    }
    out[blockIdx.x] = static_cast<int32_t>(token);
  }
}

}  // namespace

int sample_rows(const float* logits, int64_t num_rows, int64_t vocab, const SampleRowParams* params, double* workspace,
                int32_t* out, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  MOERT_LAUNCH(sample_rows_kernel, static_cast<unsigned>(num_rows), kThreads, stream, logits, vocab, params, workspace,
               out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
