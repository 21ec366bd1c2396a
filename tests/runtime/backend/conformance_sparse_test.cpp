// Backend conformance (conformance_test.cpp): DeepSeek Sparse Attention's ops
// (docs/sparse-attention.md) against float64 references written here: the lightning indexer's
// selection over a paged latent cache whose rows carry kI ([key | kI]), attention over the
// selected positions only, and the indexer key's LayerNorm with bias.
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"

namespace moert::backend::conformance {
namespace {

// float64 selection of one query row: the min(K, visible) positions of highest
// sum_h w_h * relu(scale * q_h . k_t), ties to the lower position, ascending, -1 padded.
std::vector<int32_t> reference_selection(const float* q, const float* w, double weight_scale, int heads, int dim,
                                         const std::vector<std::vector<float>>& keys, int64_t visible, double scale,
                                         int top_k) {
  std::vector<double> scores(static_cast<size_t>(visible));
  for (int64_t t = 0; t < visible; ++t) {
    double score = 0.0;
    for (int h = 0; h < heads; ++h) {
      double dot = 0.0;
      for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[h * dim + d]) * keys[static_cast<size_t>(t)][d];
      score += weight_scale * w[h] * std::max(0.0, scale * dot);
    }
    scores[static_cast<size_t>(t)] = score;
  }
  std::vector<int32_t> order(static_cast<size_t>(visible));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<size_t>(std::min<int64_t>(visible, top_k)));
  std::sort(order.begin(), order.end());
  order.resize(static_cast<size_t>(top_k), -1);
  return order;
}

// Three sequences over shuffled blocks of a `dtype` latent cache; rows [key (12) | kI (8)];
// top-4 of up to 14 positions. The reference reads the rows as the cache stores them (BF16:
// rounded). Checks the selections exactly and the attention by relative L2 error.
void check_sparse_ops(Backend& backend, std::mt19937& rng, DType dtype) {
  std::normal_distribution<float> normal;
  auto random_floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  auto stored = [&](float x) { return dtype == DType::kBF16 ? quant::bf16_to_f32(quant::f32_to_bf16(x)) : x; };
  const int block_size = 4, num_blocks = 16, key_width = 12, index_dim = 8, width = key_width + index_dim;
  const int heads = 3, index_heads = 2, top_k = 4;
  const std::vector<int> kv_lens{3, 9, 14}, q_lens{3, 2, 14};
  const Shape shape{num_blocks, block_size, 1, width};
  Buffer cache = backend.allocate(dtype, shape);
  attention::PagedKvLayer layer{cache.view().data, cache.view().data, num_blocks, block_size, 1, width, dtype};
  layer.device = backend.device();
  std::vector<int32_t> free_blocks(num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, pages, last_len;
  std::vector<std::vector<std::vector<float>>> seq_rows;  // [seq][position][width]
  size_t next = 0;
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    const int num_pages = (kv_lens[b] + block_size - 1) / block_size;
    std::vector<int32_t> table(free_blocks.begin() + static_cast<std::ptrdiff_t>(next),
                               free_blocks.begin() + static_cast<std::ptrdiff_t>(next + num_pages));
    next += static_cast<size_t>(num_pages);
    std::vector<std::vector<float>> rows;
    std::vector<float> flat;
    std::vector<int64_t> slots;
    for (int t = 0; t < kv_lens[b]; ++t) {
      rows.push_back(random_floats(width));
      // Position 5 repeats position 2's kI: equal scores, the tie goes to position 2.
      if (t == 5) std::copy_n(rows[2].begin() + key_width, index_dim, rows[5].begin() + key_width);
      flat.insert(flat.end(), rows.back().begin(), rows.back().end());
      slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(t / block_size)]) * block_size + t % block_size);
    }
    const Buffer device_rows = backend.allocate(DType::kF32, {static_cast<int64_t>(flat.size())});
    backend.copy_bytes(device_rows.ptr<void>(), flat, static_cast<int64_t>(flat.size() * sizeof(float)));
    const Buffer device_slots = backend.allocate(DType::kI64, {static_cast<int64_t>(slots.size())});
    backend.copy_bytes(device_slots.ptr<void>(), slots, static_cast<int64_t>(slots.size() * sizeof(int64_t)));
    backend.write_kv(layer, device_rows.ptr<float>(), device_rows.ptr<float>(), device_slots.ptr<int64_t>(),
                       kv_lens[b]);
    for (std::vector<float>& r : rows) std::transform(r.begin(), r.end(), r.begin(), stored);
    seq_rows.push_back(std::move(rows));
    qo_indptr.push_back(qo_indptr.back() + q_lens[b]);
    pages.insert(pages.end(), table.begin(), table.end());
    page_indptr.push_back(static_cast<int32_t>(pages.size()));
    last_len.push_back(kv_lens[b] - (num_pages - 1) * block_size);
  }
  const int64_t rows = qo_indptr.back();
  attention::PagedAttentionPlan plan;
  plan.num_seqs = static_cast<int>(kv_lens.size());
  plan.qo_indptr = qo_indptr.data();
  plan.kv_page_indptr = page_indptr.data();
  plan.kv_page_indices = pages.data();
  plan.kv_last_page_len = last_len.data();
  plan.variant.softmax_scale = 0.3f;

  const std::vector<float> index_q = random_floats(rows * index_heads * index_dim);
  std::vector<float> index_w = random_floats(rows * index_heads);  // mixed signs
  const std::vector<float> q = random_floats(rows * heads * key_width);
  auto upload = [&](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    Buffer buffer = backend.allocate(sizeof(T) == 4 && std::is_floating_point_v<T> ? DType::kF32 : DType::kI32,
                                       {static_cast<int64_t>(host.size())});
    backend.copy_bytes(buffer.ptr<void>(), host, static_cast<int64_t>(host.size() * sizeof(T)));
    return buffer;
  };
  const Buffer d_index_q = upload(index_q), d_index_w = upload(index_w), d_q = upload(q);
  Buffer d_selected = backend.allocate(DType::kI32, {rows * top_k});
  Buffer d_out = backend.allocate(DType::kF32, {rows * heads * key_width});
  attention::SparseIndexQuery index;
  index.queries = d_index_q.data<float>();
  index.weights = d_index_w.data<float>();
  index.device = backend.device();
  index.num_heads = index_heads;
  index.head_dim = index_dim;
  index.weight_scale = 0.7f;
  index.scale = 0.35f;
  index.top_k = top_k;
  backend.sparse_index_select(index, layer, key_width, plan, d_selected.ptr<int32_t>());
  backend.sparse_paged_attention(d_q.ptr<float>(), layer, key_width, plan, heads, d_selected.ptr<int32_t>(), top_k,
                                   d_out.ptr<float>());
  std::vector<int32_t> selected(static_cast<size_t>(rows * top_k));
  std::vector<float> out(static_cast<size_t>(rows * heads * key_width));
  backend.copy_bytes(selected, d_selected.ptr<const void>(), static_cast<int64_t>(selected.size() * sizeof(int32_t)));
  backend.copy_bytes(out, d_out.ptr<const void>(), static_cast<int64_t>(out.size() * sizeof(float)));

  std::vector<double> expected(out.size());
  int sparse_rows = 0;
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    std::vector<std::vector<float>> index_keys;
    for (const std::vector<float>& r : seq_rows[b]) index_keys.emplace_back(r.begin() + key_width, r.end());
    for (int i = 0; i < q_lens[b]; ++i) {
      const int64_t row = qo_indptr[b] + i, visible = kv_lens[b] - q_lens[b] + i + 1;
      const std::vector<int32_t> want =
          reference_selection(&index_q[static_cast<size_t>(row * index_heads * index_dim)],
                              &index_w[static_cast<size_t>(row * index_heads)], 0.7, index_heads, index_dim, index_keys,
                              visible, 0.35, top_k);
      const std::vector<int32_t> got(selected.begin() + row * top_k, selected.begin() + (row + 1) * top_k);
      EXPECT_EQ(got, want) << "row " << row;
      sparse_rows += visible > top_k ? 1 : 0;
      for (int h = 0; h < heads; ++h) {  // float64 softmax attention over the wanted set
        const float* qh = &q[static_cast<size_t>((row * heads + h) * key_width)];
        std::vector<double> logits;
        for (int32_t t : want) {
          if (t < 0) break;
          double dot = 0.0;
          for (int d = 0; d < key_width; ++d) dot += static_cast<double>(qh[d]) * seq_rows[b][static_cast<size_t>(t)][d];
          logits.push_back(dot * 0.3f);
        }
        const double top = *std::max_element(logits.begin(), logits.end());
        double denominator = 0.0;
        for (double& l : logits) denominator += (l = std::exp(l - top));
        for (int d = 0; d < key_width; ++d) {
          double acc = 0.0;
          for (size_t j = 0; j < logits.size(); ++j) acc += logits[j] / denominator * seq_rows[b][static_cast<size_t>(want[j])][d];
          expected[static_cast<size_t>((row * heads + h) * key_width + d)] = acc;
        }
      }
    }
  }
  EXPECT_GE(sparse_rows, 10);  // the selection is exercised, not only "everything visible"
  EXPECT_LT(relative_l2_error(out.data(), expected.data(), static_cast<int64_t>(out.size())), kTolerance);
}

TEST_P(Conformance, SparseIndexSelectionAndSparseAttentionMatchFloat64) {
  check_sparse_ops(*backend_, rng_, DType::kF32);
  check_sparse_ops(*backend_, rng_, DType::kBF16);
}

TEST_P(Conformance, LayerNormWithBiasMatchesFloat64) {
  const int64_t rows = 5, dim = 24;
  std::vector<float> x = random_floats(rows * dim, 3.0f), weight = random_floats(dim), bias = random_floats(dim);
  for (float& v : x) v += 1.5f;  // a mean far from 0
  std::vector<double> expected(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < dim; ++i) mean += x[static_cast<size_t>(r * dim + i)];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += std::pow(x[static_cast<size_t>(r * dim + i)] - mean, 2);
    const double inv = 1.0 / std::sqrt(var / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i) {
      expected[static_cast<size_t>(r * dim + i)] = (x[static_cast<size_t>(r * dim + i)] - mean) * inv * weight[i] + bias[i];
    }
  }
  Buffer d_x = backend_->allocate(DType::kF32, {rows * dim});
  backend_->copy_bytes(d_x.ptr<void>(), x, static_cast<int64_t>(x.size() * sizeof(float)));
  backend_->place_host_weights(weight.data(), dim * 4);
  backend_->place_host_weights(bias.data(), dim * 4);
  backend_->layer_norm(d_x.ptr<float>(), rows, dim, weight.data(), bias.data(), 1e-6f);
  backend_->copy_bytes(x, d_x.ptr<const void>(), static_cast<int64_t>(x.size() * sizeof(float)));
  EXPECT_LT(relative_l2_error(x.data(), expected.data(), rows * dim), kTolerance);
}

}  // namespace
}  // namespace moert::backend::conformance
