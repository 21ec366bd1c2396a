// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5; docs/sparse-attention.md):
// each query row scores every key position it may see, and attention then reads only the
// `index_topk` best. These are the portable CPU kernels of the scoring and the selection.
//
// Shape legend: NI indexer heads of width DI; L visible key positions 0 .. L-1 of one sequence
// (a query at position i sees L = i + 1).
#pragma once

#include <cstdint>
#include <vector>

namespace moert::attention {

// score[t] = sum_h weights[h] * relu(scale * q[h] . keys[t]) for t < L: one query row's index
// scores. q: [NI, DI]; weights: [NI] (already scaled as the model wants, may be negative);
// keys: [L, DI] (the indexer keys kept beside each token's latent row); scores: [L].
void lightning_index_scores(const float* q, const float* weights, int num_heads, int head_dim, const float* keys,
                            int64_t num_keys, float scale, float* scores);

// The positions attention reads for one query row: the min(top_k, L) positions of the largest
// scores, a higher score first and, on equal scores, the lower position first; returned in
// ascending position order (what the attention kernel walks). top_k >= 1.
std::vector<int32_t> select_top_keys(const float* scores, int64_t num_keys, int top_k);

// LayerNorm with bias over rows of `dim`: y = (x - mean) / sqrt(var + eps) * weight + bias,
// var the biased variance (the indexer key's k_norm). y may alias x.
void layer_norm(const float* x, int64_t num_rows, int dim, const float* weight, const float* bias, float eps,
                float* y);

}  // namespace moert::attention
