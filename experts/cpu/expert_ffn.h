// The expert FFN on one rank: SwiGLU, y = down(silu(gate x) * up x), for a group of rows.
// Used for routed experts, shared experts and dense MLP layers alike. Row-invariant: each
// output row depends only on its input row (see quant/cpu/linear.h).
// Shapes: R rows, D hidden, I intermediate.
#pragma once

#include <cmath>
#include <cstdint>

#include "quant/weight.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace moert::experts {

// x: [R, D]; gate, up: [I, D]; down: [D, I]; out: [R, D] (overwritten).
void swiglu_ffn_forward(const float* x, int64_t num_rows, const quant::LinearWeight& gate,
                        const quant::LinearWeight& up, const quant::LinearWeight& down, float* out, ThreadPool& pool);

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace moert::experts
