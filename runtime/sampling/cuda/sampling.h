// CUDA token sampling: the twin of sampling::sample_token (runtime/sampling/sampler.h) for
// rows of logits on the device, so that a step's logits need not leave the GPU. Host
// launcher only. Semantics as the CPU: temperature 0 is greedy (argmax, lowest id on ties);
// otherwise weights exp((l - max) / T) in float64, top-k (ties: lower id first), top-p (the
// shortest prefix in that order whose mass reaches top_p * total * (1 - 1e-12)), then the
// inverse CDF over ascending ids at uniform * kept mass. Sums run in another order than the
// CPU's, so a draw can differ only where the uniform falls within rounding of a boundary.
#pragma once

#include <cstdint>

#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

struct SampleRowParams {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0 (or >= V): off
  float top_p = 1.0f;        // 1: off
  double uniform = 0.0;      // in [0, 1)
};

// out[r] = the token drawn from logits[r, :V] under params[r]. params: [R] and
// workspace: [R, V] float64, device memory.
int sample_rows(const float* logits, int64_t num_rows, int64_t vocab, const SampleRowParams* params, double* workspace,
                int32_t* out, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
