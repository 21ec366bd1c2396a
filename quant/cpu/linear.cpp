#include "quant/cpu/linear.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "quant/bf16.h"
#include "quant/cpu/isa.h"
#include "core/check.h"

namespace moert::quant {
namespace {

// The canonical dot product, which every instruction-set path reproduces bit for bit:
// 16 lanes; element i of each full 16-element group goes to lane i % 16 as
// lane = fma(a, b, lane); the tail elements go to lanes 0..r-1 the same way; then the lanes
// are summed by the tree lane[l] += lane[l + w] for w = 8, 4, 2, 1. (AVX-512 holds the 16
// lanes in one register, AVX2 in two; the portable path uses std::fma.)
constexpr int kLanes = 16;
constexpr int kMaxRows = 4;  // x rows sharing one pass over a weight row

float reduce_lanes(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

// ---- Portable ----------------------------------------------------------------------------
template <typename WeightAt>
void dot_rows_portable(const float* x, int64_t x_stride, int rows, int64_t k, WeightAt weight_at, float* out) {
  float lanes[kMaxRows][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float w = weight_at(i + l);
      for (int r = 0; r < rows; ++r) lanes[r][l] = std::fma(x[r * x_stride + i + l], w, lanes[r][l]);
    }
  }
  for (int l = 0; i < k; ++i, ++l) {
    const float w = weight_at(i);
    for (int r = 0; r < rows; ++r) lanes[r][l] = std::fma(x[r * x_stride + i], w, lanes[r][l]);
  }
  for (int r = 0; r < rows; ++r) out[r] = reduce_lanes(lanes[r]);
}

// ---- AVX-512 -----------------------------------------------------------------------------
enum class WeightKind { kF32, kBF16, kF16 };

template <WeightKind kind>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) inline __m512 load16_avx512(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (kind == WeightKind::kBF16) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  } else {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_cvtph_ps(raw);
  }
}

template <WeightKind kind>
float scalar_weight(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) return static_cast<const float*>(w)[i];
  else if constexpr (kind == WeightKind::kBF16) return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
}

template <WeightKind kind, int rows>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void dot_rows_avx512(const float* x, int64_t x_stride,
                                                                                  int64_t k, const void* w, float* out) {
  __m512 acc[rows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    const __m512 wv = load16_avx512<kind>(w, i);
    for (int r = 0; r < rows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * x_stride + i), wv, acc[r]);
  }
  alignas(64) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    _mm512_store_ps(lanes, acc[r]);
    for (int64_t j = i, l = 0; j < k; ++j, ++l) lanes[l] = std::fma(x[r * x_stride + j], scalar_weight<kind>(w, j), lanes[l]);
    out[r] = reduce_lanes(lanes);
  }
}

// rows x cols accumulators: x rows against `cols` weight rows (w_rows[c]); out[r * cols + c].
template <WeightKind kind, int rows, int cols>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void dot_block_avx512(const float* x, int64_t x_stride,
                                                                                   int64_t k, const void* const* w_rows,
                                                                                   float* out) {
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    __m512 wv[cols];
    for (int c = 0; c < cols; ++c) wv[c] = load16_avx512<kind>(w_rows[c], i);
    for (int r = 0; r < rows; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * x_stride + i);
      for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  alignas(64) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      _mm512_store_ps(lanes, acc[r][c]);
      for (int64_t j = i, l = 0; j < k; ++j, ++l) {
        lanes[l] = std::fma(x[r * x_stride + j], scalar_weight<kind>(w_rows[c], j), lanes[l]);
      }
      out[r * cols + c] = reduce_lanes(lanes);
    }
  }
}

// ---- AVX2 + FMA (lanes 0-7 and 8-15 in two registers) -------------------------------------
template <WeightKind kind>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_avx2(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (kind == WeightKind::kBF16) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  }
}

template <WeightKind kind, int rows>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_avx2(const float* x, int64_t x_stride, int64_t k, const void* w,
                                                            float* out) {
  __m256 lo[rows], hi[rows];
  for (int r = 0; r < rows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    const __m256 w_lo = load8_avx2<kind>(w, i);
    const __m256 w_hi = load8_avx2<kind>(w, i + 8);
    for (int r = 0; r < rows; ++r) {
      lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * x_stride + i), w_lo, lo[r]);
      hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * x_stride + i + 8), w_hi, hi[r]);
    }
  }
  alignas(32) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    _mm256_store_ps(lanes, lo[r]);
    _mm256_store_ps(lanes + 8, hi[r]);
    for (int64_t j = i, l = 0; j < k; ++j, ++l) lanes[l] = std::fma(x[r * x_stride + j], scalar_weight<kind>(w, j), lanes[l]);
    out[r] = reduce_lanes(lanes);
  }
}

using Isa = CpuIsa;
inline Isa active_isa() { return active_cpu_isa(); }

template <WeightKind kind>
void dot_rows(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (active_isa()) {
    case Isa::kAvx512:
      switch (rows) {
        case 1: return dot_rows_avx512<kind, 1>(x, x_stride, k, w, out);
        case 2: return dot_rows_avx512<kind, 2>(x, x_stride, k, w, out);
        case 3: return dot_rows_avx512<kind, 3>(x, x_stride, k, w, out);
        default: return dot_rows_avx512<kind, 4>(x, x_stride, k, w, out);
      }
    case Isa::kAvx2:
      switch (rows) {
        case 1: return dot_rows_avx2<kind, 1>(x, x_stride, k, w, out);
        case 2: return dot_rows_avx2<kind, 2>(x, x_stride, k, w, out);
        case 3: return dot_rows_avx2<kind, 3>(x, x_stride, k, w, out);
        default: return dot_rows_avx2<kind, 4>(x, x_stride, k, w, out);
      }
    case Isa::kPortable:
      return dot_rows_portable(x, x_stride, rows, k, [&](int64_t i) { return scalar_weight<kind>(w, i); }, out);
  }
}

template <WeightKind kind>
void linear_rows(const float* x, int64_t num_rows, const void* w, int64_t n, int64_t k, int64_t elem_bytes,
                 const float* bias, float* y, ThreadPool& pool) {
  // Rows of x are taken in tiles so a tile stays in cache while the weights stream past it.
  constexpr int64_t kRowTile = 64;
  const int64_t grain = std::max<int64_t>(8, 8192 / std::max<int64_t>(1, k));
  constexpr int kCols = 4;
  const bool blocked = active_isa() == Isa::kAvx512;
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    float dots[kMaxRows * kCols];
    for (int64_t t0 = 0; t0 < num_rows; t0 += kRowTile) {
      const int64_t t_end = std::min(num_rows, t0 + kRowTile);
      int64_t col = begin;
      // AVX-512: 4 weight rows x up to 4 x rows per pass (16 accumulators).
      for (; blocked && col + kCols <= end; col += kCols) {
        const void* w_rows[kCols];
        for (int c = 0; c < kCols; ++c) w_rows[c] = static_cast<const char*>(w) + (col + c) * k * elem_bytes;
        for (int64_t t = t0; t < t_end; t += kMaxRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, t_end - t));
          switch (rows) {
            case 1: dot_block_avx512<kind, 1, kCols>(x + t * k, k, k, w_rows, dots); break;
            case 2: dot_block_avx512<kind, 2, kCols>(x + t * k, k, k, w_rows, dots); break;
            case 3: dot_block_avx512<kind, 3, kCols>(x + t * k, k, k, w_rows, dots); break;
            default: dot_block_avx512<kind, 4, kCols>(x + t * k, k, k, w_rows, dots); break;
          }
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < kCols; ++c) {
              y[(t + r) * n + col + c] = dots[r * kCols + c] + (bias != nullptr ? bias[col + c] : 0.0f);
            }
          }
        }
      }
      for (; col < end; ++col) {
        const void* w_row = static_cast<const char*>(w) + col * k * elem_bytes;
        const float b = bias != nullptr ? bias[col] : 0.0f;
        for (int64_t t = t0; t < t_end; t += kMaxRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, t_end - t));
          dot_rows<kind>(x + t * k, k, rows, k, w_row, dots);
          for (int r = 0; r < rows; ++r) y[(t + r) * n + col] = dots[r] + b;
        }
      }
    }
  });
}

}  // namespace

const char* cpu_isa_name() { return cpu_isa_label(active_isa()); }

float dot_f32(const float* a, const float* b, int64_t k) {
  float out;
  dot_rows<WeightKind::kF32>(a, 0, 1, k, b, &out);
  return out;
}

void dot_f32_rows(const float* x, int64_t x_stride, int rows, const float* w, int64_t k, float* out) {
  for (int r = 0; r < rows; r += kMaxRows) {
    dot_rows<WeightKind::kF32>(x + r * x_stride, x_stride, std::min(kMaxRows, rows - r), k, w, out + r);
  }
}

float dot_f32_reference(const float* a, const float* b, int64_t k) {
  float out;
  dot_rows_portable(a, 0, 1, k, [&](int64_t i) { return b[i]; }, &out);
  return out;
}

void linear_forward(const float* x, int64_t num_rows, const TensorView& weight, const float* bias, float* y,
                    ThreadPool& pool) {
  MOERT_CHECK(weight.ndim() == 2 && weight.is_contiguous(), "linear weight must be a contiguous [N, K] matrix");
  const int64_t n = weight.dim(0);
  const int64_t k = weight.dim(1);
  switch (weight.dtype) {
    case DType::kF32: return linear_rows<WeightKind::kF32>(x, num_rows, weight.data, n, k, 4, bias, y, pool);
    case DType::kBF16: return linear_rows<WeightKind::kBF16>(x, num_rows, weight.data, n, k, 2, bias, y, pool);
    case DType::kF16: return linear_rows<WeightKind::kF16>(x, num_rows, weight.data, n, k, 2, bias, y, pool);
    default:
      MOERT_CHECK(false, "linear weight dtype " << dtype_name(weight.dtype) << " is not F32/BF16/F16");
  }
}

}  // namespace moert::quant
