// DeepSeek Sparse Attention over a paged latent cache (docs/sparse-attention.md), on the CPU:
// the lightning indexer's selection per query row and MLA attention restricted to the
// selected positions. The cache rows of a DSA layer are [key (key_width values: MLA's
// c | k_pe) | kI (DI values)] (one kv head, head_dim = key_width + DI, attention/paged_kv.h);
// the plan is the step's ordinary causal plan (attention/cpu/paged_attention.h: query row i of
// sequence b sits at position kv_len - q_len + i and sees positions 0 .. that position).
//
// Shape legend: T query rows, H attention heads, NI / DI indexer heads / width, K = top_k.
#pragma once

#include <cstdint>

#include "attention/paged_kv.h"  // PagedKvLayer, PagedAttentionPlan, SparseIndexQuery
#include "core/thread_pool.h"

namespace moert::attention {


// selected [T, K]: for each query row, the min(K, visible) positions of highest
// sum_h (weight_scale * weights[h]) * relu(scale * q[h] . kI[t]) (lightning_index_scores), ties to the lower
// position, in ascending order, then -1 up to K. kI of position t is read from channels
// [key_offset, key_offset + DI) of its cache row, widened to F32. The plan is validated as
// paged_attention_forward validates it (MOERT_CHECK). Rows outside every sequence untouched.
void paged_sparse_index_select(const SparseIndexQuery& index, const PagedKvLayer& layer, int key_offset,
                               const PagedAttentionPlan& plan, int32_t* selected, ThreadPool& pool);

// Attention of each query row over its selected positions only (selected [T, K] as above,
// ascending, -1 padding): q, out [T, H, key_width]; keys = values = the first key_width
// channels of the rows (MLA's absorbed form reads [c | k_pe] as key and c as value). Per
// (row, head) the same float operations as causal_attention_one_token over the selected rows
// laid out contiguously, so with every position selected the result is the dense one bit for
// bit (F32 cache). The plan's variant gives the softmax scale (windows and sinks are not
// supported here: MOERT_CHECK).
void paged_sparse_attention(const float* q, const PagedKvLayer& layer, int key_width, const PagedAttentionPlan& plan,
                            int num_heads, const int32_t* selected, int top_k, float* out, ThreadPool& pool);

}  // namespace moert::attention
