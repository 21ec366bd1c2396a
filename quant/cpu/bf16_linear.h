// The bf16-activation mode of the FP8 weights (FP8 block and tensor) and of dense BF16 weights
// on the CPU: explicit opt-ins (`--fp8-activations bf16`, QuantizedWeightView::activations;
// `--bf16-activations bf16`, LinearWeight::dense_activations) that trade exactness for speed, as
// engines that keep activations in BF16 do. x is rounded to BF16 once per row and the
// E4M3 codes become BF16 in registers, so one AVX-512 BF16 instruction (vdpbf16ps) takes 32
// products; the block scale multiplies each 128-column block's partial sums once instead of
// every weight. The definition below (docs/quant-formats.md "BF16 activations") is the same on
// every path: the results are bit-identical across paths, thread counts and batch shapes, and
// differ from the F32 path by the rounding of x (relative ~2^-9 per element).
//
// Definition, for one row x of K floats and one FP8 weight row (codes c_i, block scales s_b per
// 128 columns; the tensor format: one s for every block):
//   * xb_i = x_i rounded to BF16 (nearest, ties to even; NaN stays NaN); a result below 2^-55
//     in magnitude is a zero of its sign. Elements past K are +0.
//   * w_i = e4m3(c_i) * 2^8, exact in BF16 (every E4M3 value, subnormals included, lands on a
//     normal BF16 of at least 2^-1 in magnitude, or zero); elements past K are +0. NaN codes
//     are not admitted (QuantizedWeightView::fp8_codes_finite).
//   * Block b covers columns [128 b, min(128 b + 128, K)) in 32-element groups (the last one
//     padded with the +0 elements). Per block, 16 partial lanes start at +0 and take each group
//     in order: p[l] = fma(xb[2l], w[2l], fma(xb[2l + 1], w[2l + 1], p[l])), the odd element
//     first: what vdpbf16ps computes. That instruction reads subnormal inputs as zero and
//     flushes subnormal results; neither can occur here: the nonzero inputs are at least 2^-55
//     (a multiple of 2^-62) and 2^-1, so every product and partial sum is 0 or a multiple of
//     2^-63, never subnormal (docs/quant-formats.md).
//   * lane[l] = fma(p[l], s_b * 2^-8, lane[l]) after each block (s_b * 2^-8 one float product).
//   * y = tree of the 16 lanes (lane[l] += lane[l + w], w = 8, 4, 2, 1) + bias.
//
// For a dense BF16 weight row (w_i the weight itself, +0 past K) there are no blocks: the 16
// lanes start at +0 and take every group in order, lane[l] = fma(xb[2l], w[2l], fma(xb[2l + 1],
// w[2l + 1], lane[l])), then the tree + bias, where a weight below 2^-56 in magnitude counts as
// a zero of its sign. Nonzero weights are then multiples of 2^-63 and every product and partial
// sum 0 or a multiple of 2^-125, again never subnormal. (Such tiny weights do occur: 54 of the
// 416 BF16 matrices of `make-model --preset large` hold one; each contributes under 2^-56 |x|.)
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "quant/quantized_weight.h"
#include "quant/weight.h"

namespace moert::quant {

constexpr int64_t kBf16Group = 32;  // elements per group: one vdpbf16ps

inline int64_t bf16_padded_cols(int64_t k) { return (k + kBf16Group - 1) / kBf16Group * kBf16Group; }

// x's rows rounded to BF16 by the definition, each padded with +0 to a multiple of 32.
struct Bf16RowsView {
  const uint16_t* values = nullptr;  // [rows, bf16_padded_cols(cols)]
  int64_t rows = 0;
  int64_t cols = 0;  // K
};

class Bf16Rows {
 public:
  // x: [rows, cols] F32.
  void round(const float* x, int64_t rows, int64_t cols);
  Bf16RowsView view() const { return {values_.data(), rows_, cols_}; }

 private:
  std::vector<uint16_t> values_;
  int64_t rows_ = 0, cols_ = 0;
};

// x_i rounded to BF16 by the definition (magnitudes below 2^-55 to a zero of their sign).
uint16_t bf16_activation(float x);

// True when `w` may be computed in this mode: FP8 (block or tensor) with its codes marked
// finite (the loader marks every FP8 weight it binds, having rejected NaN codes).
bool bf16_activations_admitted(const QuantizedWeightView& w);

// Output features [begin, end) of y = x . W^T (+ bias) by the definition above, on the calling
// thread; bf16_activations_admitted(w) and x.cols == w.cols (checked). The portable variant
// runs whatever the CPU.
void bf16_linear_rows(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                      int64_t begin, int64_t end);
void bf16_linear_rows_portable(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                               int64_t begin, int64_t end);

// Dense BF16 weights: when `w` is dense BF16 [N, K], contiguous, and finite (a scan), sets
// w.dense_activations to kBf16 and returns true; else leaves it and returns false. A weight
// holding elements below 2^-56 is first copied with those flushed to zeros of their sign into
// storage(numel) (uint16 elements the caller keeps alive) and w.dense repointed there; without
// `storage` such a weight is left as it is (false).
using Bf16WeightStorage = std::function<uint16_t*(int64_t numel)>;
bool enable_bf16_activations(LinearWeight& w, const Bf16WeightStorage& storage = {});

// Output features [begin, end) of y = x . W^T (+ bias) for a dense BF16 weight by the
// definition above, on the calling thread; w.dense_activations == kBf16 and x.cols == K
// (checked). The portable variant runs whatever the CPU.
void bf16_dense_linear_rows(const Bf16RowsView& x, const LinearWeight& w, const float* bias, float* y, int64_t begin,
                            int64_t end);
void bf16_dense_linear_rows_portable(const Bf16RowsView& x, const LinearWeight& w, const float* bias, float* y,
                                     int64_t begin, int64_t end);

// "avx512-bf16" (vdpbf16ps), "avx2" (the same sums by FMA) or "portable": the
// path bf16_linear_rows and bf16_dense_linear_rows take here.
const char* bf16_linear_isa_name();

}  // namespace moert::quant
