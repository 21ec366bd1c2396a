// The subset of CUDA's warp matrix API (nvcuda::wmma, <mma.h>) and __nv_bfloat16 that the
// tensor-core kernels use, for the emulation (core/cuda/emulation/emulated_runtime.h).
// On a GPU a fragment is spread over the registers of a warp's 32 lanes in a layout the API
// leaves unspecified; kernels only load, multiply, fill, scale element-wise and store whole
// fragments, never read a lane's elements by position. Here every emulated lane holds the
// whole tile, row-major, and does the whole operation itself (the results are the same, the
// work 32 times over: keep emulated shapes small). Products are summed in F32 in K order; a
// tensor core sums in its own order, so results agree to F32 rounding, not bit for bit.
#pragma once

#if defined(__CUDACC__)
#error "emulated_wmma.h is for host compilers; nvcc uses <mma.h>"
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

struct __nv_bfloat16 {
  uint16_t bits;
};

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <class Use, int M, int N, int K>
struct TileShape;
template <int M, int N, int K>
struct TileShape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct TileShape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct TileShape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
inline float bf16_value(__nv_bfloat16 value) {
  const uint32_t bits = static_cast<uint32_t>(value.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int kRows = detail::TileShape<Use, M, N, K>::rows;
  static constexpr int kCols = detail::TileShape<Use, M, N, K>::cols;
  static constexpr int num_elements = kRows * kCols;
  float x[num_elements];  // [kRows][kCols]
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (float& element : f.x) element = value;
}

// Row-major: element (r, c) at p[r * ldm + c]; column-major: at p[c * ldm + r].
template <class Use, int M, int N, int K, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, __nv_bfloat16, Layout>;
  constexpr bool column_major = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < F::kRows; ++r) {
    for (int c = 0; c < F::kCols; ++c) {
      f.x[r * F::kCols + c] = detail::bf16_value(column_major ? p[c * ldm + r] : p[r * ldm + c]);
    }
  }
}

// d = a . b + c (d may be c).
template <int M, int N, int K, class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, M, N, K, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  float result[M * N];
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      float sum = c.x[m * N + n];
      for (int k = 0; k < K; ++k) sum += a.x[m * K + k] * b.x[k * N + n];
      result[m * N + n] = sum;
    }
  }
  std::memcpy(d.x, result, sizeof(result));
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) (layout == mem_row_major ? p[m * ldm + n] : p[n * ldm + m]) = f.x[m * N + n];
  }
}

}  // namespace nvcuda::wmma
