// The plain data shared by the paged-attention planner and every backend's kernels: one
// layer's paged K/V storage and one step's plan (FlashInfer-style indptr arrays). No
// kernel code here; the CPU kernels are in attention/cpu, the backend table in
// runtime/backend.
//
// Shapes: B sequences in the step, NB physical blocks, BS block_size, KVH kv heads, Dh head_dim.
#pragma once

#include <cstdint>

namespace moert::attention {

// One layer's paged K/V storage, F32, layout [NB, BS, KVH, Dh] for each of K and V
// (vLLM V1 flash layout). Slot s = block * BS + offset addresses row [s, KVH, Dh].
// Block 0 is the reserved null block of the block pool: attention never reads it.
struct PagedKvLayer {
  float* k_cache = nullptr;  // [NB, BS, KVH, Dh]
  float* v_cache = nullptr;  // [NB, BS, KVH, Dh]
  int num_blocks = 0;        // NB
  int block_size = 0;        // BS
  int num_kv_heads = 0;      // KVH
  int head_dim = 0;          // Dh
};

// The plan for one step, plain data built by the CPU scheduler. The kernel only reads it.
struct PagedAttentionPlan {
  int num_seqs = 0;                          // B
  const int32_t* qo_indptr = nullptr;        // [B+1] rows of q/out of sequence b: [qo_indptr[b], qo_indptr[b+1])
  const int32_t* kv_page_indptr = nullptr;   // [B+1] range of kv_page_indices of sequence b
  const int32_t* kv_page_indices = nullptr;  // [kv_page_indptr[B]] block ids, in logical order
  const int32_t* kv_last_page_len = nullptr; // [B] tokens in the last page, in [1, BS]
};

}  // namespace moert::attention
