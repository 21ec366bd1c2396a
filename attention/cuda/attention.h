// CUDA paged attention and KV-cache writes: host launchers only (device pointers, sizes, a
// stream; no CUDA headers). Twins of attention/cpu (write_kv_slots, paged_attention_forward,
// causal_attention_one_token, copy_kv_blocks); layouts and rules in attention/paged_kv.h and
// docs/kv-cache.md. Every launcher returns 0 or the CUDA error code of the launch.
//
// Shapes: T query rows, H heads, KVH kv heads, Dh head_dim, B sequences.
#pragma once

#include <cstdint>

#include "attention/paged_kv.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// K/V rows [T, KVH, Dh] (F32) into their slots [T] (-1: skipped) of `layer` (storage, and
// FP8 scales, in device memory), converted to layer.dtype with the FP8 block-scale rules of
// attention/paged_kv.h. Rows are written in order (a later row of the same block may grow
// its scale and re-encode the earlier ones).
int write_kv(const attention::PagedKvLayer& layer, const float* k, const float* v, const int64_t* slots,
             int64_t num_tokens, CUstream_st* stream);

// Causal attention of the T rows of q [T, H, Dh] over the paged cache, per the plan (every
// array of `plan`, and plan.variant.sinks when set, in device memory); out [T, H, Dh].
int paged_attention(const float* q, const attention::PagedKvLayer& layer, const attention::PagedAttentionPlan& plan,
                    int64_t num_rows, int num_heads, float* out, CUstream_st* stream);

// One sequence over a contiguous F32 history: query row t at position first_position + t
// attends to keys/values rows 0 .. first_position + t ([>= first_position + T, KVH, Dh]),
// under `variant` (sinks in device memory). q, out: [T, H, Dh].
int contiguous_attention(const float* q, int64_t num_tokens, const float* keys, const float* values,
                         int64_t first_position, int num_heads, int num_kv_heads, int head_dim,
                         const attention::AttentionVariant& variant, float* out, CUstream_st* stream);

// Whole blocks src[i] -> dst[i] in order (data and FP8 scales; a latent cache once).
// src, dst: device memory [num_copies].
int copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst, int64_t num_copies,
                   CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
