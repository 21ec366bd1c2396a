// Paged K/V storage and causal GQA attention over it, on the CPU (the twin of a future
// CUDA kernel). The planner (CPU scheduler) hands the kernel plain data in the style of
// FlashInfer's page.cuh: qo_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len.
//
// Shape legend: B sequences in the step, T query/new-token rows in the step (all
// sequences together), H query heads, KVH kv heads (H % KVH == 0), Dh head_dim,
// NB physical blocks, BS block_size (tokens per block).
//
// Terms: a sequence's kv_len = (num_pages - 1) * BS + last_page_len is the number of
// positions whose K/V are in its pages; q_len = its rows in this step, which are always
// the LAST q_len positions (position of row i = kv_len - q_len + i).
//
// Cache element types: F32 (exact), BF16 (rounded to nearest even on write) and F8_E4M3
// with a per-block scale (attention/paged_kv.h); rows are widened to F32 for the math.
//
// Invariant: with an F32 cache and the default plan variant (no window, sinks or soft-cap,
// scale 1/sqrt(Dh)), for every (query row, head) the output is bit-identical to
// causal_attention_one_token (attention/cpu/dense_attention.h) run on the same K/V laid out
// contiguously: the same float operations in the same order. Hence a row's result never
// depends on the other sequences in the batch, on how a prefill is chunked, or on the
// thread count.
#pragma once

#include <cstdint>

#include "attention/paged_kv.h"
#include "core/thread_pool.h"

namespace moert::attention {

// Writes the K/V rows of T new tokens into their slots. k, v: [T, KVH, Dh]; slots: [T]
// (slot = block * BS + offset). A slot of -1 is padding and is skipped (vLLM's
// PAD_SLOT_ID); any other slot must lie in [0, NB * BS) (MOERT_CHECK).
void write_kv_slots(const PagedKvLayer& layer, const float* k, const float* v, const int64_t* slots,
                    int64_t num_tokens);

// Copy-on-write of whole blocks: for each i, block dst[i] := block src[i], K and V.
// src, dst: [num_copies], ids in [0, NB). Copies run in order i = 0, 1, ...
void copy_kv_blocks(const PagedKvLayer& layer, const int32_t* src, const int32_t* dst, int64_t num_copies);

// Causal GQA attention over pages. The K/V of all kv_len positions of every sequence,
// including this step's new tokens, must already be written (write_kv_slots). Query row i
// of sequence b attends to kv positions [0, kv_len - q_len + i]. q, out: [T, H, Dh] with
// T >= qo_indptr[B]; rows outside every [qo_indptr[b], qo_indptr[b+1]) are left untouched.
// The plan's variant applies (scale, soft-cap, sliding window, sinks: attention/paged_kv.h).
// The plan is validated up front with MOERT_CHECK (monotone indptrs, 0 <= q_len <= kv_len,
// last_page_len in [1, BS], page ids in [1, NB) except pages wholly behind a window, which
// may be 0), naming the offending value. K/V are read only through the page indices.
void paged_attention_forward(const float* q, const PagedKvLayer& layer, const PagedAttentionPlan& plan,
                             int num_heads, float* out, ThreadPool& pool);

}  // namespace moert::attention
