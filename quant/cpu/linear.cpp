#include "quant/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "quant/cpu/isa.h"
#include "quant/cpu/linear_lanes.h"
#if defined(MOERT_X86_KERNELS)
#include "quant/cpu/x86/linear_x86.h"
#endif
#include "core/check.h"

namespace moert::quant {
namespace {

using namespace linear_detail;  // kLanes, kMaxRows, reduce_lanes, WeightKind, scalar_weight

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

using Isa = CpuIsa;
inline Isa active_isa() { return active_cpu_isa(); }

template <WeightKind kind>
void dot_rows(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (active_isa()) {
#if defined(MOERT_X86_KERNELS)
    case Isa::kAvx512: return x86::dot_rows_avx512(kind, x, x_stride, rows, k, w, out);
    case Isa::kAvx2: return x86::dot_rows_avx2(kind, x, x_stride, rows, k, w, out);
#else
    case Isa::kAvx512:
    case Isa::kAvx2:  // never selected without the x86 kernels (quant/cpu/isa.cpp)
#endif
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
#if defined(MOERT_X86_KERNELS)
  static_assert(kCols == x86::kBlockCols);
  const bool blocked = active_isa() == Isa::kAvx512;
#else
  constexpr bool blocked = false;
#endif
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
#if defined(MOERT_X86_KERNELS)
          x86::dot_block_avx512(kind, x + t * k, k, rows, k, w_rows, dots);
#endif
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
