// The expert FFN on one rank: y = down(act(gate x + bg, up x + bu)) + bd for a group of rows
// (experts/glu_activation.h; SwiGLU without biases for most models). Used for routed
// experts, shared experts and dense MLP layers alike. Row-invariant: each output row depends
// only on its input row (see quant/cpu/linear.h).
// Shapes: R rows, D hidden, I intermediate.
#pragma once

#include <cmath>
#include <cstdint>

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

}  // namespace moert::experts
