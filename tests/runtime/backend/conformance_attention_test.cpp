// Backend conformance (conformance_test.cpp): paged attention over ragged block tables, its
// variants (scale, soft cap, window, sinks), BF16 / FP8 / latent caches, against float64.
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"

namespace moert::backend::conformance {
namespace {

// The attention variant a paged-attention case runs (attention/attention_variant.h; sinks
// drawn at random when set).
struct VariantCase {
  float softmax_scale = 0.0f;  // 0: 1/sqrt(Dh)
  float soft_cap = 0.0f;
  int sliding_window = 0;
  bool sinks = false;
};

// Ragged block tables over a shuffled pool of `dtype` storage the backend allocated: write
// K/V through slots, attend causally under `variant`, copy a block; against float64 dense
// causal attention over each sequence. With a window, the pages wholly behind every row's
// window are handed over as the null block, which holds NaN: reading one would show.
// `round_to_bf16` rounds the reference's K/V as a BF16 cache stores them. `latent`: one kv
// head whose row is key and value at once, in one aliased storage (MLA, attention/paged_kv.h).
// Returns the relative L2 error.
// The sizes of a paged-attention case: small by default (every backend, the emulation too);
// at least 4 sequences, the fourth of at least 7 positions.
struct AttentionShape {
  int block_size = 4, kv_heads = 2, heads = 6, head_dim = 8, num_blocks = 40;
  std::vector<int> kv_lens{1, 4, 5, 13};  // per sequence, positions with K/V
  std::vector<int> q_lens{1, 4, 2, 13};   // the last q_len positions are queries
};

double paged_attention_error(Backend& backend, std::mt19937& rng, DType dtype, const VariantCase& variant,
                             bool round_to_bf16, bool latent = false, const AttentionShape& sizes = {}) {
  const int block_size = sizes.block_size, kv_heads = latent ? 1 : sizes.kv_heads, heads = sizes.heads;
  const int head_dim = sizes.head_dim, num_blocks = sizes.num_blocks;
  const std::vector<int>& kv_lens = sizes.kv_lens;
  const std::vector<int>& q_lens = sizes.q_lens;
  std::normal_distribution<float> normal;
  auto random_floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  const Shape shape{num_blocks, block_size, kv_heads, head_dim};
  Buffer k_cache = backend.allocate(dtype, shape), v_cache = backend.allocate(dtype, shape);
  Buffer k_scales = backend.allocate(DType::kF32, {num_blocks, kv_heads});
  Buffer v_scales = backend.allocate(DType::kF32, {num_blocks, kv_heads});
  const Buffer& values_storage = latent ? k_cache : v_cache;
  const Buffer& value_scales = latent ? k_scales : v_scales;
  // The storage is on the backend's device: filled and read through copy_bytes.
  const int64_t block_bytes = static_cast<int64_t>(k_cache.size_bytes()) / num_blocks;
  const std::vector<unsigned char> nan_block(static_cast<size_t>(block_bytes), 0xFF);  // NaN in every dtype
  backend.copy_bytes(k_cache.ptr<void>(), nan_block, block_bytes);  // the null block
  backend.copy_bytes(v_cache.ptr<void>(), nan_block, block_bytes);
  attention::PagedKvLayer layer{k_cache.view().data, values_storage.view().data, num_blocks, block_size, kv_heads,
                                head_dim, dtype};
  layer.device = backend.device();
  if (dtype == DType::kF8E4M3) {
    layer.k_scales = k_scales.data<float>();
    layer.v_scales = value_scales.data<float>();
    const std::vector<float> ones(static_cast<size_t>(kv_heads), 1.0f);
    backend.copy_bytes(DevicePtr<float>(layer.k_scales, layer.device), ones, kv_heads * static_cast<int64_t>(sizeof(float)));
    backend.copy_bytes(DevicePtr<float>(layer.v_scales, layer.device), ones, kv_heads * static_cast<int64_t>(sizeof(float)));
  }
  std::vector<int32_t> free_blocks(num_blocks - 1);
  std::iota(free_blocks.begin(), free_blocks.end(), 1);  // block 0 is the null block
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, pages, last_len;
  std::vector<std::vector<float>> seq_k, seq_v;
  size_t next_block = 0;
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    const int num_pages = (kv_lens[b] + block_size - 1) / block_size;
    std::vector<int32_t> table(free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block),
                               free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block + num_pages));
    next_block += static_cast<size_t>(num_pages);
    seq_k.push_back(random_floats(kv_lens[b] * kv_heads * head_dim));
    seq_v.push_back(random_floats(kv_lens[b] * kv_heads * head_dim));
    // Later positions grow in magnitude (up to 32 positions, then again), so FP8 block scales
    // must grow as rows arrive.
    for (int p = 0; p < kv_lens[b]; ++p) {
      for (int i = 0; i < kv_heads * head_dim; ++i) seq_v.back()[static_cast<size_t>(p * kv_heads * head_dim + i)] *= 1.0f + 0.3f * (p % 32);
    }
    if (latent) seq_k.back() = seq_v.back();
    std::vector<int64_t> slots;
    for (int p = 0; p < kv_lens[b]; ++p) slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / block_size)]) * block_size + p % block_size);
    slots.push_back(-1);  // padding is skipped
    std::vector<float> k_rows = seq_k.back(), v_rows = seq_v.back();
    k_rows.resize(k_rows.size() + static_cast<size_t>(kv_heads * head_dim), 99.0f);
    v_rows.resize(k_rows.size(), 99.0f);
    if (latent) v_rows = k_rows;  // the model hands the same row as key and value
    // Sequence 3 arrives in two writes (prefill, then the rest), as the engine writes it.
    const int64_t split = b == 3 ? 6 : 0;
    const int64_t row_floats = kv_heads * head_dim;
    if (split > 0) backend.write_kv(layer, k_rows, v_rows, slots, split);
    backend.write_kv(layer, host_ptr(k_rows.data() + split * row_floats), host_ptr(v_rows.data() + split * row_floats), host_ptr(slots.data() + split),
                     static_cast<int64_t>(slots.size()) - split);
    if (variant.sliding_window > 0) {  // pages wholly behind the first row's window: null
      const int first_key = std::max(0, kv_lens[b] - q_lens[b] + 1 - variant.sliding_window);
      for (int p = 0; p < first_key / block_size; ++p) table[static_cast<size_t>(p)] = 0;
    }
    pages.insert(pages.end(), table.begin(), table.end());
    page_indptr.push_back(static_cast<int32_t>(pages.size()));
    last_len.push_back(kv_lens[b] - (num_pages - 1) * block_size);
    qo_indptr.push_back(qo_indptr.back() + q_lens[b]);
  }
  const int64_t num_rows = qo_indptr.back();
  std::vector<float> q = random_floats(num_rows * heads * head_dim);
  std::vector<float> sinks = random_floats(heads);
  std::vector<float> out(q.size(), 0.0f);
  attention::PagedAttentionPlan plan{static_cast<int>(kv_lens.size()), qo_indptr.data(), page_indptr.data(),
                                     pages.data(), last_len.data(), {}};
  plan.variant = {variant.softmax_scale, variant.soft_cap, variant.sliding_window,
                  variant.sinks ? sinks.data() : nullptr};
  backend.paged_attention(q, layer, plan, heads, out);

  auto stored = [&](float x) { return round_to_bf16 ? quant::bf16_to_f32(quant::f32_to_bf16(x)) : x; };
  std::vector<double> expected(out.size());
  const double scale = variant.softmax_scale > 0 ? variant.softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (size_t b = 0; b < kv_lens.size(); ++b) {
    for (int i = 0; i < q_lens[b]; ++i) {
      const int position = kv_lens[b] - q_lens[b] + i;
      const int first = variant.sliding_window > 0 ? std::max(0, position + 1 - variant.sliding_window) : 0;
      const int64_t row = qo_indptr[b] + i;
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        const float* qh = q.data() + (row * heads + h) * head_dim;
        std::vector<double> logits;
        for (int p = first; p <= position; ++p) {
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * stored(seq_k[b][static_cast<size_t>((p * kv_heads + kvh) * head_dim + d)]);
          double logit = dot * scale;
          if (variant.soft_cap > 0) logit = variant.soft_cap * std::tanh(logit / variant.soft_cap);
          logits.push_back(logit);
        }
        double max_logit = *std::max_element(logits.begin(), logits.end());
        if (variant.sinks) max_logit = std::max<double>(max_logit, sinks[static_cast<size_t>(h)]);
        double denom = variant.sinks ? std::exp(sinks[static_cast<size_t>(h)] - max_logit) : 0.0;
        for (double& l : logits) denom += (l = std::exp(l - max_logit));
        for (int d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (int p = first; p <= position; ++p) acc += logits[static_cast<size_t>(p - first)] / denom * stored(seq_v[b][static_cast<size_t>((p * kv_heads + kvh) * head_dim + d)]);
          expected[static_cast<size_t>((row * heads + h) * head_dim + d)] = acc;
        }
      }
    }
  }
  const double error = relative_l2_error(out.data(), expected.data(), static_cast<int64_t>(out.size()));

  if (dtype == DType::kF32) {
    // The contiguous-history op (reference path) on the same sequences gives the same rows.
    for (size_t b : {size_t{2}, size_t{3}}) {
      const int64_t row = qo_indptr[b];
      const size_t width = static_cast<size_t>(heads * head_dim);
      std::vector<float> contiguous(static_cast<size_t>(q_lens[b]) * width);
      backend.contiguous_attention(host_ptr(q.data() + static_cast<size_t>(row) * width), q_lens[b], seq_k[b],
                                   seq_v[b], kv_lens[b] - q_lens[b], heads, kv_heads, head_dim,
                                   plan.variant, contiguous);
      EXPECT_LT(relative_l2_error(contiguous.data(), expected.data() + static_cast<size_t>(row) * width,
                                  static_cast<int64_t>(contiguous.size())),
                kTolerance)
          << "sequence " << b;
    }
  }

  // Copy-on-write: the last sequence's last block into a fresh one, bytes and scale alike.
  const int32_t src = pages.back(), dst = free_blocks.back();
  backend.copy_kv_blocks(layer, &src, &dst, 1);
  for (const Buffer* cache : {static_cast<const Buffer*>(&k_cache), &values_storage}) {
    std::vector<char> bytes(cache->size_bytes());
    backend.copy_bytes(bytes, cache->ptr<const void>(), static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(std::memcmp(bytes.data() + dst * block_bytes, bytes.data() + src * block_bytes,
                          static_cast<size_t>(block_bytes)),
              0);
  }
  if (dtype == DType::kF8E4M3) {
    for (const float* scales : {layer.k_scales, layer.v_scales}) {
      std::vector<float> host(static_cast<size_t>(num_blocks * kv_heads));
      backend.copy_bytes(host, DevicePtr<const float>(scales, layer.device), static_cast<int64_t>(host.size() * sizeof(float)));
      for (int head = 0; head < kv_heads; ++head) {
        EXPECT_EQ(host[static_cast<size_t>(dst * kv_heads + head)], host[static_cast<size_t>(src * kv_heads + head)]);
      }
    }
  }
  return error;
}

TEST_P(Conformance, PagedAttentionOverRaggedBlockTablesMatchesDenseFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, {}, false), kTolerance);
}

// Scale, soft-cap, sliding window (null pages behind it) and sinks, alone and together.
TEST_P(Conformance, PagedAttentionVariantsMatchFloat64) {
  const std::vector<std::pair<std::string, VariantCase>> variants = {
      {"scale", {0.21f, 0.0f, 0, false}}, {"soft_cap", {0.0f, 1.5f, 0, false}},
      {"window 5", {0.0f, 0.0f, 5, false}}, {"window 1", {0.0f, 0.0f, 1, false}},
      {"sinks", {0.0f, 0.0f, 0, true}},     {"all", {0.4f, 2.0f, 6, true}},
  };
  for (const auto& [name, variant] : variants) {
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, variant, false), kTolerance) << name;
  }
}

// A BF16 cache computes exactly the float64 attention of its rounded K/V; an FP8 cache stays
// within E4M3's precision of the exact result (per-block scales that grow with the rows,
// never saturating), and does quantize (its error is not zero).
TEST_P(Conformance, PagedAttentionOverBf16AndFp8CachesMatchesFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, true), kTolerance);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {0.0f, 0.0f, 5, true}, true), kTolerance);
  EXPECT_GT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, false), 1e-4);  // the rounding shows
  const double fp8_error = paged_attention_error(*backend_, rng_, DType::kF8E4M3, {}, false);
  EXPECT_LT(fp8_error, 0.05);
  EXPECT_GT(fp8_error, 1e-3);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF8E4M3, {0.0f, 0.0f, 5, true}, false), 0.05);
}

#if !defined(MOERT_CUDA_EMULATION)
// Model shapes, on a real GPU only (backend_conformance_cuda_test; the emulation would take
// minutes over them, and the float64 reference seconds): head dims 64 and 128 under GQA and
// MLA's latent row of 576 (kv_lora_rank 512 + rope 64) over one kv head, 16-position blocks,
// contexts of 700 and 1100 positions (44 and 69 blocks, in one batch with short ones), a
// 40-row prefill chunk and decode rows; F32 and BF16 caches.
TEST_P(Conformance, PagedAttentionAtModelShapesMatchesFloat64) {
  struct Case {
    const char* name;
    int heads, kv_heads, head_dim;
    bool latent;
  };
  for (const Case& c : {Case{"gqa 16/4 x 64", 16, 4, 64, false}, Case{"gqa 32/8 x 128", 32, 8, 128, false},
                        Case{"mla 16 x 576", 16, 1, 576, true}}) {
    AttentionShape sizes;
    sizes.block_size = 16;
    sizes.heads = c.heads;
    sizes.kv_heads = c.kv_heads;
    sizes.head_dim = c.head_dim;
    sizes.num_blocks = 160;
    sizes.kv_lens = {1, 17, 700, 1100};
    sizes.q_lens = {1, 17, 1, 40};
    const VariantCase scaled{c.latent ? 0.07f : 0.0f, 0.0f, 0, false};
    const double tolerance = 1e-5;  // F32 sums over ~1000 positions and up to 576 channels
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, scaled, false, c.latent, sizes), tolerance) << c.name;
    EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, scaled, true, c.latent, sizes), tolerance)
        << c.name << " bf16";
  }
}
#endif

// A latent cache (MLA): one kv head whose row is key and value, stored once; its writes,
// block copies and FP8 scales go through the aliased storage.
TEST_P(Conformance, PagedAttentionOverLatentCachesMatchesFloat64) {
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kF32, {0.3f, 0.0f, 0, false}, false, true), kTolerance);
  EXPECT_LT(paged_attention_error(*backend_, rng_, DType::kBF16, {}, true, true), kTolerance);
  const double fp8_error = paged_attention_error(*backend_, rng_, DType::kF8E4M3, {}, false, true);
  EXPECT_LT(fp8_error, 0.05);
  EXPECT_GT(fp8_error, 1e-3);
}

}  // namespace
}  // namespace moert::backend::conformance
