// Paged K/V writes, paged and contiguous causal attention, block copies: the twins of
// attention/cpu (write_kv_slots, paged_attention_forward, causal_attention_one_token,
// copy_kv_blocks). Layouts and the FP8 block-scale rule: attention/paged_kv.h, docs/kv-cache.md.
//
// Shapes: T query rows / new tokens, H heads, KVH kv heads, Dh head_dim, NB blocks, BS block_size.
#include "attention/cuda/attention.h"

#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 128;  // every kernel here: whole warps
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxHeadDim = 576;                                         // MLA latent rows (512 + 64)
constexpr int kDimsPerLane = (kMaxHeadDim + kWarpSize - 1) / kWarpSize;  // q elements a lane holds: 18
constexpr int kDimsPerThread = (kMaxHeadDim + kThreads - 1) / kThreads;  // output dims a thread owns: 5
constexpr int kChunk = kThreads;  // keys per online-softmax step: one score per thread
constexpr float kE4m3Max = 448.0f;

// ---- Element codecs --------------------------------------------------------------------------

// float -> E4M3 code, bit-identical to quant::e4m3_encode (quant/formats/minifloat.cpp): NaN ->
// 0x7F; |x| clamped to 448 (satfinite), then rounded to nearest, ties to even, on the E4M3 grid
// (subnormals included); the sign bit is kept (-0.0 -> 0x80).
__device__ __forceinline__ uint8_t e4m3_encode(float x) {
  const uint32_t bits = float_to_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = fminf(fabsf(x), kE4m3Max);
  if (a == 0.0f) return sign;
  // e = floor(log2 a) clamped below to E4M3's subnormal exponent -6 (float subnormals lie far
  // below, so the float exponent field is enough).
  int e = static_cast<int>((float_to_bits(a) >> 23) & 0xffu) - 127;
  if (e < -6) e = -6;
  // y = a * 2^(3 - e), exact (a power of two, 3 - e in [-5, 9]) and < 16: the grid step is 1.
  const float y = a * bits_to_float(static_cast<uint32_t>(127 + 3 - e) << 23);
  const float whole = floorf(y);
  const float frac = y - whole;  // exact
  uint32_t n = static_cast<uint32_t>(whole);
  if (frac > 0.5f || (frac == 0.5f && (n & 1u))) ++n;
  // n carries the implicit leading one (n in [8, 16] above the subnormals), so a round-up to
  // 16 carries into the next binade.
  return static_cast<uint8_t>(sign | ((static_cast<uint32_t>(e + 6) << 3) + n));
}

// Cache elements widened to F32; an FP8 code times its (block, kv head) scale.
__device__ __forceinline__ float widen(float x, float /*scale*/) { return x; }
__device__ __forceinline__ float widen(uint16_t bits, float /*scale*/) { return bf16_to_float(bits); }
__device__ __forceinline__ float widen(uint8_t code, float scale) { return e4m3_to_float(code) * scale; }

__device__ __forceinline__ void store(float* cache, int64_t i, float x) { cache[i] = x; }
__device__ __forceinline__ void store(uint16_t* cache, int64_t i, float x) { cache[i] = float_to_bf16(x); }

// ---- Block reductions --------------------------------------------------------------------------

// Max of `value` over the block (kThreads threads, all calling); every thread gets it.
// `scratch` is [kWarps] shared; the caller keeps a barrier between this call's reads of it and
// its next write.
__device__ __forceinline__ float block_max(float value, float* scratch) {
  value = warp_max(value);
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  float result = scratch[0];
  for (int w = 1; w < kWarps; ++w) result = scratch[w] > result ? scratch[w] : result;
  return result;
}

// x[0] + ... + x[kN - 1] as a balanced tree (kN a power of two), in a fixed order.
template <int kN>
__device__ __forceinline__ float tree_sum(const float* x) {
  if constexpr (kN == 1) {
    return x[0];
  } else {
    return tree_sum<kN / 2>(x) + tree_sum<kN / 2>(x + kN / 2);
  }
}

// ---- write_kv ----------------------------------------------------------------------------------

// F32 / BF16: element e of the [T, KVH * Dh] rows (grid-stride, ~kElementsPerThread a thread) goes
// to its token's slot (BF16 rounded to nearest even, as quant::f32_to_bf16). -1, and any slot
// outside [0, NB * BS) (which the CPU twin rejects), is skipped. Tokens run in parallel: the
// slots of one call are distinct (the scheduler hands each position its own slot). A latent
// cache (v == k) is written once, from k, like write_kv_slots.
constexpr int kElementsPerThread = 8;

template <typename Elem>
__global__ void write_kv_kernel(Elem* k_cache, Elem* v_cache, const float* k, const float* v, const int64_t* slots,
                                int64_t num_elements, int64_t num_slots, int64_t row_width) {
  const bool latent = v_cache == k_cache;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num_elements; e += step) {
    const int64_t t = e / row_width, i = e % row_width;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;  // no barrier in this kernel
    store(k_cache, slot * row_width + i, k[e]);
    if (!latent) store(v_cache, slot * row_width + i, v[e]);
  }
}

// FP8 E4M3: block (kv head, K or V) walks the T tokens in order, since a row may grow its
// (block, head) scale and re-encode the head's earlier rows of the block (attention/paged_kv.h,
// docs/kv-cache.md "Element types"). Each step does write_fp8_row's float operations
// (attention/cpu/paged_attention.cpp), so codes and scales are bit-identical: offset 0 sets the
// scale to the power of two >= amax / 448 (device_math.h), a later row only grows it, re-encoding rows
// [0, offset) as e4m3(decode(code) * old / new). amax skips NaN like std::max(amax, |x|); a
// non-finite amax is the caller's error (the CPU twin rejects it). Threads split Dh and the
// re-encoded rows. The token loop is uniform over the block, so every thread meets every
// barrier; a token's writes are read by the next token only after its block_max barrier.
__global__ void write_kv_fp8_kernel(uint8_t* k_cache, uint8_t* v_cache, float* k_scales, float* v_scales,
                                    const float* k, const float* v, const int64_t* slots, int64_t num_tokens,
                                    int64_t num_slots, int block_size, int num_kv_heads, int head_dim) {
  const int head = blockIdx.x;
  const bool is_v = blockIdx.y == 1;
  uint8_t* cache = is_v ? v_cache : k_cache;
  float* scales = is_v ? v_scales : k_scales;
  const float* rows = is_v ? v : k;                                      // [T, KVH, Dh]
  const int64_t stride = static_cast<int64_t>(num_kv_heads) * head_dim;  // one slot: [KVH, Dh]
  __shared__ float scratch[kWarps];
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;  // uniform over the block
    const int64_t block = slot / block_size, offset = slot % block_size;
    const float* values = rows + t * stride + static_cast<int64_t>(head) * head_dim;
    float amax = 0.0f;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
      const float a = fabsf(values[d]);
      amax = amax < a ? a : amax;
    }
    amax = block_max(amax, scratch);
    const float needed = amax > 0.0f ? power_of_two_at_least(amax / kE4m3Max) : 0.0f;
    float* scale_at = scales + block * num_kv_heads + head;
    const float old_scale = *scale_at;
    __syncthreads();  // every thread has read the scratch and the old scale before they change
    uint8_t* block_codes = cache + block * block_size * stride + static_cast<int64_t>(head) * head_dim;
    float scale = old_scale;
    if (offset == 0) {
      scale = needed;
    } else if (needed > old_scale) {
      for (int64_t i = threadIdx.x; i < offset * head_dim; i += blockDim.x) {
        uint8_t* code = block_codes + (i / head_dim) * stride + i % head_dim;
        *code = e4m3_encode(e4m3_to_float(*code) * old_scale / needed);
      }
      scale = needed;
    }
    if (threadIdx.x == 0) *scale_at = scale;
    uint8_t* out = block_codes + offset * stride;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) out[d] = scale > 0.0f ? e4m3_encode(values[d] / scale) : 0;
  }
}

// ---- Attention ---------------------------------------------------------------------------------

// One K or V row of one kv head: Dh elements and the scale they widen with.
template <typename Elem>
struct KvRow {
  const Elem* data;
  float scale;
};

// Keys of the paged cache (attention/paged_kv.h): the row's sequence is found on the device
// (binary search over the plan's qo_indptr); key j of it lives in page j / BS, offset j % BS.
template <typename Elem>
struct PagedKeys {
  using Element = Elem;
  const Elem* k_cache;    // [NB, BS, KVH, Dh]
  const Elem* v_cache;    // [NB, BS, KVH, Dh] (== k_cache for a latent cache: the row is read twice)
  const float* k_scales;  // [NB, KVH], FP8 only (else null)
  const float* v_scales;
  int block_size, num_kv_heads, head_dim, num_seqs;
  const int32_t* qo_indptr;  // the plan's arrays, device memory
  const int32_t* kv_page_indptr;
  const int32_t* kv_page_indices;
  const int32_t* kv_last_page_len;
  const int32_t* pages;  // set by locate(): the row's block ids in logical order

  // Keys visible to query row `row` without a window (its position + 1); 0 when no sequence
  // owns the row (left untouched, like the CPU twin).
  __device__ int64_t locate(int64_t row) {
    if (num_seqs <= 0 || row < qo_indptr[0] || row >= qo_indptr[num_seqs]) return 0;
    // The last b with qo_indptr[b] <= row (qo_indptr[lo] <= row < qo_indptr[hi] throughout):
    // sequences with q_len 0 share their qo_indptr with a later one and are passed over.
    int lo = 0, hi = num_seqs;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (qo_indptr[mid] <= row) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const int b = lo;
    const int64_t num_pages = kv_page_indptr[b + 1] - kv_page_indptr[b];
    const int64_t kv_len = (num_pages - 1) * block_size + kv_last_page_len[b];
    const int64_t q_len = qo_indptr[b + 1] - qo_indptr[b];
    pages = kv_page_indices + kv_page_indptr[b];
    return kv_len - q_len + (row - qo_indptr[b]) + 1;  // position = kv_len - q_len + i
  }
  __device__ KvRow<Elem> row_of(const Elem* cache, const float* scales, int64_t j, int kv_head) const {
    const int64_t block = pages[j / block_size];
    const int64_t slot = block * block_size + j % block_size;
    const float scale = scales != nullptr ? scales[block * num_kv_heads + kv_head] : 1.0f;
    return {cache + (slot * num_kv_heads + kv_head) * head_dim, scale};
  }
  __device__ KvRow<Elem> key(int64_t j, int kv_head) const { return row_of(k_cache, k_scales, j, kv_head); }
  __device__ KvRow<Elem> value(int64_t j, int kv_head) const { return row_of(v_cache, v_scales, j, kv_head); }
};

// Keys of one sequence's contiguous F32 history [L, KVH, Dh]; query row t sits at
// first_position + t.
struct ContiguousKeys {
  using Element = float;
  const float* keys;
  const float* values;
  int64_t first_position;
  int num_kv_heads, head_dim;

  __device__ int64_t locate(int64_t row) const { return first_position + row + 1; }
  __device__ KvRow<float> key(int64_t j, int kv_head) const {
    return {keys + (j * num_kv_heads + kv_head) * head_dim, 1.0f};
  }
  __device__ KvRow<float> value(int64_t j, int kv_head) const {
    return {values + (j * num_kv_heads + kv_head) * head_dim, 1.0f};
  }
};

// The variant as the kernel takes it (attention/attention_variant.h), the scale resolved.
struct VariantArgs {
  float scale;         // softmax_scale, or 1 / sqrt(Dh) when that is 0
  float soft_cap;      // > 0: cap * tanh(logit / cap)
  int window;          // > 0: the last `window` keys only
  const float* sinks;  // [H] device memory, or null
};

// Causal attention of one (query row, head) per block: blockIdx.x the row, blockIdx.y the
// head, kThreads threads. q, out: [T, H, Dh]. The visible keys [first, n) go in chunks of
// kChunk through an online softmax:
//  1. warp w takes keys w, w + kWarps, ...; its lanes split Dh (d = lane + 32 i, q in
//     registers; reads of a key row coalesce) and store their shares of q.k in `partials`;
//  2. thread j adds key j's 32 shares as a balanced tree (error ~log2(32), not Dh) and
//     scales / soft-caps it;
//  3. every thread takes the chunk max m' = max(m, s_j); thread j sets p_j = exp(s_j - m');
//  4. threads own output dims d = threadIdx.x + i * kThreads: the running sum l (double) and
//     the accumulators are scaled by exp(m - m'), then get sum p_j and sum p_j v_j (ascending j).
// A sink starts the recurrence at m = sink, l = 1 (= exp(sink - m), no value row): in the max
// and the denominator as attention/paged_kv.h says. out = acc / l. Keys before `first`
// (behind a sliding window, on pages that may be the null block) are never read. Shared
// memory is O(kChunk), so any length works. Three barriers per chunk and no block reductions:
// each shared array is written in one phase and read in the next, so a barrier separates every
// read from the next write.
// Invariant: n, first and every loop bound around a barrier depend only on (row, head), so
// they are uniform over the block.
template <typename Source>
__global__ void __launch_bounds__(kThreads) attention_kernel(const float* q, Source source, int num_heads, int group,
                                                             int head_dim, VariantArgs variant, float* out) {
  const int64_t row = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / group;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  __shared__ float partials[kChunk][kWarpSize + 1];  // [key][lane]; +1: conflict-free reads of a key's row
  __shared__ float scores[kChunk];
  __shared__ float weights[kChunk];  // p_j = exp(s_j - m')

  const int64_t n = source.locate(row);  // keys 0 .. position
  const int64_t first = variant.window > 0 && n > variant.window ? n - variant.window : 0;
  const float* q_row = q + (row * num_heads + head) * head_dim;
  float q_lane[kDimsPerLane];  // q[lane + 32 i]
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    q_lane[i] = n > 0 && d < head_dim ? q_row[d] : 0.0f;
  }
  float m = -INFINITY;
  double l = 0.0;
  if (variant.sinks != nullptr) {
    m = variant.sinks[head];
    l = 1.0;
  }
  float acc[kDimsPerThread];
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;

  for (int64_t chunk_start = first; chunk_start < n; chunk_start += kChunk) {
    const int count = n - chunk_start < kChunk ? static_cast<int>(n - chunk_start) : kChunk;
    for (int j = warp; j < count; j += kWarps) {
      const KvRow<typename Source::Element> key = source.key(chunk_start + j, kv_head);
      float partial = 0.0f;
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + i * kWarpSize;
        if (d < head_dim) partial += q_lane[i] * widen(key.data[d], key.scale);
      }
      partials[j][lane] = partial;
    }
    __syncthreads();
    if (tid < count) {
      float score = tree_sum<kWarpSize>(partials[tid]) * variant.scale;
      if (variant.soft_cap > 0.0f) score = variant.soft_cap * tanhf(score / variant.soft_cap);
      scores[tid] = score;
    }
    __syncthreads();
    float chunk_max = -INFINITY;
    for (int j = 0; j < count; ++j) chunk_max = scores[j] > chunk_max ? scores[j] : chunk_max;
    const float new_max = chunk_max > m ? chunk_max : m;
    if (tid < count) weights[tid] = expf(scores[tid] - new_max);
    __syncthreads();
    const float correction = new_max == m ? 1.0f : expf(m - new_max);  // 0 from m = -inf
    for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= correction;
    double chunk_sum = 0.0;
    for (int j = 0; j < count; ++j) {
      const float p = weights[j];
      chunk_sum += p;
      const KvRow<typename Source::Element> value = source.value(chunk_start + j, kv_head);
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = tid + i * kThreads;
        if (d < head_dim) acc[i] += p * widen(value.data[d], value.scale);
      }
    }
    l = l * correction + chunk_sum;
    m = new_max;
  }
  if (n > 0) {
    const float inv_l = static_cast<float>(1.0 / l);
    float* out_row = out + (row * num_heads + head) * head_dim;
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = tid + i * kThreads;
      if (d < head_dim) out_row[d] = acc[i] * inv_l;
    }
  }
}

VariantArgs variant_args(const attention::AttentionVariant& variant, int head_dim) {
  // The scale as the CPU twins compute it (attention/cpu/dense_attention.cpp).
  const float scale =
      variant.softmax_scale > 0.0f ? variant.softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  return {scale, variant.soft_cap, variant.sliding_window, variant.sinks};
}

template <typename Source>
int launch_attention(const float* q, const Source& source, int64_t num_rows, int num_heads, int num_kv_heads,
                     int head_dim, const VariantArgs& variant, float* out, CUstream_st* stream) {
  if (num_rows == 0) return 0;
  if (head_dim <= 0 || head_dim > kMaxHeadDim || num_kv_heads <= 0 || num_heads % num_kv_heads != 0 ||
      num_heads > 65535) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const dim3 grid(static_cast<unsigned>(num_rows), static_cast<unsigned>(num_heads));
  auto* kernel = &attention_kernel<Source>;
  MOERT_LAUNCH(kernel, grid, dim3(kThreads), stream, q, source, num_heads, num_heads / num_kv_heads, head_dim, variant,
               out);
  return static_cast<int>(cudaGetLastError());
}

template <typename Elem>
int launch_paged(const float* q, const attention::PagedKvLayer& layer, const attention::PagedAttentionPlan& plan,
                 int64_t num_rows, int num_heads, float* out, CUstream_st* stream) {
  PagedKeys<Elem> source;
  source.k_cache = static_cast<const Elem*>(layer.k_cache);
  source.v_cache = static_cast<const Elem*>(layer.v_cache);
  const bool fp8 = layer.dtype == DType::kF8E4M3;
  source.k_scales = fp8 ? layer.k_scales : nullptr;
  source.v_scales = fp8 ? layer.v_scales : nullptr;
  source.block_size = layer.block_size;
  source.num_kv_heads = layer.num_kv_heads;
  source.head_dim = layer.head_dim;
  source.num_seqs = plan.num_seqs;
  source.qo_indptr = plan.qo_indptr;
  source.kv_page_indptr = plan.kv_page_indptr;
  source.kv_page_indices = plan.kv_page_indices;
  source.kv_last_page_len = plan.kv_last_page_len;
  source.pages = nullptr;
  return launch_attention(q, source, num_rows, num_heads, layer.num_kv_heads, layer.head_dim,
                          variant_args(plan.variant, layer.head_dim), out, stream);
}

// ---- copy_kv_blocks ----------------------------------------------------------------------------

struct alignas(16) Word16 {
  uint32_t x[4];
};

// Whole blocks src[i] -> dst[i], i in order, each block [BS, KVH, Dh] as `block_words` Words.
// Thread g of the grid owns word offsets g, g + gridDim.x * blockDim.x, ... of every block (and
// the scales of kv head g), so a copy that reads what an earlier copy wrote reads it on the
// thread that wrote it: the order needs no barrier. Ids outside [0, NB) (which the CPU twin
// rejects) and src == dst are skipped; a latent cache's storage is copied once.
template <typename Word>
__global__ void copy_kv_blocks_kernel(Word* k_cache, Word* v_cache, float* k_scales, float* v_scales,
                                      const int32_t* src, const int32_t* dst, int64_t num_copies, int64_t block_words,
                                      int num_blocks, int num_kv_heads) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool latent = v_cache == k_cache;
  for (int64_t c = 0; c < num_copies; ++c) {
    const int64_t from = src[c], to = dst[c];
    if (from < 0 || from >= num_blocks || to < 0 || to >= num_blocks || from == to) continue;
    for (int64_t w = first; w < block_words; w += step) {
      k_cache[to * block_words + w] = k_cache[from * block_words + w];
      if (!latent) v_cache[to * block_words + w] = v_cache[from * block_words + w];
    }
    if (k_scales != nullptr && first < num_kv_heads) {
      k_scales[to * num_kv_heads + first] = k_scales[from * num_kv_heads + first];
      v_scales[to * num_kv_heads + first] = v_scales[from * num_kv_heads + first];
    }
  }
}

template <typename Word>
int launch_copy_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst, int64_t num_copies,
                       int64_t block_bytes, CUstream_st* stream) {
  const int64_t block_words = block_bytes / static_cast<int64_t>(sizeof(Word));
  const int64_t work = block_words > layer.num_kv_heads ? block_words : layer.num_kv_heads;
  const bool fp8 = layer.dtype == DType::kF8E4M3;
  auto* kernel = &copy_kv_blocks_kernel<Word>;
  MOERT_LAUNCH(kernel, dim3(static_cast<unsigned>(ceil_div(work, kThreads))), dim3(kThreads), stream,
               static_cast<Word*>(layer.k_cache), static_cast<Word*>(layer.v_cache), fp8 ? layer.k_scales : nullptr,
               fp8 ? layer.v_scales : nullptr, src, dst, num_copies, block_words, layer.num_blocks, layer.num_kv_heads);
  return static_cast<int>(cudaGetLastError());
}

bool aligned(const void* p, uintptr_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

}  // namespace

int write_kv(const attention::PagedKvLayer& layer, const float* k, const float* v, const int64_t* slots,
             int64_t num_tokens, CUstream_st* stream) {
  if (num_tokens == 0) return 0;
  const int64_t row_width = static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim;
  const int64_t num_slots = static_cast<int64_t>(layer.num_blocks) * layer.block_size;
  const int64_t num_elements = num_tokens * row_width;
  const dim3 grid(static_cast<unsigned>(ceil_div(num_elements, static_cast<int64_t>(kThreads) * kElementsPerThread)));
  switch (layer.dtype) {
    case DType::kF32: {
      auto* kernel = &write_kv_kernel<float>;
      MOERT_LAUNCH(kernel, grid, dim3(kThreads), stream, static_cast<float*>(layer.k_cache),
                   static_cast<float*>(layer.v_cache), k, v, slots, num_elements, num_slots, row_width);
      break;
    }
    case DType::kBF16: {
      auto* kernel = &write_kv_kernel<uint16_t>;
      MOERT_LAUNCH(kernel, grid, dim3(kThreads), stream, static_cast<uint16_t*>(layer.k_cache),
                   static_cast<uint16_t*>(layer.v_cache), k, v, slots, num_elements, num_slots, row_width);
      break;
    }
    case DType::kF8E4M3: {
      if (layer.k_scales == nullptr || layer.v_scales == nullptr) return static_cast<int>(cudaErrorInvalidValue);
      const bool latent = layer.v_cache == layer.k_cache;  // one row is key and value: written once
      const dim3 grid(static_cast<unsigned>(layer.num_kv_heads), latent ? 1u : 2u);
      MOERT_LAUNCH(write_kv_fp8_kernel, grid, dim3(kThreads), stream, static_cast<uint8_t*>(layer.k_cache),
                   static_cast<uint8_t*>(layer.v_cache), layer.k_scales, layer.v_scales, k, v, slots, num_tokens,
                   num_slots, layer.block_size, layer.num_kv_heads, layer.head_dim);
      break;
    }
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

int paged_attention(const float* q, const attention::PagedKvLayer& layer, const attention::PagedAttentionPlan& plan,
                    int64_t num_rows, int num_heads, float* out, CUstream_st* stream) {
  if (num_rows == 0 || plan.num_seqs == 0) return 0;
  switch (layer.dtype) {
    case DType::kF32:
      return launch_paged<float>(q, layer, plan, num_rows, num_heads, out, stream);
    case DType::kBF16:
      return launch_paged<uint16_t>(q, layer, plan, num_rows, num_heads, out, stream);
    case DType::kF8E4M3:
      if (layer.k_scales == nullptr || layer.v_scales == nullptr) return static_cast<int>(cudaErrorInvalidValue);
      return launch_paged<uint8_t>(q, layer, plan, num_rows, num_heads, out, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int contiguous_attention(const float* q, int64_t num_tokens, const float* keys, const float* values,
                         int64_t first_position, int num_heads, int num_kv_heads, int head_dim,
                         const attention::AttentionVariant& variant, float* out, CUstream_st* stream) {
  const ContiguousKeys source{keys, values, first_position, num_kv_heads, head_dim};
  return launch_attention(q, source, num_tokens, num_heads, num_kv_heads, head_dim, variant_args(variant, head_dim),
                          out, stream);
}

int copy_kv_blocks(const attention::PagedKvLayer& layer, const int32_t* src, const int32_t* dst, int64_t num_copies,
                   CUstream_st* stream) {
  if (num_copies == 0) return 0;
  const int64_t block_bytes = static_cast<int64_t>(layer.block_size) * layer.num_kv_heads * layer.head_dim *
                              attention::kv_element_bytes(layer.dtype);
  const bool k_aligned16 = aligned(layer.k_cache, 16) && aligned(layer.v_cache, 16);
  if (block_bytes % 16 == 0 && k_aligned16) {
    return launch_copy_blocks<Word16>(layer, src, dst, num_copies, block_bytes, stream);
  }
  if (block_bytes % 4 == 0 && aligned(layer.k_cache, 4) && aligned(layer.v_cache, 4)) {
    return launch_copy_blocks<uint32_t>(layer, src, dst, num_copies, block_bytes, stream);
  }
  return launch_copy_blocks<uint8_t>(layer, src, dst, num_copies, block_bytes, stream);
}

}  // namespace moert::MOERT_CUDA_NS
