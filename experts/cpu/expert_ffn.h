// The expert FFN on one rank: y = down(act(gate x + bg, up x + bu)) + bd for a group of rows
// (experts/glu_activation.h; SwiGLU without biases for most models). Used for routed
// experts, shared experts and dense MLP layers alike. Row-invariant: each output row depends
// only on its input row (see quant/cpu/linear.h).
// Shapes: R rows, D hidden, I intermediate.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "experts/glu_activation.h"
#include "quant/weight.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::experts {

// x: [R, D]; gate, up: [I, D]; down: [D, I]; out: [R, D] (overwritten).
void swiglu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate,
                        const quant::LinearWeight& up, const quant::LinearWeight& down, float* out, ThreadPool& pool);

// The same with biases ([I], [I], [D]; each may be null) and any gated activation.
void glu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate, const float* gate_bias,
                     const quant::LinearWeight& up, const float* up_bias, const quant::LinearWeight& down,
                     const float* down_bias, const GluActivation& activation, float* out, ThreadPool& pool);

// One FFN of a batch for glu_ffn_forward_batch (the arguments of glu_ffn_forward).
struct GluFfnJob {
  const float* x = nullptr;  // [R, D]
  int64_t num_rows = 0;
  const quant::LinearWeight* gate = nullptr;
  const float* gate_bias = nullptr;
  const quant::LinearWeight* up = nullptr;
  const float* up_bias = nullptr;
  const quant::LinearWeight* down = nullptr;
  const float* down_bias = nullptr;
  GluActivation activation;
  float* out = nullptr;  // [R, D]
};

// glu_ffn_forward of every job with two wake-ups of the pool in all: the gate and up
// projections of every job together, then every down projection (quant::apply_linears).
// Same bits as glu_ffn_forward per job.
void glu_ffn_forward_batch(std::span<const GluFfnJob> jobs, ThreadPool& pool);

}  // namespace moert::experts
