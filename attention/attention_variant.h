// How one layer's attention differs from plain causal softmax attention (docs/kv-cache.md,
// "Attention variants"): plain data every attention kernel and context takes.
#pragma once

namespace moert::attention {

struct AttentionVariant {
  float softmax_scale = 0.0f;  // logits = q.k * softmax_scale; 0: 1 / sqrt(Dh)
  float soft_cap = 0.0f;       // > 0: logits = soft_cap * tanh(logits / soft_cap)
  int sliding_window = 0;      // W > 0: the query at position i sees keys i-W+1 .. i only
  const float* sinks = nullptr;  // [H] learned logits joining each softmax's denominator; null: none
};

}  // namespace moert::attention
