#include "attention/cpu/sparse_attention.h"

#include <algorithm>
#include <vector>

#include "attention/cpu/dense_attention.h"
#include "attention/cpu/lightning_indexer.h"
#include "core/check.h"
#include "quant/bf16.h"
#include "quant/formats/minifloat.h"

namespace moert::attention {
namespace {

// One query row of the plan: its sequence's pages and the number of positions it sees.
struct QueryRow {
  int64_t row;
  const int32_t* pages;
  int64_t visible;  // position + 1
};

// Every query row of the plan, validated (monotone indptrs, q_len <= kv_len, pages in [1, NB)).
std::vector<QueryRow> query_rows(const PagedKvLayer& layer, const PagedAttentionPlan& plan) {
  MOERT_CHECK(layer.num_kv_heads == 1, "sparse attention reads one latent row per token, got "
                                           << layer.num_kv_heads << " kv heads");
  MOERT_CHECK(layer.dtype == DType::kF32 || layer.dtype == DType::kBF16 || layer.dtype == DType::kF8E4M3,
              "paged kv layer dtype " << dtype_name(layer.dtype) << " is not F32, BF16 or F8_E4M3");
  MOERT_CHECK(layer.dtype != DType::kF8E4M3 || layer.k_scales != nullptr, "F8_E4M3 latent layer without scales");
  MOERT_CHECK(plan.variant.sliding_window == 0 && plan.variant.sinks == nullptr && plan.variant.soft_cap == 0.0f,
              "sparse attention takes no window, sinks or soft-cap");
  std::vector<QueryRow> rows;
  for (int b = 0; b < plan.num_seqs; ++b) {
    const int32_t q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
    const int32_t num_pages = plan.kv_page_indptr[b + 1] - plan.kv_page_indptr[b];
    const int32_t last = plan.kv_last_page_len[b];
    MOERT_CHECK(q_len >= 0 && num_pages >= 1 && last >= 1 && last <= layer.block_size,
                "sequence " << b << ": q_len " << q_len << ", " << num_pages << " pages, last page " << last);
    const int64_t kv_len = static_cast<int64_t>(num_pages - 1) * layer.block_size + last;
    MOERT_CHECK(q_len <= kv_len, "sequence " << b << ": q_len = " << q_len << " > kv_len = " << kv_len);
    const int32_t* pages = plan.kv_page_indices + plan.kv_page_indptr[b];
    for (int32_t p = 0; p < num_pages; ++p) {
      MOERT_CHECK(pages[p] >= 1 && pages[p] < layer.num_blocks,
                  "sequence " << b << " page " << p << " = block " << pages[p] << " outside [1, " << layer.num_blocks
                              << ")");
    }
    for (int32_t i = 0; i < q_len; ++i) {
      rows.push_back({plan.qo_indptr[b] + i, pages, kv_len - q_len + i + 1});
    }
  }
  return rows;
}

// Channels [first, first + width) of position `position`'s row, widened to F32.
void read_row(const PagedKvLayer& layer, const int32_t* pages, int64_t position, int first, int width, float* out) {
  const int64_t block = pages[position / layer.block_size];
  const int64_t slot = block * layer.block_size + position % layer.block_size;
  const int64_t at = slot * layer.head_dim + first;
  if (layer.dtype == DType::kF32) {
    std::copy_n(static_cast<const float*>(layer.k_cache) + at, width, out);
  } else if (layer.dtype == DType::kBF16) {
    const uint16_t* in = static_cast<const uint16_t*>(layer.k_cache) + at;
    for (int d = 0; d < width; ++d) out[d] = quant::bf16_to_f32(in[d]);
  } else {
    const uint8_t* in = static_cast<const uint8_t*>(layer.k_cache) + at;
    const float scale = layer.k_scales[block];  // one kv head
    for (int d = 0; d < width; ++d) out[d] = quant::e4m3_decode(in[d]) * scale;
  }
}

}  // namespace

void paged_sparse_index_select(const SparseIndexQuery& index, const PagedKvLayer& layer, int key_offset,
                               const PagedAttentionPlan& plan, int32_t* selected, ThreadPool& pool) {
  MOERT_CHECK(index.top_k >= 1 && index.num_heads >= 1 && index.head_dim >= 1,
              "sparse index: top_k " << index.top_k << ", " << index.num_heads << " x " << index.head_dim);
  MOERT_CHECK(key_offset >= 0 && key_offset + index.head_dim <= layer.head_dim,
              "indexer keys at [" << key_offset << ", " << key_offset + index.head_dim << ") outside rows of "
                                  << layer.head_dim);
  const std::vector<QueryRow> rows = query_rows(layer, plan);
  const int64_t q_width = static_cast<int64_t>(index.num_heads) * index.head_dim;
  pool.parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys, scores, weights(static_cast<size_t>(index.num_heads));
    for (int64_t r = begin; r < end; ++r) {
      const QueryRow& q = rows[static_cast<size_t>(r)];
      keys.resize(static_cast<size_t>(q.visible * index.head_dim));
      scores.resize(static_cast<size_t>(q.visible));
      for (int64_t t = 0; t < q.visible; ++t) read_row(layer, q.pages, t, key_offset, index.head_dim, &keys[t * index.head_dim]);
      for (int h = 0; h < index.num_heads; ++h) {
        weights[static_cast<size_t>(h)] = index.weight_scale * index.weights[q.row * index.num_heads + h];
      }
      lightning_index_scores(index.queries + q.row * q_width, weights.data(), index.num_heads,
                             index.head_dim, keys.data(), q.visible, index.scale, scores.data());
      const std::vector<int32_t> top = select_top_keys(scores.data(), q.visible, index.top_k);
      int32_t* out = selected + q.row * index.top_k;
      std::copy(top.begin(), top.end(), out);
      std::fill(out + top.size(), out + index.top_k, -1);
    }
  });
}

void paged_sparse_attention(const float* q, const PagedKvLayer& layer, int key_width, const PagedAttentionPlan& plan,
                            int num_heads, const int32_t* selected, int top_k, float* out, ThreadPool& pool) {
  MOERT_CHECK(top_k >= 1 && key_width >= 1 && key_width <= layer.head_dim,
              "sparse attention: top_k " << top_k << ", key width " << key_width << " of rows of " << layer.head_dim);
  const std::vector<QueryRow> rows = query_rows(layer, plan);
  const int64_t width = static_cast<int64_t>(num_heads) * key_width;
  pool.parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys(static_cast<size_t>(top_k) * key_width);
    for (int64_t r = begin; r < end; ++r) {
      const QueryRow& query = rows[static_cast<size_t>(r)];
      const int32_t* chosen = selected + query.row * top_k;
      int64_t count = 0;
      for (; count < top_k && chosen[count] >= 0; ++count) {
        MOERT_CHECK(chosen[count] < query.visible && (count == 0 || chosen[count] > chosen[count - 1]),
                    "row " << query.row << ": selected position " << chosen[count] << " (must ascend, below "
                           << query.visible << ")");
        read_row(layer, query.pages, chosen[count], 0, key_width, &keys[static_cast<size_t>(count * key_width)]);
      }
      MOERT_CHECK(count >= 1, "row " << query.row << " selects no position");
      causal_attention_one_token(q + query.row * width, keys.data(), keys.data(), count - 1, num_heads, 1, key_width,
                                 out + query.row * width, plan.variant);
    }
  });
}

}  // namespace moert::attention
