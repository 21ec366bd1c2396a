// The int8-activation mode of the FP4 weights (NVFP4, MXFP4) on the CPU: an explicit opt-in
// (`--activation-quant int8`, QuantizedWeightView::activations) that trades exactness for
// speed. x is quantized to int8 per 16-element block and each dot product runs on integers
// (vpdpbusd / vpmaddubsw), the FP4 codes widened to bytes in registers; no float copy of x
// or W. The definition below (docs/quant-formats.md "Int8 activations") is the same on every
// instruction-set path, so the results are bit-identical across paths, thread counts and
// batch shapes, but differ from the F32 path by the activation rounding (relative ~1e-3).
//
// Definition, for one row x of K floats and one weight row w (E2M1 codes c, block scales):
//   * x's 16-element block b: amax = max |x_i|; d_b = amax / 127 (NaN if any x_i is not
//     finite); q_i = nearbyint(x_i * (127 / amax)) (0 when amax == 0), in [-127, 127].
//   * w_i = 2 * e2m1(c_i), an integer in [-12, 12]; its block scale s_b = the codec's scale
//     (NVFP4: e4m3_decode(byte) * global_scale; MXFP4: e8m0_decode(byte) of its 32-block).
//   * K is cut into 64-element groups (the last one padded with absent elements, q = 0).
//     Group byte j (kInt8GroupElement) holds element 64g + kInt8GroupElement[j]; lane l covers
//     bytes 4l .. 4l + 3, which lie in one 16-element block b(l):
//       lane[l] = fma(float(sum of q * w over its 4 bytes), s_b * (0.5 * d_b), lane[l])
//     for every group in order (s_b * (0.5 * d_b) is one float product; absent blocks use 0).
//   * y = tree of the 16 lanes (lane[l] += lane[l + w], w = 8, 4, 2, 1) + bias.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "quant/quantized_weight.h"

namespace moert::quant {

constexpr int64_t kInt8Group = 64;       // elements per group
constexpr int64_t kInt8GroupLanes = 16;  // int32 / float lanes per group

// Group byte j <-> element kInt8GroupElement[j] of the group: the 16-element blocks in the
// order 0, 2, 1, 3, which is how two 32-element chunks of kCpuChunk32 codes widen (low
// nibbles of both chunks, then high nibbles).
constexpr int64_t int8_group_element(int64_t j) {
  constexpr int64_t kBlockOf[4] = {0, 32, 16, 48};
  return kBlockOf[j / 16] + j % 16;
}

inline int64_t int8_groups(int64_t k) { return (k + kInt8Group - 1) / kInt8Group; }

// Quantized rows of x in the group layout above. Per row: groups * 64 codes, groups * 16
// lane scales (0.5 * d of the lane's block; 0 for absent blocks) and groups * 16 lane
// offsets (-12 * the sum of the lane's 4 codes: what turns the kernels' unsigned weights
// w + 12 back into w).
struct Int8RowsView {
  const int8_t* codes = nullptr;
  const float* lane_scales = nullptr;
  const int32_t* lane_offsets = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;  // K
};

class Int8Rows {
 public:
  // x: [rows, cols] F32.
  void quantize(const float* x, int64_t rows, int64_t cols);
  Int8RowsView view() const;

 private:
  std::vector<int8_t> codes_;
  std::vector<float> lane_scales_;
  std::vector<int32_t> lane_offsets_;
  int64_t rows_ = 0, cols_ = 0;
};

// Output features [begin, end) of y = x . W^T (+ bias) by the definition above, on the calling
// thread; W NVFP4 or MXFP4 in either code order (same bits). x.cols == w.cols. The portable variant runs whatever the CPU.
void int8_linear_rows(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y, int64_t begin,
                      int64_t end);
void int8_linear_rows_portable(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                               int64_t begin, int64_t end);

// "avx512-vnni", "avx512", "avx2", "neon-dotprod", "neon" or "portable": the path
// int8_linear_rows takes here.
const char* int8_linear_isa_name();

}  // namespace moert::quant
