// The attention launchers of attention/cuda/attention.h, run through the emulation (host memory
// stands in for device memory, stream null), against their CPU twins in attention/cpu:
// KV writes and block copies byte for byte (codes and FP8 scales exactly), paged and
// contiguous attention to a relative L2 error of 2e-6 on the same cache contents.
// Shapes stay small: the emulation starts one thread per GPU thread of each block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/cpu/dense_attention.h"
#include "attention/cpu/paged_attention.h"
#include "attention/paged_kv.h"
#include "core/thread_pool.h"
#include "quant/formats/minifloat.h"
#include "attention/cuda/attention.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

namespace kernels = moert::cuda_emulated;
using attention::AttentionVariant;
using attention::PagedAttentionPlan;
using attention::PagedKvLayer;

constexpr double kTolerance = 2e-6;

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng) * scale;
  return v;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& expected) {
  const std::vector<double> reference(expected.begin(), expected.end());
  return testing::relative_l2_error(got.data(), reference.data(), static_cast<int64_t>(got.size()));
}

// One layer's K/V storage [NB, BS, KVH, Dh] and FP8 scales [NB, KVH] in host memory; `latent`
// aliases V to K (MLA). Block 0, the null block, holds 0xFF bytes (NaN in every dtype) and
// the scales start at 1.
struct Storage {
  Storage(DType dtype, int num_blocks, int block_size, int kv_heads, int head_dim, bool latent) {
    const int64_t block_bytes =
        static_cast<int64_t>(block_size) * kv_heads * head_dim * attention::kv_element_bytes(dtype);
    k.assign(static_cast<size_t>(num_blocks * block_bytes), 0);
    v.assign(k.size(), 0);
    std::fill(k.begin(), k.begin() + block_bytes, 0xFF);
    std::fill(v.begin(), v.begin() + block_bytes, 0xFF);
    k_scales.assign(static_cast<size_t>(num_blocks) * kv_heads, 1.0f);
    v_scales = k_scales;
    layer = PagedKvLayer{k.data(), latent ? k.data() : v.data(), num_blocks, block_size, kv_heads, head_dim, dtype};
    if (dtype == DType::kF8E4M3) {
      layer.k_scales = k_scales.data();
      layer.v_scales = latent ? k_scales.data() : v_scales.data();
    }
  }
  Storage(const Storage&) = delete;

  std::vector<uint8_t> k, v;
  std::vector<float> k_scales, v_scales;
  PagedKvLayer layer;
};

// Bytes and scales of two storages are identical.
void expect_same_storage(const Storage& got, const Storage& expected, const std::string& what) {
  EXPECT_TRUE(got.k == expected.k) << what << ": K bytes differ";
  EXPECT_TRUE(got.v == expected.v) << what << ": V bytes differ";
  EXPECT_EQ(0, std::memcmp(got.k_scales.data(), expected.k_scales.data(), got.k_scales.size() * sizeof(float)))
      << what << ": K scales differ";
  EXPECT_EQ(0, std::memcmp(got.v_scales.data(), expected.v_scales.data(), got.v_scales.size() * sizeof(float)))
      << what << ": V scales differ";
}

// Writes the same rows through the launcher into `device` and through write_kv_slots into
// `cpu`.
void write_both(Storage& device, Storage& cpu, const std::vector<float>& k, const std::vector<float>& v,
                const std::vector<int64_t>& slots) {
  const auto num_tokens = static_cast<int64_t>(slots.size());
  ASSERT_EQ(0, kernels::write_kv(device.layer, k.data(), v.data(), slots.data(), num_tokens, nullptr));
  attention::write_kv_slots(cpu.layer, k.data(), v.data(), slots.data(), num_tokens);
}

// ---- write_kv ------------------------------------------------------------------------------

// F32 / BF16 / FP8 writes of shuffled slots with -1 padding, in two calls whose second
// rewrites part of the first (block starts included: an FP8 scale restarts there), give the
// CPU's bytes and scales. FP8 rows grow in magnitude so scales grow and earlier rows are
// re-encoded (some into E4M3 subnormals).
TEST(CudaEmulatedWriteKv, MatchesCpuBytesAndScales) {
  std::mt19937 rng(7);
  const int num_blocks = 9, block_size = 4, kv_heads = 2, head_dim = 24;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (bool latent : {false, true}) {
      const int heads = latent ? 1 : kv_heads;
      const std::string what = std::string(dtype_name(dtype)) + (latent ? " latent" : "");
      Storage device(dtype, num_blocks, block_size, heads, head_dim, latent);
      Storage cpu(dtype, num_blocks, block_size, heads, head_dim, latent);
      std::vector<int64_t> blocks{3, 7, 1, 5};  // a sequence's table, out of order
      std::vector<int64_t> slots;
      for (int p = 0; p < 15; ++p) {
        slots.push_back(blocks[static_cast<size_t>(p / block_size)] * block_size + p % block_size);
        if (p % 6 == 5) slots.push_back(-1);
      }
      const int64_t n = static_cast<int64_t>(slots.size()), row = heads * head_dim;
      std::vector<float> k = random_floats(rng, n * row), v = random_floats(rng, n * row);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < row; ++i) {
          k[static_cast<size_t>(t * row + i)] *= 1.0f + 0.7f * static_cast<float>(t);
          v[static_cast<size_t>(t * row + i)] *= std::exp2(static_cast<float>(t % 9) - 3.0f);
        }
      }
      if (latent) v = k;
      write_both(device, cpu, k, v, slots);
      expect_same_storage(device, cpu, what + " first write");
      // A rollback rewrites block 7 from offset 0 with smaller rows, then block 1 partially.
      const std::vector<int64_t> again{7 * block_size, 7 * block_size + 1, -1, 1 * block_size + 2};
      std::vector<float> k2 = random_floats(rng, 4 * row, 0.01f), v2 = random_floats(rng, 4 * row, 3.0f);
      if (latent) v2 = k2;
      write_both(device, cpu, k2, v2, again);
      expect_same_storage(device, cpu, what + " rewrite");
    }
  }
}

// E4M3 rounding at its edges: with a row amax of 448 the scale is 1, so the codes are
// e4m3_encode(x) itself. Every grid value, every midpoint (ties to even), one ulp either side
// of each, negatives, -0, float subnormals and NaN (skipped by amax, encoded 0x7F) give the
// CPU's bytes. A second row with amax 900 then grows the scale to 4 and re-encodes the first.
TEST(CudaEmulatedWriteKv, Fp8EncodesEveryCodeLikeCpu) {
  std::vector<float> grid;
  for (int c = 0; c < 0x7F; ++c) grid.push_back(quant::e4m3_decode(static_cast<uint8_t>(c)));
  std::vector<float> row{448.0f, -0.0f, 1e-45f, -1e-40f, std::numeric_limits<float>::quiet_NaN(), 1e-30f};
  for (size_t i = 0; i < grid.size(); ++i) {
    row.push_back(grid[i]);
    if (i + 1 < grid.size()) {
      const float mid = 0.5f * (grid[i] + grid[i + 1]);
      row.push_back(mid);
      row.push_back(-mid);
      row.push_back(std::nextafter(mid, 0.0f));
      row.push_back(std::nextafter(mid, 1000.0f));
    }
  }
  const int head_dim = static_cast<int>(row.size());
  ASSERT_LE(head_dim, 1000);
  std::vector<float> rows = row;
  for (float x : row) rows.push_back(x * 2.0f + 1.0f);  // amax ~900
  rows[static_cast<size_t>(head_dim)] = 900.0f;
  Storage device(DType::kF8E4M3, 2, 2, 1, head_dim, false);
  Storage cpu(DType::kF8E4M3, 2, 2, 1, head_dim, false);
  const std::vector<int64_t> slots{2, 3};  // block 1, offsets 0 and 1
  std::vector<float> v = rows;
  for (float& x : v) x = -x;
  write_both(device, cpu, rows, v, slots);
  expect_same_storage(device, cpu, "edges");
  EXPECT_EQ(cpu.k_scales[1], 4.0f);
}

// ---- paged_attention -------------------------------------------------------------------------

struct Sequence {
  int kv_len, q_len;
};

struct PagedCase {
  DType dtype = DType::kF32;
  AttentionVariant variant;  // sinks: drawn at random when `sinks`
  bool sinks = false;
  bool latent = false;
  bool device_write = false;  // K/V also written by the launcher (bytes compared); else the CPU's only
  bool extra_row = false;     // one more q row than the plan's, which must stay untouched
  int heads = 6, kv_heads = 2, head_dim = 40, block_size = 4;
  // Decode, a chunk of a prefill, none (q_len 0), and rows whose keys fill one and two chunks.
  std::vector<Sequence> sequences{{1, 1}, {9, 3}, {5, 0}, {45, 2}, {150, 1}};
};

// Ragged block tables over a shuffled pool, K/V written by write_kv_slots (and by the launcher
// into a second storage with `device_write`, bytes compared), pages wholly behind every row's
// window handed over as the null block (NaN bytes); returns the launcher's relative L2 error
// against paged_attention_forward on the same cache.
double paged_attention_error(const PagedCase& c, std::mt19937& rng) {
  const int kv_heads = c.latent ? 1 : c.kv_heads;
  int num_blocks = 1;
  for (const Sequence& s : c.sequences) num_blocks += (s.kv_len + c.block_size - 1) / c.block_size;
  Storage device(c.dtype, num_blocks, c.block_size, kv_heads, c.head_dim, c.latent);
  Storage cpu(c.dtype, num_blocks, c.block_size, kv_heads, c.head_dim, c.latent);
  std::vector<int32_t> free_blocks(static_cast<size_t>(num_blocks - 1));
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  const int64_t row_width = static_cast<int64_t>(kv_heads) * c.head_dim;
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, pages, last_len;
  size_t next_block = 0;
  for (const Sequence& s : c.sequences) {
    const int num_pages = (s.kv_len + c.block_size - 1) / c.block_size;
    std::vector<int32_t> table(free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block),
                               free_blocks.begin() + static_cast<std::ptrdiff_t>(next_block + num_pages));
    next_block += static_cast<size_t>(num_pages);
    std::vector<int64_t> slots;
    for (int p = 0; p < s.kv_len; ++p) {
      slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / c.block_size)]) * c.block_size +
                      p % c.block_size);
    }
    std::vector<float> k = random_floats(rng, s.kv_len * row_width), v = random_floats(rng, s.kv_len * row_width);
    for (int p = 0; p < s.kv_len; ++p) {  // growing rows: FP8 scales grow within blocks
      for (int64_t i = 0; i < row_width; ++i) v[static_cast<size_t>(p * row_width + i)] *= 1.0f + 0.05f * (p % 11);
    }
    if (c.latent) k = v;
    if (c.device_write) {
      write_both(device, cpu, k, v, slots);
    } else {
      attention::write_kv_slots(cpu.layer, k.data(), v.data(), slots.data(), static_cast<int64_t>(slots.size()));
    }
    if (c.variant.sliding_window > 0) {  // pages wholly behind the first row's window: null
      const int first_key = std::max(0, s.kv_len - s.q_len + 1 - c.variant.sliding_window);
      for (int p = 0; p < first_key / c.block_size; ++p) table[static_cast<size_t>(p)] = 0;
    }
    pages.insert(pages.end(), table.begin(), table.end());
    page_indptr.push_back(static_cast<int32_t>(pages.size()));
    last_len.push_back(s.kv_len - (num_pages - 1) * c.block_size);
    qo_indptr.push_back(qo_indptr.back() + s.q_len);
  }
  if (c.device_write) expect_same_storage(device, cpu, "paged writes");
  const PagedKvLayer& device_layer = c.device_write ? device.layer : cpu.layer;
  const int64_t num_rows = qo_indptr.back() + (c.extra_row ? 1 : 0);
  const int64_t head_width = static_cast<int64_t>(c.heads) * c.head_dim;
  const std::vector<float> q = random_floats(rng, num_rows * head_width);
  const std::vector<float> sinks = random_floats(rng, c.heads);
  PagedAttentionPlan plan{static_cast<int>(c.sequences.size()), qo_indptr.data(), page_indptr.data(), pages.data(),
                          last_len.data(), c.variant};
  if (c.sinks) plan.variant.sinks = sinks.data();
  std::vector<float> expected(q.size(), 7.0f), got(q.size(), 7.0f);
  ThreadPool pool(1);
  attention::paged_attention_forward(q.data(), cpu.layer, plan, c.heads, expected.data(), pool);
  EXPECT_EQ(0, kernels::paged_attention(q.data(), device_layer, plan, num_rows, c.heads, got.data(), nullptr));
  for (int64_t i = qo_indptr.back() * head_width; i < num_rows * head_width; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)], 7.0f) << "row outside the plan written at " << i;
  }
  return relative_error(got, expected);
}

TEST(CudaEmulatedPagedAttention, F32MatchesCpuUnderEveryVariant) {
  std::mt19937 rng(11);
  struct Named {
    const char* name;
    AttentionVariant variant;
    bool sinks;
  };
  const std::vector<Named> variants{
      {"default", {}, false},
      {"window 5", {0.0f, 0.0f, 5, nullptr}, false},
      {"window 140 + sinks", {0.0f, 0.0f, 140, nullptr}, true},  // chunks start mid-page
      {"scale + soft_cap + window 7 + sinks", {0.9f, 1.5f, 7, nullptr}, true},
  };
  for (const Named& named : variants) {
    PagedCase c;
    c.variant = named.variant;
    c.sinks = named.sinks;
    c.extra_row = named.variant.sliding_window == 0 && !named.sinks;
    EXPECT_LT(paged_attention_error(c, rng), kTolerance) << named.name;
  }
}

// The kernel widens BF16 and FP8 (code times its (block, head) scale) as the CPU does, so on
// the same cache bytes the results agree as closely as for F32.
TEST(CudaEmulatedPagedAttention, Bf16AndFp8CachesMatchCpu) {
  std::mt19937 rng(13);
  PagedCase c;
  c.dtype = DType::kBF16;
  EXPECT_LT(paged_attention_error(c, rng), kTolerance) << "BF16";
  c.dtype = DType::kF8E4M3;
  c.variant.sliding_window = 6;
  c.sinks = true;
  EXPECT_LT(paged_attention_error(c, rng), kTolerance) << "F8_E4M3 window + sinks";
}

// MLA: one kv head of width 576 whose row is key and value, in one aliased storage; all heads
// share it (group 4).
TEST(CudaEmulatedPagedAttention, LatentCacheOfWidth576) {
  std::mt19937 rng(17);
  for (DType dtype : {DType::kF32, DType::kF8E4M3}) {
    PagedCase c;
    c.dtype = dtype;
    c.latent = true;
    c.heads = 4;
    c.head_dim = 576;
    c.variant.softmax_scale = 0.06f;
    c.sequences = {{5, 2}, {37, 3}};
    c.device_write = true;
    EXPECT_LT(paged_attention_error(c, rng), kTolerance) << dtype_name(dtype);
  }
}

TEST(CudaEmulatedPagedAttention, NothingToDo) {
  Storage device(DType::kF32, 2, 4, 2, 8, false);
  PagedAttentionPlan plan;
  EXPECT_EQ(0, kernels::paged_attention(nullptr, device.layer, plan, 0, 6, nullptr, nullptr));
}

// ---- contiguous_attention --------------------------------------------------------------------

// T rows at first_position.. over a contiguous F32 history (multiple chunks of keys), under
// the variants, against causal_attention_one_token per row.
TEST(CudaEmulatedContiguousAttention, MatchesCausalAttentionOneToken) {
  std::mt19937 rng(19);
  const int heads = 6, kv_heads = 2, head_dim = 64, num_tokens = 2;
  const int64_t first_position = 140;
  const int64_t history = first_position + num_tokens;
  const std::vector<float> keys = random_floats(rng, history * kv_heads * head_dim);
  const std::vector<float> values = random_floats(rng, history * kv_heads * head_dim);
  const std::vector<float> q = random_floats(rng, static_cast<int64_t>(num_tokens) * heads * head_dim);
  const std::vector<float> sinks = random_floats(rng, heads, 3.0f);
  const std::vector<AttentionVariant> variants{
      {}, {0.2f, 1.0f, 0, nullptr}, {0.0f, 0.0f, 9, sinks.data()}, {0.3f, 3.0f, 130, sinks.data()}};
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<float> expected(q.size()), got(q.size());
    for (int t = 0; t < num_tokens; ++t) {
      const int64_t offset = static_cast<int64_t>(t) * heads * head_dim;
      attention::causal_attention_one_token(q.data() + offset, keys.data(), values.data(), first_position + t, heads,
                                            kv_heads, head_dim, expected.data() + offset, variants[i]);
    }
    EXPECT_EQ(0, kernels::contiguous_attention(q.data(), num_tokens, keys.data(), values.data(), first_position, heads,
                                               kv_heads, head_dim, variants[i], got.data(), nullptr));
    EXPECT_LT(relative_error(got, expected), kTolerance) << "variant " << i;
  }
  EXPECT_EQ(0, kernels::contiguous_attention(nullptr, 0, nullptr, nullptr, 0, heads, kv_heads, head_dim, {}, nullptr,
                                             nullptr));
}

// ---- copy_kv_blocks --------------------------------------------------------------------------

// Copies in order (a chain 2 -> 5 -> 6 carries block 2 to 6; a copy onto itself is a no-op)
// give the CPU's bytes and scales, for 16-byte, 4-byte and 1-byte block sizes and a latent
// cache.
TEST(CudaEmulatedCopyKvBlocks, MatchesCpuBytesAndScales) {
  std::mt19937 rng(23);
  struct Shape {
    DType dtype;
    int block_size, kv_heads, head_dim;
    bool latent;
  };
  const std::vector<Shape> shapes{{DType::kF32, 4, 2, 8, false},
                                  {DType::kBF16, 3, 1, 6, false},
                                  {DType::kF8E4M3, 3, 3, 3, false},
                                  {DType::kF8E4M3, 2, 1, 576, true}};
  const std::vector<int32_t> src{2, 5, 3, 4, 1}, dst{5, 6, 3, 1, 7};
  for (const Shape& s : shapes) {
    Storage device(s.dtype, 8, s.block_size, s.kv_heads, s.head_dim, s.latent);
    Storage cpu(s.dtype, 8, s.block_size, s.kv_heads, s.head_dim, s.latent);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < device.k.size(); ++i) {
      device.k[i] = cpu.k[i] = static_cast<uint8_t>(byte(rng));
      device.v[i] = cpu.v[i] = static_cast<uint8_t>(byte(rng));
    }
    for (size_t i = 0; i < device.k_scales.size(); ++i) {
      device.k_scales[i] = cpu.k_scales[i] = static_cast<float>(i) + 0.5f;
      device.v_scales[i] = cpu.v_scales[i] = -static_cast<float>(i);
    }
    EXPECT_EQ(0, kernels::copy_kv_blocks(device.layer, src.data(), dst.data(), static_cast<int64_t>(src.size()),
                                         nullptr));
    attention::copy_kv_blocks(cpu.layer, src.data(), dst.data(), static_cast<int64_t>(src.size()));
    expect_same_storage(device, cpu, std::string(dtype_name(s.dtype)) + " Dh " + std::to_string(s.head_dim));
  }
}

}  // namespace
}  // namespace moert
