// Causal GQA attention over a contiguous per-sequence K/V history: the simple reference
// that paged kernels are checked against. Shapes: H query heads, KVH kv heads (H % KVH == 0),
// Dh head_dim, L cached positions.
#pragma once

#include <cstdint>

#include "attention/attention_variant.h"

namespace moert::attention {

// One query token at absolute position `position` attends to K/V rows 0..position (the
// window's last W of them under a sliding window), with the variant's scale, soft-cap and
// sinks. q: [H, Dh]; keys, values: [>= position + 1, KVH, Dh]; out: [H, Dh].
// Each head's result depends only on its own inputs (no batch-dependent reduction).
void causal_attention_one_token(const float* q, const float* keys, const float* values, int64_t position,
                                int num_heads, int num_kv_heads, int head_dim, float* out,
                                const AttentionVariant& variant = {});

}  // namespace moert::attention
