// The plain data shared by the paged-attention planner and every backend's kernels: one
// layer's paged K/V storage and one step's plan (FlashInfer-style indptr arrays). No
// kernel code here; the CPU kernels are in attention/cpu, the backend table in
// runtime/backend. Cache kinds and element types: docs/kv-cache.md.
//
// Shapes: B sequences in the step, NB physical blocks, BS block_size, KVH kv heads, Dh head_dim.
#pragma once

#include <cstdint>

#include "attention/attention_variant.h"
#include "core/device.h"
#include "core/dtype.h"

namespace moert::attention {

// One layer's paged K/V storage, layout [NB, BS, KVH, Dh] for each of K and V (vLLM V1
// flash layout), elements of `dtype`: F32, BF16 or F8_E4M3. Slot s = block * BS + offset
// addresses row [s, KVH, Dh]. Block 0 is the reserved null block of the block pool:
// attention never reads it.
//
// F8_E4M3 carries one F32 scale per block and kv head for K and for V (k_scales, v_scales
// [NB, KVH]): value = e4m3(code) * scale. A (block, head) scale is set by the write of the
// block's offset 0 (the first position a sequence writes into it) to amax / 448 of that
// head's row, rounded up to a power of two, and only grows afterwards (the head's earlier rows in the block are then
// re-encoded), so no element ever saturates.
//
// A latent cache (MLA, docs/mla.md) stores one row per token that is both key and value:
// v_cache == k_cache (and v_scales == k_scales), KVH = 1, Dh = the row width. Writers and
// block copies then touch the storage once; readers read the same row twice.
struct PagedKvLayer {
  void* k_cache = nullptr;   // [NB, BS, KVH, Dh] of dtype
  void* v_cache = nullptr;   // [NB, BS, KVH, Dh] of dtype (== k_cache for a latent cache)
  int num_blocks = 0;        // NB
  int block_size = 0;        // BS
  int num_kv_heads = 0;      // KVH
  int head_dim = 0;          // Dh
  DType dtype = DType::kF32;
  float* k_scales = nullptr;  // [NB, KVH], F8_E4M3 only
  float* v_scales = nullptr;  // [NB, KVH], F8_E4M3 only
  Device device{};            // where the cache and its scales live (the backend's own)
};

// The plan for one step, plain data built by the CPU scheduler. The kernel only reads it.
// Beyond the page tables it carries the attention variant of the layer
// (attention/attention_variant.h); with a sliding window, pages wholly before a row's window
// are never read and may be the null block. Sinks join the denominator as exp(sink - max),
// max taken over the scores and the sink, without a value row.
struct PagedAttentionPlan {
  int num_seqs = 0;                          // B
  const int32_t* qo_indptr = nullptr;        // [B+1] rows of q/out of sequence b: [qo_indptr[b], qo_indptr[b+1])
  const int32_t* kv_page_indptr = nullptr;   // [B+1] range of kv_page_indices of sequence b
  const int32_t* kv_page_indices = nullptr;  // [kv_page_indptr[B]] block ids, in logical order
  const int32_t* kv_last_page_len = nullptr; // [B] tokens in the last page, in [1, BS]
  AttentionVariant variant;
  // Where the four arrays live: host data (the scheduler's), or a step graph's device arrays.
  Device device{};
  // qo_indptr[B] as host data, for a plan whose arrays are on a device (then qo_indptr[B]
  // cannot be read here); unused for a host plan.
  int64_t num_rows_when_on_device = 0;
};

// DeepSeek Sparse Attention (docs/sparse-attention.md): the lightning indexer's query side of
// one step, what the sparse ops take beside a latent layer whose rows carry kI (num_heads 0: a
// layer without an indexer, which reuses an earlier layer's selection). T rows, NI heads of DI.
struct SparseIndexQuery {
  const float* queries = nullptr;  // [T, NI, DI], RoPE'd
  const float* weights = nullptr;  // [T, NI] head weights (may be negative), used times weight_scale
  float weight_scale = 1.0f;       // NI^-1/2
  int num_heads = 0;               // NI
  int head_dim = 0;                // DI
  float scale = 0.0f;              // applied to each q . kI before the ReLU (DI^-1/2)
  int top_k = 0;                   // K >= 1
  Device device{};                 // where queries and weights live
};

// Bytes of one K/V element of a cache of `dtype` (F32 4, BF16 2, F8_E4M3 1).
inline int64_t kv_element_bytes(DType dtype) {
  return dtype == DType::kF32 ? 4 : dtype == DType::kBF16 ? 2 : 1;
}

}  // namespace moert::attention
