#include "attention/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <vector>

#include "quant/bf16.h"
#include "core/cpu/dot.h"
#include "core/cpu/exp.h"
#include "core/cpu/isa.h"
#include "quant/formats/minifloat.h"
#if defined(MOERT_X86_KERNELS)
#include "attention/cpu/x86/accumulate_values_avx512.h"
#endif
#include "core/check.h"

namespace moert::attention {
namespace {

// The smallest power of two >= x (x > 0, finite), exactly: frexp gives x = m * 2^e with m in
// [0.5, 1), so x is 2^(e - 1) when m == 0.5 and lies below 2^e otherwise. (log2 / ceil would
// depend on the rounding of log2 just above a power of two.) The CUDA twin is
// core/cuda/device_math.h power_of_two_at_least.
float power_of_two_at_least(float x) {
  int exponent = 0;
  const float mantissa = std::frexp(x, &exponent);
  return mantissa == 0.5f ? x : std::ldexp(1.0f, exponent);
}


// Row stride (floats) of one slot: [KVH, Dh].
int64_t slot_stride(const PagedKvLayer& layer) { return static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim; }

void check_layer(const PagedKvLayer& layer) {
  MOERT_CHECK(layer.k_cache != nullptr && layer.v_cache != nullptr, "paged kv layer has a null cache pointer");
  MOERT_CHECK(layer.num_blocks > 0, "num_blocks = " << layer.num_blocks << " must be > 0");
  MOERT_CHECK(layer.block_size > 0, "block_size = " << layer.block_size << " must be > 0");
  MOERT_CHECK(layer.num_kv_heads > 0, "num_kv_heads = " << layer.num_kv_heads << " must be > 0");
  MOERT_CHECK(layer.head_dim > 0, "head_dim = " << layer.head_dim << " must be > 0");
  MOERT_CHECK(layer.dtype == DType::kF32 || layer.dtype == DType::kBF16 || layer.dtype == DType::kF8E4M3,
              "paged kv layer dtype " << dtype_name(layer.dtype) << " is not F32, BF16 or F8_E4M3");
  MOERT_CHECK(layer.dtype != DType::kF8E4M3 || (layer.k_scales != nullptr && layer.v_scales != nullptr),
              "F8_E4M3 paged kv layer without block scales");
}

// The first key a query with `num_keys` visible positions attends under the plan's window.
int64_t first_visible_key(const PagedAttentionPlan& plan, int64_t num_keys) {
  return plan.variant.sliding_window > 0 ? std::max<int64_t>(0, num_keys - plan.variant.sliding_window) : 0;
}

// Validates the plan against the layer; returns the largest kv_len (0 if no sequence).
int64_t check_plan(const PagedKvLayer& layer, const PagedAttentionPlan& plan, int num_heads) {
  MOERT_CHECK(num_heads > 0 && num_heads % layer.num_kv_heads == 0,
              "num_heads = " << num_heads << " must be a positive multiple of num_kv_heads = " << layer.num_kv_heads);
  MOERT_CHECK(plan.num_seqs >= 0, "num_seqs = " << plan.num_seqs << " must be >= 0");
  if (plan.num_seqs == 0) return 0;
  MOERT_CHECK(plan.qo_indptr != nullptr && plan.kv_page_indptr != nullptr && plan.kv_page_indices != nullptr &&
                  plan.kv_last_page_len != nullptr,
              "paged attention plan has a null array");
  MOERT_CHECK(plan.qo_indptr[0] >= 0, "qo_indptr[0] = " << plan.qo_indptr[0] << " must be >= 0");
  MOERT_CHECK(plan.kv_page_indptr[0] >= 0, "kv_page_indptr[0] = " << plan.kv_page_indptr[0] << " must be >= 0");
  const AttentionVariant& variant = plan.variant;
  MOERT_CHECK(variant.sliding_window >= 0, "sliding_window = " << variant.sliding_window << " must be >= 0");
  MOERT_CHECK(variant.softmax_scale >= 0.0f && variant.soft_cap >= 0.0f,
              "softmax_scale = " << variant.softmax_scale << ", soft_cap = " << variant.soft_cap << " must be >= 0");
  int64_t max_kv_len = 0;
  for (int b = 0; b < plan.num_seqs; ++b) {
    const int32_t q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
    MOERT_CHECK(q_len >= 0, "qo_indptr[" << b + 1 << "] = " << plan.qo_indptr[b + 1] << " must be >= qo_indptr[" << b
                                         << "] = " << plan.qo_indptr[b]);
    const int32_t num_pages = plan.kv_page_indptr[b + 1] - plan.kv_page_indptr[b];
    MOERT_CHECK(num_pages >= 1, "sequence " << b << " has " << num_pages << " pages (kv_page_indptr[" << b
                                            << "] = " << plan.kv_page_indptr[b] << ", kv_page_indptr[" << b + 1
                                            << "] = " << plan.kv_page_indptr[b + 1] << "); it needs >= 1");
    const int32_t last_page_len = plan.kv_last_page_len[b];
    MOERT_CHECK(last_page_len >= 1 && last_page_len <= layer.block_size,
                "kv_last_page_len[" << b << "] = " << last_page_len << " must be in [1, block_size = "
                                    << layer.block_size << "]");
    const int64_t kv_len = static_cast<int64_t>(num_pages - 1) * layer.block_size + last_page_len;
    MOERT_CHECK(q_len <= kv_len, "sequence " << b << ": q_len = " << q_len << " must be <= kv_len = " << kv_len);
    // Pages the sequence's first row reads onwards are real blocks; those wholly before its
    // window are never read (they may be the null block).
    const int64_t first_read_page = first_visible_key(plan, kv_len - q_len + 1) / layer.block_size;
    for (int32_t p = plan.kv_page_indptr[b]; p < plan.kv_page_indptr[b + 1]; ++p) {
      const int32_t block = plan.kv_page_indices[p];
      const int32_t lowest = p - plan.kv_page_indptr[b] < first_read_page ? 0 : 1;
      MOERT_CHECK(block >= lowest && block < layer.num_blocks,
                  "kv_page_indices[" << p << "] = " << block << " (sequence " << b << ") must be in [" << lowest
                                     << ", num_blocks = " << layer.num_blocks << ")");
    }
    max_kv_len = std::max(max_kv_len, kv_len);
  }
  return max_kv_len;
}

// Where one (row, kv heads) work item reads and writes: kv heads [first_kv_head,
// first_kv_head + num_kv_heads) and their query heads.
struct WorkItem {
  const int32_t* pages;  // the sequence's block ids, logical order
  int64_t num_keys;      // kv positions attended: position + 1
  int64_t row;           // row of q / out
  int first_kv_head;
  int num_kv_heads;
};

// Per-thread scratch, allocated once per chunk and reused by all its items.
struct Scratch {
  std::vector<float> scores;  // [item heads, max_kv_len]: scores, then probabilities
  std::vector<float> acc;     // [item heads, Dh]
  std::vector<float> max_score, inv_denominator;  // [item heads]
  std::vector<float> k_rows, v_rows;  // [BS, item kv heads * Dh]: one page widened to F32 (BF16 / FP8 caches)
};

// Rows [first, first + count) of one page for kv heads [first_head, first_head + heads), as F32
// rows `stride` apart, head h's elements at + h * Dh: the cache itself for F32, else widened
// into `scratch` (stride heads * Dh). Either way the page's slots are read as one run each.
struct PageRows {
  const float* rows;
  int64_t stride;
};
PageRows page_rows(const PagedKvLayer& layer, const void* cache, const float* scales, int32_t block, int first_head,
                   int heads, int64_t first, int64_t count, std::vector<float>& scratch) {
  const int64_t stride = slot_stride(layer);
  const int64_t head_dim = layer.head_dim;
  const int64_t base = (static_cast<int64_t>(block) * layer.block_size + first) * stride + first_head * head_dim;
  if (layer.dtype == DType::kF32) return {static_cast<const float*>(cache) + base, stride};
  const int64_t width = heads * head_dim;  // elements of a slot read
  float* out = scratch.data();
  if (layer.dtype == DType::kBF16) {
    const uint16_t* in = static_cast<const uint16_t*>(cache) + base;
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t e = 0; e < width; ++e) out[r * width + e] = quant::bf16_to_f32(in[r * stride + e]);
    }
  } else {
    const uint8_t* in = static_cast<const uint8_t*>(cache) + base;
    const float* head_scales = scales + static_cast<int64_t>(block) * layer.num_kv_heads + first_head;
    for (int64_t r = 0; r < count; ++r) {
      for (int h = 0; h < heads; ++h) {
        const int64_t at = h * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          out[r * width + at + d] = quant::e4m3_decode(in[r * stride + at + d]) * head_scales[h];
        }
      }
    }
  }
  return {out, width};
}

// acc[g, d] += weights[g * weight_stride + r] * v[r * v_stride + d] for r = 0..count-1 in
// order: a separate multiply then add per element (never fused), exactly as
// causal_attention_one_token's `out[d] += p * v[d]`. Lanes are d, so vector width does not
// change any result.
void accumulate_values(const float* v, int64_t v_stride, int64_t count, const float* weights, int64_t weight_stride,
                       int group, int head_dim, float* __restrict acc) {
  for (int64_t r = 0; r < count; ++r) {
    const float* __restrict v_row = v + r * v_stride;
    for (int g = 0; g < group; ++g) {
      const float p = weights[g * weight_stride + r];
      float* __restrict a = acc + static_cast<int64_t>(g) * head_dim;
      for (int d = 0; d < head_dim; ++d) a[d] += p * v_row[d];
    }
  }
}

// The AVX-512 value accumulation (attention/cpu/x86/, x86-64 builds only) when the CPU
// has it and MOERT_CPU_ISA does not cap it (core/cpu/isa.h); same results either way.
bool use_avx512() {
#if defined(MOERT_X86_KERNELS)
  return cpu::active_cpu_isa() == cpu::CpuIsa::kAvx512;
#else
  return false;
#endif
}

// Query heads per kv head that one work item handles (GQA group size).
constexpr int kMaxGroup = 128;

// dots[(h * group + g) * dots_stride + r] = cpu::dot_f32(q head h * group + g, row r of kv
// head h) for h < kv_heads, g < group, r < count, where kv head h's rows start at
// keys + h * head_stride, key_stride apart: register tiles of heads x keys (cpu::dot_block, the
// canonical dot) where the CPU has them, a tile of keys for every kv head before the next keys
// (one run through memory), else one key at a time against all heads. A tile's spare key
// columns repeat the last key.
void key_dots(const float* q_heads, int kv_heads, int group, int head_dim, const float* keys, int64_t key_stride,
              int64_t head_stride, int64_t count, float* dots, int64_t dots_stride) {
  const cpu::DotTile tile = cpu::dot_block_tile(group);
  if (tile == cpu::kNoDotTile) {
    float column[kMaxGroup];
    for (int64_t r = 0; r < count; ++r) {
      for (int h = 0; h < kv_heads; ++h) {
        cpu::dot_f32_rows(q_heads + static_cast<int64_t>(h) * group * head_dim, head_dim, group,
                          keys + h * head_stride + r * key_stride, head_dim, column);
        for (int g = 0; g < group; ++g) dots[(h * group + g) * dots_stride + r] = column[g];
      }
    }
    return;
  }
  // Every tile dot_block_tile hands out (core/cpu/dot.h) fits these, checked at compile time.
  constexpr int kMaxTileCells = 32;
  static_assert(cpu::kAvx512Tile.rows * cpu::kAvx512Tile.cols <= kMaxTileCells &&
                cpu::kAvx2Tile.rows * cpu::kAvx2Tile.cols <= kMaxTileCells &&
                cpu::kAvx2SingleRowTile.rows * cpu::kAvx2SingleRowTile.cols <= kMaxTileCells);
  float tile_out[kMaxTileCells];
  const void* key_rows[kMaxTileCells];
  for (int64_t r0 = 0; r0 < count; r0 += tile.cols) {
    const int cols = static_cast<int>(std::min<int64_t>(tile.cols, count - r0));
    for (int h = 0; h < kv_heads; ++h) {
      for (int c = 0; c < tile.cols; ++c) key_rows[c] = keys + h * head_stride + (r0 + std::min(c, cols - 1)) * key_stride;
      for (int g0 = 0; g0 < group; g0 += tile.rows) {
        const int rows = std::min(tile.rows, group - g0);
        const int64_t first_row = static_cast<int64_t>(h) * group + g0;  // of q_heads and dots
        cpu::dot_block(tile, cpu::WeightKind::kF32, q_heads + first_row * head_dim, head_dim, rows, head_dim, key_rows,
                       tile_out);
        for (int g = 0; g < rows; ++g) {
          for (int c = 0; c < cols; ++c) dots[(first_row + g) * dots_stride + r0 + c] = tile_out[g * tile.cols + c];
        }
      }
    }
  }
}

// sums[h] = the sum over j in [first, n) of double(rows[h][j]), ascending j from 0.0, for
// h < count (1..4): up to four independent chains in one loop, so their adds overlap.
template <int count>
void ordered_sums(const float* const* rows, int64_t first, int64_t n, double* sums) {
  double acc[count] = {};
  for (int64_t j = first; j < n; ++j) {
    for (int h = 0; h < count; ++h) acc[h] += rows[h][j];
  }
  for (int h = 0; h < count; ++h) sums[h] = acc[h];
}

// Attention of the query heads of kv heads [item.first_kv_head, + item.num_kv_heads) for one
// query row, page by page for all of them: a slot holds the rows of all kv heads side by side
// ([KVH, Dh]), so an item of several kv heads reads each page's bytes as one contiguous run
// (a single head's rows, Dh elements out of every KVH * Dh, streamed at 10 against 26 GB/s
// contiguous from memory here: docs/perf/cpu-roofline.md). Each head's arithmetic is exactly
// that of causal_attention_one_token: heads only share the loads of K/V rows; their values
// never mix.
void attend(const float* q, const PagedKvLayer& layer, const PagedAttentionPlan& plan, int num_heads,
            const WorkItem& item, Scratch& scratch, float* out) {
  const int head_dim = layer.head_dim;
  const int block_size = layer.block_size;
  const int group = num_heads / layer.num_kv_heads;
  const int item_heads = item.num_kv_heads * group;  // query heads of the item, rows of scores
  const int64_t n = item.num_keys;
  const int64_t first_key = first_visible_key(plan, n);
  const float scale = plan.variant.softmax_scale > 0.0f ? plan.variant.softmax_scale
                                                       : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float soft_cap = plan.variant.soft_cap;
  const int first_head = item.first_kv_head * group;
  const float* q_row = q + (item.row * num_heads + first_head) * static_cast<int64_t>(head_dim);
  float* scores = scratch.scores.data();
  float* max_score = scratch.max_score.data();
  float* inv_denominator = scratch.inv_denominator.data();

  // Pass 1: scores and running max, in ascending j over the visible keys [first_key, n).
  for (int g = 0; g < item_heads; ++g) max_score[g] = -INFINITY;
  for (int64_t j = first_key; j < n;) {
    const int64_t page = j / block_size, offset = j % block_size;
    const int64_t count = std::min<int64_t>(block_size - offset, n - j);
    const PageRows k_page = page_rows(layer, layer.k_cache, layer.k_scales, item.pages[page], item.first_kv_head,
                                      item.num_kv_heads, offset, count, scratch.k_rows);
    key_dots(q_row, item.num_kv_heads, group, head_dim, k_page.rows, k_page.stride, head_dim, count, scores + j, n);
    for (int g = 0; g < item_heads; ++g) {
      float* s = scores + g * n + j;
      for (int64_t r = 0; r < count; ++r) {
        float score = s[r] * scale;
        if (soft_cap > 0.0f) score = soft_cap * std::tanh(score / soft_cap);
        s[r] = score;
        max_score[g] = std::max(max_score[g], score);
      }
    }
    j += count;
  }
  // Pass 2: probabilities; the denominator is summed in double in ascending j, then the
  // head's sink (if any) joins it.
  for (int g0 = 0; g0 < item_heads; g0 += 4) {
    const int heads = std::min(4, item_heads - g0);
    const float* rows[4];
    double denominators[4];
    for (int h = 0; h < heads; ++h) {
      const int g = g0 + h;
      const float* sink = plan.variant.sinks != nullptr ? plan.variant.sinks + first_head + g : nullptr;
      if (sink != nullptr) max_score[g] = std::max(max_score[g], *sink);
      cpu::exp_shifted(scores + g * n + first_key, n - first_key, max_score[g]);
      rows[h] = scores + g * n;
    }
    switch (heads) {
      case 1: ordered_sums<1>(rows, first_key, n, denominators); break;
      case 2: ordered_sums<2>(rows, first_key, n, denominators); break;
      case 3: ordered_sums<3>(rows, first_key, n, denominators); break;
      default: ordered_sums<4>(rows, first_key, n, denominators); break;
    }
    for (int h = 0; h < heads; ++h) {
      const int g = g0 + h;
      const float* sink = plan.variant.sinks != nullptr ? plan.variant.sinks + first_head + g : nullptr;
      if (sink != nullptr) denominators[h] += cpu::exp_f32(*sink - max_score[g]);
      inv_denominator[g] = static_cast<float>(1.0 / denominators[h]);
    }
  }
  // Pass 3: out[d] = sum_j (p_j * inv) * v_j[d], ascending j, from 0.0f. Lanes are d.
  for (int g = 0; g < item_heads; ++g) {
    float* s = scores + g * n;
    const float inv = inv_denominator[g];
    for (int64_t j = first_key; j < n; ++j) s[j] *= inv;
  }
  float* acc = scratch.acc.data();
  std::fill(acc, acc + static_cast<int64_t>(item_heads) * head_dim, 0.0f);
  const bool wide = use_avx512() && head_dim % 16 == 0;
  for (int64_t j = first_key; j < n;) {
    const int64_t page = j / block_size, offset = j % block_size;
    const int64_t count = std::min<int64_t>(block_size - offset, n - j);
    const PageRows v_page = page_rows(layer, layer.v_cache, layer.v_scales, item.pages[page], item.first_kv_head,
                                      item.num_kv_heads, offset, count, scratch.v_rows);
    for (int h = 0; h < item.num_kv_heads; ++h) {
      const float* values = v_page.rows + static_cast<int64_t>(h) * head_dim;
      const float* weights = scores + h * group * n + j;
      float* head_acc = acc + static_cast<int64_t>(h) * group * head_dim;
      if (wide) {
#if defined(MOERT_X86_KERNELS)
        x86::accumulate_values_avx512(values, v_page.stride, count, weights, n, group, head_dim, head_acc);
#endif
      } else {
        accumulate_values(values, v_page.stride, count, weights, n, group, head_dim, head_acc);
      }
    }
    j += count;
  }
  std::memcpy(out + (item.row * num_heads + first_head) * static_cast<int64_t>(head_dim), acc,
              sizeof(float) * static_cast<size_t>(item_heads) * head_dim);
}

// E4M3 encoding of one K or V row [KVH, Dh] into `slot`, each head under its (block, head)
// scale (see PagedKvLayer): offset 0 starts the scale at the head's amax / 448 rounded up to
// a power of two; a later row with a larger amax grows it (again a power of two) and
// re-encodes the head's rows before it in the block. Powers of two make that re-encoding a
// plain exponent shift, exact unless a value drops into E4M3's subnormals, so rows do not
// lose precision each time the scale grows; E4M3's relative precision does not depend on
// where in its range a value sits, so the rounding up costs nothing but range.
void write_fp8_row(const PagedKvLayer& layer, uint8_t* cache, float* scales, int64_t slot, const float* row) {
  const int64_t stride = slot_stride(layer);
  const int64_t head_dim = layer.head_dim;
  const int64_t block = slot / layer.block_size, offset = slot % layer.block_size;
  uint8_t* block_codes = cache + block * layer.block_size * stride;
  for (int head = 0; head < layer.num_kv_heads; ++head) {
    const float* values = row + head * head_dim;
    float amax = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(values[d]));
    MOERT_CHECK(std::isfinite(amax), "non-finite K/V value written to an F8_E4M3 cache (slot " << slot << ")");
    const float needed = amax > 0.0f ? power_of_two_at_least(amax / quant::kE4m3Max) : 0.0f;
    float& scale = scales[block * layer.num_kv_heads + head];
    if (offset == 0) {
      scale = needed;
    } else if (needed > scale) {
      const float old_scale = scale;
      for (int64_t r = 0; r < offset; ++r) {
        uint8_t* codes = block_codes + r * stride + head * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) codes[d] = quant::e4m3_encode(quant::e4m3_decode(codes[d]) * old_scale / needed);
      }
      scale = needed;
    }
    uint8_t* out = block_codes + offset * stride + head * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = scale > 0.0f ? quant::e4m3_encode(values[d] / scale) : 0;
  }
}

}  // namespace

void write_kv_slots(const PagedKvLayer& layer, const float* k, const float* v, const int64_t* slots,
                    int64_t num_tokens) {
  check_layer(layer);
  const int64_t stride = slot_stride(layer);
  const int64_t num_slots = static_cast<int64_t>(layer.num_blocks) * layer.block_size;
  const bool latent = layer.v_cache == layer.k_cache;  // one row is key and value: write it once
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot == -1) continue;
    MOERT_CHECK(slot >= 0 && slot < num_slots,
                "slots[" << t << "] = " << slot << " must be -1 (padding) or in [0, num_blocks * block_size = "
                         << num_slots << ")");
    switch (layer.dtype) {
      case DType::kF32:
        std::memcpy(static_cast<float*>(layer.k_cache) + slot * stride, k + t * stride,
                    sizeof(float) * static_cast<size_t>(stride));
        if (!latent) {
          std::memcpy(static_cast<float*>(layer.v_cache) + slot * stride, v + t * stride,
                      sizeof(float) * static_cast<size_t>(stride));
        }
        break;
      case DType::kBF16:
        for (int64_t i = 0; i < stride; ++i) {
          static_cast<uint16_t*>(layer.k_cache)[slot * stride + i] = quant::f32_to_bf16(k[t * stride + i]);
          if (!latent) static_cast<uint16_t*>(layer.v_cache)[slot * stride + i] = quant::f32_to_bf16(v[t * stride + i]);
        }
        break;
      default:
        write_fp8_row(layer, static_cast<uint8_t*>(layer.k_cache), layer.k_scales, slot, k + t * stride);
        if (!latent) write_fp8_row(layer, static_cast<uint8_t*>(layer.v_cache), layer.v_scales, slot, v + t * stride);
        break;
    }
  }
}

void copy_kv_blocks(const PagedKvLayer& layer, const int32_t* src, const int32_t* dst, int64_t num_copies) {
  check_layer(layer);
  const int64_t block_bytes = static_cast<int64_t>(layer.block_size) * slot_stride(layer) * kv_element_bytes(layer.dtype);
  for (int64_t i = 0; i < num_copies; ++i) {
    MOERT_CHECK(src[i] >= 0 && src[i] < layer.num_blocks,
                "src[" << i << "] = " << src[i] << " must be in [0, num_blocks = " << layer.num_blocks << ")");
    MOERT_CHECK(dst[i] >= 0 && dst[i] < layer.num_blocks,
                "dst[" << i << "] = " << dst[i] << " must be in [0, num_blocks = " << layer.num_blocks << ")");
    if (src[i] == dst[i]) continue;
    // A latent cache's value storage is its key storage: copied once.
    void* const caches[] = {layer.k_cache, layer.v_cache == layer.k_cache ? nullptr : layer.v_cache};
    for (void* cache : caches) {
      if (cache == nullptr) continue;
      char* bytes = static_cast<char*>(cache);
      std::memcpy(bytes + dst[i] * block_bytes, bytes + src[i] * block_bytes, static_cast<size_t>(block_bytes));
    }
    if (layer.dtype == DType::kF8E4M3) {
      for (int head = 0; head < layer.num_kv_heads; ++head) {
        layer.k_scales[dst[i] * layer.num_kv_heads + head] = layer.k_scales[src[i] * layer.num_kv_heads + head];
        layer.v_scales[dst[i] * layer.num_kv_heads + head] = layer.v_scales[src[i] * layer.num_kv_heads + head];
      }
    }
  }
}

namespace {

// A thread's scores buffer ([item heads, max_kv_len] floats) stays within this unless an item
// holds a single kv head (then it is what one kv head needs, as before items grouped heads).
constexpr int64_t kScoresBudgetBytes = int64_t{8} << 20;

// KV heads per work item: all of them when there are enough items anyway (at least four per
// thread, or a multiple of the threads: equal shares), else the largest divisor of kv_heads
// that still gives that, down to one (batch-1 decode on two threads with 4 kv heads: 2); never
// more than keep the scores within kScoresBudgetBytes.
int kv_heads_per_item(int kv_heads, int group, int64_t max_kv_len, int64_t num_rows, int num_threads) {
  for (int per_item = kv_heads; per_item > 1; --per_item) {
    if (kv_heads % per_item != 0) continue;
    if (int64_t{per_item} * group * max_kv_len * static_cast<int64_t>(sizeof(float)) > kScoresBudgetBytes) continue;
    const int64_t items = num_rows * (kv_heads / per_item);
    if (items >= 4 * static_cast<int64_t>(num_threads) || items % num_threads == 0) return per_item;
  }
  return 1;
}

}  // namespace

void paged_attention_forward(const float* q, const PagedKvLayer& layer, const PagedAttentionPlan& plan,
                             int num_heads, float* out, ThreadPool& pool) {
  check_layer(layer);
  const int64_t max_kv_len = check_plan(layer, plan, num_heads);
  const int kv_heads = layer.num_kv_heads;
  const int group = num_heads / kv_heads;
  MOERT_CHECK(group <= kMaxGroup, "num_heads / num_kv_heads = " << group << " exceeds " << kMaxGroup);

  // Items are (sequence, row, kv heads) in that order, each covering `item_kv_heads` kv heads.
  // Split them into contiguous ranges of about equal cost (keys attended), one per thread:
  // causal rows and mixed context lengths make per-item cost uneven. Neither the split nor
  // the item size affects results.
  const int64_t num_rows = plan.num_seqs > 0 ? plan.qo_indptr[plan.num_seqs] - plan.qo_indptr[0] : 0;
  const int item_kv_heads = kv_heads_per_item(kv_heads, group, max_kv_len, num_rows, pool.num_threads());
  int64_t total_cost = 0;
  for (int b = 0; b < plan.num_seqs; ++b) {
    const int64_t num_pages = plan.kv_page_indptr[b + 1] - plan.kv_page_indptr[b];
    const int64_t kv_len = (num_pages - 1) * layer.block_size + plan.kv_last_page_len[b];
    const int64_t q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
    // sum over rows of (kv_len - q_len + i + 1), i in [0, q_len)
    total_cost += kv_heads * (q_len * (kv_len - q_len + 1) + q_len * (q_len - 1) / 2);
  }
  if (total_cost == 0) return;
  const int num_chunks = pool.num_threads();
  // Chunk c covers the items from cursor chunk_begin[c] (inclusive) to chunk_begin[c + 1].
  struct Cursor {
    int seq;
    int64_t row;
    int kv_head;
    bool operator<(const Cursor& o) const {
      return seq != o.seq ? seq < o.seq : row != o.row ? row < o.row : kv_head < o.kv_head;
    }
  };
  const Cursor end_cursor{plan.num_seqs, 0, 0};
  std::vector<Cursor> chunk_begin(static_cast<size_t>(num_chunks) + 1, end_cursor);
  {
    int chunk = 0;
    int64_t cost = 0;
    for (int b = 0; b < plan.num_seqs && chunk < num_chunks; ++b) {
      const int64_t num_pages = plan.kv_page_indptr[b + 1] - plan.kv_page_indptr[b];
      const int64_t kv_len = (num_pages - 1) * layer.block_size + plan.kv_last_page_len[b];
      const int64_t q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
      for (int64_t i = 0; i < q_len && chunk < num_chunks; ++i) {
        for (int kv_head = 0; kv_head < kv_heads; kv_head += item_kv_heads) {
          while (chunk < num_chunks && cost >= total_cost * chunk / num_chunks) {
            chunk_begin[static_cast<size_t>(chunk)] = Cursor{b, plan.qo_indptr[b] + i, kv_head};
            ++chunk;
          }
          cost += item_kv_heads * (kv_len - q_len + i + 1);
        }
      }
    }
    // Chunks never opened start at the end cursor and so are empty.
  }

  pool.parallel_for(num_chunks, 1, [&](int64_t chunk_lo, int64_t chunk_hi) {
    Scratch scratch;
    const int64_t item_heads = static_cast<int64_t>(item_kv_heads) * group;
    scratch.scores.resize(static_cast<size_t>(item_heads * max_kv_len));
    scratch.acc.resize(static_cast<size_t>(item_heads * layer.head_dim));
    scratch.max_score.resize(static_cast<size_t>(item_heads));
    scratch.inv_denominator.resize(static_cast<size_t>(item_heads));
    if (layer.dtype != DType::kF32) {
      scratch.k_rows.resize(static_cast<size_t>(layer.block_size) * item_kv_heads * layer.head_dim);
      scratch.v_rows.resize(scratch.k_rows.size());
    }
    for (int64_t chunk = chunk_lo; chunk < chunk_hi; ++chunk) {
      Cursor at = chunk_begin[static_cast<size_t>(chunk)];
      const Cursor end = chunk_begin[static_cast<size_t>(chunk) + 1];
      while (at < end) {
        if (at.row >= plan.qo_indptr[at.seq + 1]) {  // next sequence (skips those with q_len == 0)
          ++at.seq;
          at.row = at.seq < plan.num_seqs ? plan.qo_indptr[at.seq] : 0;
          at.kv_head = 0;
          continue;
        }
        const int b = at.seq;
        const int64_t num_pages = plan.kv_page_indptr[b + 1] - plan.kv_page_indptr[b];
        const int64_t kv_len = (num_pages - 1) * layer.block_size + plan.kv_last_page_len[b];
        const int64_t q_len = plan.qo_indptr[b + 1] - plan.qo_indptr[b];
        WorkItem item;
        item.pages = plan.kv_page_indices + plan.kv_page_indptr[b];
        item.num_keys = kv_len - q_len + (at.row - plan.qo_indptr[b]) + 1;
        item.row = at.row;
        item.first_kv_head = at.kv_head;
        item.num_kv_heads = item_kv_heads;
        attend(q, layer, plan, num_heads, item, scratch, out);
        if ((at.kv_head += item_kv_heads) == kv_heads) {
          at.kv_head = 0;
          ++at.row;
        }
      }
    }
  });
}

}  // namespace moert::attention
