// The linear layers, the grouped expert FFN and the per-head matrices (quant/cuda/linear.h).
//
// Every launcher is a "problem" run by one of two kernel bodies over the grid
// (output-feature tiles, groups[, row tiles]):
//   * a problem names its rows of x (x_row), its weights (one, or gate and up together), the
//     reduction depth K, the output width N and an epilogue (store) that turns the dot
//     products of one (row, feature) into outputs. Groups: 1 for linear, one per head for
//     per_head_linear, one per active expert for the grouped FFN (rows = that expert's entries).
//   * warp_kernel (at most kWarpMaxRows rows, i.e. decode): one warp per output feature, its
//     lanes striding over K in chunks, each decoded chunk dotted with up to kWarpRows x rows,
//     then reduced over the warp (warp_sum_rows). W is read once per kWarpRows rows. Where W's
//     rows are 16-byte aligned a lane's chunk is 16 bytes of W read in one vector load
//     (kWideElems: 4 F32, 8 BF16/F16, 16 FP8, 32 FP4 elements), so every format keeps the same
//     bytes in flight and the 4-bit formats read at the rate BF16 does; otherwise kChunk.
//   * tiled_kernel (more rows): a kTileRows x kTileCols output tile per block; K in steps of
//     kTileK, each step's x and W chunks stored to shared memory as floats (W decoded as it is
//     loaded), then every thread accumulates 4 x 4 outputs per weight.
//   * tensor_core_kernel (more rows, weights exact in BF16 up to a factor: tensor_core_kind):
//     the same 64 x 64 tiles on BF16 tensor cores (nvcuda::wmma), x split exactly into three
//     BF16 pieces; see the section below.
// The SIMT kernels decode W through decode_chunk<kind>, one reader per DeviceWeight::Kind, which
// yields exactly the float the CPU codec's dequantizer yields for every element (so a dot
// product differs from the CPU's only in its summation order).
#include "quant/cuda/linear.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"
#include "core/cuda/warp_matrix.h"

namespace moert::MOERT_CUDA_NS {
namespace {

using Kind = DeviceWeight::Kind;

constexpr int kWarpSize = 32;
constexpr int kChunk = 8;                // consecutive K elements one thread decodes at a time
constexpr int kWarpRows = 8;             // x rows per warp pass (accumulators per lane and weight)
constexpr int64_t kWarpMaxRows = 16;     // up to this many rows (per group) the warp kernel runs
constexpr int kWarpsPerBlock = 8;
constexpr int kWarpThreads = kWarpsPerBlock * kWarpSize;
constexpr int kTileRows = 64;            // x rows per tile
constexpr int kTileCols = 64;            // output features per tile
constexpr int kTileK = 32;               // K per shared-memory step
constexpr int kTilePad = kTileK + 1;     // row pitch of the shared tiles (no bank conflicts)
constexpr int kTileThreads = 256;
constexpr int kTileSide = 16;            // threads along each side of the tile: 4 x 4 outputs each
constexpr int kTileOutputs = kTileRows / kTileSide;
constexpr int64_t kMaxGridZ = 65535;
static_assert(kTileThreads == kTileRows * (kTileK / kChunk), "one x chunk and one W chunk per thread and step");
static_assert(kTileRows == kTileCols && kTileThreads == kTileSide * kTileSide);
constexpr int kNvfp4Block = 16;          // docs/quant-formats.md §1a
constexpr int kMxfp4Block = 32;          // §2a
constexpr int64_t kFp8Tile = 128;        // §3b
static_assert(kNvfp4Block % kChunk == 0 && kMxfp4Block % kChunk == 0 && kFp8Tile % kChunk == 0,
              "a chunk starting at a multiple of kChunk lies in one scale block");

// ---- Weight readers ---------------------------------------------------------------------------
// out[e] = W[n, k + e] for e < count, 0 beyond; k % kChunk == 0 (so the chunk shares one block
// scale), k + count <= K. Each value is the CPU codec's dequantized float bit for bit
// (quant/cpu/quantized_linear_tiles.h weight_at, quant/formats): products rounded on their own.
template <Kind kind>
__device__ __forceinline__ void decode_chunk(const DeviceWeight& w, int64_t n, int64_t k, int count,
                                             float (&out)[kChunk]) {
  const int64_t cols = w.cols;
  if constexpr (kind == Kind::kF32) {
    const float* row = static_cast<const float*>(w.data) + n * cols + k;
    for (int e = 0; e < kChunk; ++e) out[e] = e < count ? row[e] : 0.0f;
  } else if constexpr (kind == Kind::kBF16 || kind == Kind::kF16) {
    const uint16_t* row = static_cast<const uint16_t*>(w.data) + n * cols + k;
    for (int e = 0; e < kChunk; ++e) {
      const uint16_t bits = e < count ? row[e] : 0;
      out[e] = kind == Kind::kBF16 ? bf16_to_float(bits) : f16_to_float(bits);
    }
  } else if constexpr (kind == Kind::kNvfp4 || kind == Kind::kMxfp4) {
    // §1a: E2M1 * (E4M3 scale * weight_scale_2), the scale product rounded first
    // (nvfp4_dequantize); §2a: E2M1 * 2^(E - 127). Element 2i is the low nibble of byte i.
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * (cols / 2);
    const float scale = kind == Kind::kNvfp4
                            ? mul_rn(e4m3_to_float(w.scales[n * (cols / kNvfp4Block) + k / kNvfp4Block]),
                                     w.global_scale)
                            : e8m0_to_float(w.scales[n * (cols / kMxfp4Block) + k / kMxfp4Block]);
    for (int e = 0; e < kChunk; ++e) {
      const int64_t i = k + e;
      const uint8_t byte = e < count ? row[i / 2] : 0;
      const uint8_t code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      out[e] = e < count ? mul_rn(e2m1_to_float(code), scale) : 0.0f;
    }
  } else {
    // §3b: E4M3 * weight_scale_inv[n / 128, k / 128] (ragged edge tiles have their own scale);
    // FP8 tensor: E4M3 * the one scale.
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * cols + k;
    const float scale = kind == Kind::kFp8Block
                            ? w.block_scale_inv[(n / kFp8Tile) * ceil_div(cols, kFp8Tile) + k / kFp8Tile]
                            : w.global_scale;
    for (int e = 0; e < kChunk; ++e) out[e] = e < count ? mul_rn(e4m3_to_float(row[e]), scale) : 0.0f;
  }
}

// The same with the format read at run time (a weight of the expert table lives in device memory).
__device__ __forceinline__ void decode_chunk_any(const DeviceWeight& w, int64_t n, int64_t k, int count,
                                                 float (&out)[kChunk]) {
  switch (w.kind) {
    case Kind::kF32: return decode_chunk<Kind::kF32>(w, n, k, count, out);
    case Kind::kBF16: return decode_chunk<Kind::kBF16>(w, n, k, count, out);
    case Kind::kF16: return decode_chunk<Kind::kF16>(w, n, k, count, out);
    case Kind::kNvfp4: return decode_chunk<Kind::kNvfp4>(w, n, k, count, out);
    case Kind::kMxfp4: return decode_chunk<Kind::kMxfp4>(w, n, k, count, out);
    case Kind::kFp8Block: return decode_chunk<Kind::kFp8Block>(w, n, k, count, out);
    case Kind::kFp8Tensor: return decode_chunk<Kind::kFp8Tensor>(w, n, k, count, out);
  }
}

// ---- Wide weight readers (the warp kernel's 16-byte loads) ------------------------------------
template <Kind kind>
constexpr int kWideElems = kind == Kind::kF32 ? 4
                           : (kind == Kind::kBF16 || kind == Kind::kF16) ? 8
                           : (kind == Kind::kNvfp4 || kind == Kind::kMxfp4) ? 32
                                                                            : 16;  // FP8
static_assert(kWideElems<Kind::kNvfp4> == kMxfp4Block && kFp8Tile % kWideElems<Kind::kFp8Block> == 0,
              "a wide FP4 chunk is one MXFP4 block (two NVFP4 blocks); a wide FP8 chunk lies in one scale tile");

template <Kind kind>
__device__ __forceinline__ int64_t row_bytes(int64_t cols) {
  if constexpr (kind == Kind::kF32) return cols * 4;
  if constexpr (kind == Kind::kBF16 || kind == Kind::kF16) return cols * 2;
  if constexpr (kind == Kind::kNvfp4 || kind == Kind::kMxfp4) return cols / 2;
  return cols;  // FP8
}

// Whether every row of W starts on a 16-byte boundary (then decode_wide may read it).
template <Kind kind>
__device__ __forceinline__ bool rows_16_byte_aligned(const DeviceWeight& w) {
  return reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && row_bytes<kind>(w.cols) % 16 == 0;
}

// out[e] = W[n, k + e] for e < kWideElems<kind>, the same floats as decode_chunk, from one
// 16-byte load. Preconditions: rows_16_byte_aligned(w), k % kWideElems<kind> == 0,
// k + kWideElems<kind> <= K.
template <Kind kind>
__device__ __forceinline__ void decode_wide(const DeviceWeight& w, int64_t n, int64_t k,
                                            float (&out)[kWideElems<kind>]) {
  const int64_t cols = w.cols;
  uint32_t words[4];
  load_16_bytes(static_cast<const uint8_t*>(w.data) + n * row_bytes<kind>(cols) + row_bytes<kind>(k), words);
  if constexpr (kind == Kind::kF32) {
    for (int e = 0; e < 4; ++e) out[e] = bits_to_float(words[e]);
  } else if constexpr (kind == Kind::kBF16 || kind == Kind::kF16) {
    for (int e = 0; e < 8; ++e) {
      const auto bits = static_cast<uint16_t>(words[e / 2] >> (16 * (e % 2)));
      out[e] = kind == Kind::kBF16 ? bf16_to_float(bits) : f16_to_float(bits);
    }
  } else if constexpr (kind == Kind::kNvfp4 || kind == Kind::kMxfp4) {
    float scale[2];  // NVFP4: blocks k / 16 and k / 16 + 1; MXFP4: block k / 32 twice
    for (int b = 0; b < 2; ++b) {
      scale[b] = kind == Kind::kNvfp4
                     ? mul_rn(e4m3_to_float(w.scales[n * (cols / kNvfp4Block) + k / kNvfp4Block + b]), w.global_scale)
                     : e8m0_to_float(w.scales[n * (cols / kMxfp4Block) + k / kMxfp4Block]);
    }
    for (int e = 0; e < 32; ++e) {
      const auto code = static_cast<uint8_t>((words[e / 8] >> (4 * (e % 8))) & 0xFu);
      out[e] = mul_rn(e2m1_to_float(code), scale[e / kNvfp4Block]);
    }
  } else {
    const float scale = kind == Kind::kFp8Block
                            ? w.block_scale_inv[(n / kFp8Tile) * ceil_div(cols, kFp8Tile) + k / kFp8Tile]
                            : w.global_scale;
    for (int e = 0; e < 16; ++e) {
      out[e] = mul_rn(e4m3_to_float(static_cast<uint8_t>(words[e / 4] >> (8 * (e % 4)))), scale);
    }
  }
}

// ---- Warp dot products -------------------------------------------------------------------------
// acc[r] += this lane's share of dot(x row r, W row n) for r < rows: lane l takes the chunks
// l + 32 j, of kWideElems<kind> elements where W's rows are 16-byte aligned, else of kChunk
// (the ragged last chunk, K % kChunk != 0, falls to one lane).
template <Kind kind>
__device__ void warp_dot_rows(const DeviceWeight& w, int64_t n, const float* const (&x_rows)[kWarpRows], int rows,
                              float (&acc)[kWarpRows]) {
  const int64_t cols = w.cols;
  const auto lane = static_cast<int64_t>(threadIdx.x % kWarpSize);
  if (rows_16_byte_aligned<kind>(w)) {  // the same for every lane: no divergence
    // Aligned rows hold whole wide chunks (K % kWideElems == 0): lane l takes chunks l + 32 j.
    constexpr int kWide = kWideElems<kind>;
    float wide[kWide];
    for (int64_t k = lane * kWide; k < cols; k += kWarpSize * kWide) {
      decode_wide<kind>(w, n, k, wide);
      for (int r = 0; r < kWarpRows; ++r) {
        if (r >= rows) break;
        const float* x = x_rows[r] + k;
        for (int e = 0; e < kWide; ++e) acc[r] = fmaf(x[e], wide[e], acc[r]);
      }
    }
    return;
  }
  float wv[kChunk];
  int64_t k = lane * kChunk;
  for (; k + kChunk <= cols; k += kWarpSize * kChunk) {
    decode_chunk<kind>(w, n, k, kChunk, wv);
    for (int r = 0; r < kWarpRows; ++r) {
      if (r >= rows) break;
      const float* x = x_rows[r] + k;
      for (int e = 0; e < kChunk; ++e) acc[r] = fmaf(x[e], wv[e], acc[r]);
    }
  }
  if (k < cols) {
    const int count = static_cast<int>(cols - k);
    decode_chunk<kind>(w, n, k, count, wv);
    for (int r = 0; r < kWarpRows; ++r) {  // constant bounds: acc and wv stay in registers
      if (r >= rows) break;
      for (int e = 0; e < kChunk; ++e) {
        if (e < count) acc[r] = fmaf(x_rows[r][k + e], wv[e], acc[r]);
      }
    }
  }
}

__device__ void warp_dot_rows_any(const DeviceWeight& w, int64_t n, const float* const (&x_rows)[kWarpRows], int rows,
                                  float (&acc)[kWarpRows]) {
  switch (w.kind) {
    case Kind::kF32: return warp_dot_rows<Kind::kF32>(w, n, x_rows, rows, acc);
    case Kind::kBF16: return warp_dot_rows<Kind::kBF16>(w, n, x_rows, rows, acc);
    case Kind::kF16: return warp_dot_rows<Kind::kF16>(w, n, x_rows, rows, acc);
    case Kind::kNvfp4: return warp_dot_rows<Kind::kNvfp4>(w, n, x_rows, rows, acc);
    case Kind::kMxfp4: return warp_dot_rows<Kind::kMxfp4>(w, n, x_rows, rows, acc);
    case Kind::kFp8Block: return warp_dot_rows<Kind::kFp8Block>(w, n, x_rows, rows, acc);
    case Kind::kFp8Tensor: return warp_dot_rows<Kind::kFp8Tensor>(w, n, x_rows, rows, acc);
  }
}

// One stage of warp_sum_rows: lanes with `kOffset` set keep the upper half of the live rows,
// the others the lower half, and each adds its partner's copy of the half it keeps.
template <int kOffset, int kWidth>
__device__ __forceinline__ void exchange_half_rows(float (&acc)[kWarpRows], int lane) {
  const bool upper = (lane & kOffset) != 0;
  for (int i = 0; i < kWidth; ++i) {
    const float send = upper ? acc[i] : acc[i + kWidth];
    const float keep = upper ? acc[i + kWidth] : acc[i];
    acc[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
  }
}

// The warp totals of acc[0 .. kWarpRows) at once (a transposing butterfly, 4 + 2 + 1 + 2
// shuffles instead of 5 per row): returns on lane l the total of row (l / 4) % kWarpRows, so
// row r's total is on lanes 4 r .. 4 r + 3. acc is consumed. Every lane of the warp calls it.
__device__ __forceinline__ float warp_sum_rows(float (&acc)[kWarpRows], int lane) {
  static_assert(kWarpRows == 8 && kWarpSize == 32, "3 halving stages over lane bits 4, 3, 2");
  exchange_half_rows<16, 4>(acc, lane);
  exchange_half_rows<8, 2>(acc, lane);
  exchange_half_rows<4, 1>(acc, lane);
  float total = acc[0];
  total += __shfl_xor_sync(0xffffffffu, total, 2);
  total += __shfl_xor_sync(0xffffffffu, total, 1);
  return total;
}

// Calls f(Index<0>{}), ..., f(Index<kCount - 1>{}): the weights of a problem by constant
// index, so the arrays indexed by it stay in registers.
template <int kValue>
struct Index {
  static constexpr int value = kValue;
};
template <int kCount, class F>
__device__ __forceinline__ void for_each_index(const F& f) {
  if constexpr (kCount > 0) {
    for_each_index<kCount - 1>(f);
    f(Index<kCount - 1>{});
  }
}

// ---- The kernel bodies ----------------------------------------------------------------------------
// A problem P: P::Params (the kernel argument), P::kWeights (1 or 2), a device constructor
// P(params, group) and num_rows() (rows of this group), num_cols() (N), weight(j),
// x_row(r) (K floats), store(r, n, dots[kWeights]).

// Grid: (ceil(N / kWarpsPerBlock), groups); warp w of a block owns feature
// blockIdx.x * kWarpsPerBlock + w and takes its group's rows kWarpRows at a time.
// No barriers: a warp with nothing to do leaves at once (all its lanes together).
template <class P>
__global__ void warp_kernel(typename P::Params params) {
  const P p(params, static_cast<int64_t>(blockIdx.y));
  const int64_t rows = p.num_rows();
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (n >= p.num_cols()) return;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  for (int64_t row0 = 0; row0 < rows; row0 += kWarpRows) {
    const int tile_rows = rows - row0 < kWarpRows ? static_cast<int>(rows - row0) : kWarpRows;
    const float* x_rows[kWarpRows];
    for (int r = 0; r < kWarpRows; ++r) x_rows[r] = r < tile_rows ? p.x_row(row0 + r) : nullptr;
    float acc[P::kWeights][kWarpRows] = {};
    // One row (decode): a plain warp_sum; more: all rows at once, row r's total on lane 4 r.
    float dots[P::kWeights];
    for_each_index<P::kWeights>([&](auto j) {
      warp_dot_rows_any(p.weight(j.value), n, x_rows, tile_rows, acc[j.value]);
      dots[j.value] = tile_rows == 1 ? warp_sum(acc[j.value][0]) : warp_sum_rows(acc[j.value], lane);
    });
    const int r = lane / 4;
    if (lane % 4 == 0 && r < tile_rows) p.store(row0 + r, n, dots);
  }
}

// Grid: (ceil(N / kTileCols), groups, row tiles), kTileThreads threads. The block strides
// over its group's row tiles by gridDim.z (the same trip count for all its threads, so every
// thread reaches every barrier). Per K step, thread t stores x chunk (row t / 4, k (t % 4) * 8)
// and the same chunk of each weight (feature t / 4), zeros past the edges; thread (ty, tx)
// then owns rows ty + 16 i and features tx + 16 c, i, c < 4.
template <class P>
__global__ void tiled_kernel(typename P::Params params) {
  __shared__ float x_tile[kTileRows][kTilePad];             // [rows, k]
  __shared__ float w_tiles[P::kWeights][kTileCols][kTilePad];  // [weight, features, k]
  float(*const w_tile)[kTileCols][kTilePad] = w_tiles;  // named outside the lambdas (GCC's unused check)
  const P p(params, static_cast<int64_t>(blockIdx.y));
  const int64_t rows = p.num_rows(), cols_out = p.num_cols(), depth = p.weight(0).cols;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int t = static_cast<int>(threadIdx.x);
  const int load_row = t / (kTileK / kChunk), load_k = (t % (kTileK / kChunk)) * kChunk;
  const int ty = t / kTileSide, tx = t % kTileSide;
  const int64_t load_n = n0 + load_row;
  DeviceWeight weights[P::kWeights];
  for_each_index<P::kWeights>([&](auto j) { weights[j.value] = p.weight(j.value); });
  for (int64_t row0 = static_cast<int64_t>(blockIdx.z) * kTileRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.z) * kTileRows) {
    const float* x_row = row0 + load_row < rows ? p.x_row(row0 + load_row) : nullptr;
    float acc[P::kWeights][kTileOutputs][kTileOutputs] = {};
    for (int64_t k0 = 0; k0 < depth; k0 += kTileK) {
      const int64_t k = k0 + load_k;
      const int count = k >= depth ? 0 : (depth - k < kChunk ? static_cast<int>(depth - k) : kChunk);
      for (int e = 0; e < kChunk; ++e) {
        x_tile[load_row][load_k + e] = x_row != nullptr && e < count ? x_row[k + e] : 0.0f;
      }
      for_each_index<P::kWeights>([&](auto j) {
        float wv[kChunk] = {};
        if (load_n < cols_out && count > 0) decode_chunk_any(weights[j.value], load_n, k, count, wv);
        for (int e = 0; e < kChunk; ++e) w_tile[j.value][load_row][load_k + e] = wv[e];
      });
      __syncthreads();
      for (int kk = 0; kk < kTileK; ++kk) {
        float a[kTileOutputs];
        for (int i = 0; i < kTileOutputs; ++i) a[i] = x_tile[ty + kTileSide * i][kk];
        for_each_index<P::kWeights>([&](auto j) {
          for (int c = 0; c < kTileOutputs; ++c) {
            const float b = w_tile[j.value][tx + kTileSide * c][kk];
            for (int i = 0; i < kTileOutputs; ++i) acc[j.value][i][c] = fmaf(a[i], b, acc[j.value][i][c]);
          }
        });
      }
      __syncthreads();
    }
    // Constant indices throughout (for_each_index), so acc stays in registers.
    for_each_index<kTileOutputs>([&](auto i) {
      const int64_t r = row0 + ty + kTileSide * i.value;
      for_each_index<kTileOutputs>([&](auto c) {
        const int64_t n = n0 + tx + kTileSide * c.value;
        if (r < rows && n < cols_out) {
          float dots[P::kWeights];
          for_each_index<P::kWeights>([&](auto j) { dots[j.value] = acc[j.value][i.value][c.value]; });
          p.store(r, n, dots);
        }
      });
    });
  }
}

// ---- The tensor-core kernel -----------------------------------------------------------------------
// For weights whose values are exact in BF16 once a factor that is uniform over a tile of 64
// features x 128 K is taken out (tensor_core_kind):
//   BF16        the value, factor 1;
//   MXFP4       E2M1 x 2^(E - 127) (2 significant bits), factor 1;
//   NVFP4       E2M1 x E4M3 block scale (at most 6 significant bits), factor weight_scale_2;
//   FP8 block   the E4M3 code, factor the 128 x 128 tile's scale (the tile's 64 features lie in
//               one 128-row block, and K steps of 32 never straddle a 128 boundary);
//   FP8 tensor  the E4M3 code, factor the tensor scale.
// x is split exactly into BF16 pieces x = hi + mid + lo (8 + 8 + 8 significant bits), so every
// piece x weight product is exact in F32 and the tensor cores' F32 sums give the dot product to
// F32 accuracy, in another order than the CPU's. The factor multiplies the tile's partial sums
// once per 128 K (FP8 block) or once at the end. One difference from decode_chunk: NVFP4's
// weight_scale_2 is applied to the sum, not rounded into each weight first (<= 1 ulp per weight).
constexpr int kTcThreads = 128;             // 4 warps; warp w owns rows 32 (w / 2) and features 32 (w % 2)
constexpr int kMma = 16;                    // wmma tile: 16 x 16 x 16
constexpr int kTcPitch = kTileK + 8;        // BF16 pitch of the shared input tiles (wmma: a multiple of 8)
constexpr int kTcOutPitch = kTileCols + 4;  // F32 pitch of the output staging (wmma: a multiple of 4)
constexpr int kXPieces = 3;
static_assert(kTileRows == 64 && kTileCols == 64 && kTileK % kMma == 0 && kFp8Tile % kTileK == 0 &&
              kFp8Tile % kTileCols == 0);

__host__ __device__ __forceinline__ bool tensor_core_kind(Kind kind) {
  return kind == Kind::kBF16 || kind == Kind::kMxfp4 || kind == Kind::kNvfp4 || kind == Kind::kFp8Block ||
         kind == Kind::kFp8Tensor;
}

// out[e] = W[n, k + e] / tensor_core_factor(w, n, k), exact in BF16, for e < count; 0 beyond.
// Same preconditions as decode_chunk.
__device__ __forceinline__ void decode_chunk_unscaled(const DeviceWeight& w, int64_t n, int64_t k, int count,
                                                      float (&out)[kChunk]) {
  if (w.kind == Kind::kNvfp4) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * (w.cols / 2);
    const float block_scale = e4m3_to_float(w.scales[n * (w.cols / kNvfp4Block) + k / kNvfp4Block]);
    for (int e = 0; e < kChunk; ++e) {
      const int64_t i = k + e;
      const uint8_t byte = e < count ? row[i / 2] : 0;
      out[e] = e < count ? mul_rn(e2m1_to_float(i % 2 == 0 ? (byte & 0xF) : (byte >> 4)), block_scale) : 0.0f;
    }
  } else if (w.kind == Kind::kFp8Block || w.kind == Kind::kFp8Tensor) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * w.cols + k;
    for (int e = 0; e < kChunk; ++e) out[e] = e < count ? e4m3_to_float(row[e]) : 0.0f;
  } else {
    decode_chunk_any(w, n, k, count, out);  // BF16, MXFP4: the values themselves
  }
}

__device__ __forceinline__ float tensor_core_factor(const DeviceWeight& w, int64_t n, int64_t k) {
  switch (w.kind) {
    case Kind::kNvfp4:
    case Kind::kFp8Tensor: return w.global_scale;
    case Kind::kFp8Block: return w.block_scale_inv[(n / kFp8Tile) * ceil_div(w.cols, kFp8Tile) + k / kFp8Tile];
    default: return 1.0f;
  }
}

// x = hi + mid + lo exactly (each piece BF16 bits).
__device__ __forceinline__ void split_into_bf16(float x, uint16_t& hi, uint16_t& mid, uint16_t& lo) {
  hi = float_to_bf16(x);
  const float rest = x - bf16_to_float(hi);
  mid = float_to_bf16(rest);
  lo = float_to_bf16(rest - bf16_to_float(mid));
}

template <int kWeights>
struct TensorCoreShared {
  static constexpr int kInputBytes = (kXPieces + kWeights) * kTileRows * kTcPitch * 2;
  static constexpr int kOutputBytes = kWeights * kTileRows * kTcOutPitch * 4;
  static constexpr int kBytes = kInputBytes > kOutputBytes ? kInputBytes : kOutputBytes;
  static_assert(kBytes <= 48 * 1024, "static shared memory");
};

__device__ __forceinline__ const __nv_bfloat16* as_bf16(const uint16_t* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

// Grid and row-tile striding as tiled_kernel, kTcThreads threads. Per K step every thread
// stores 2 x chunks (as three BF16 pieces) and 2 chunks of each weight; each warp then runs
// its 2 x 2 wmma tiles per weight over the step. The shared bytes hold the input tiles during
// the K loop and the F32 output tiles after it.
template <class P>
__global__ void __launch_bounds__(kTcThreads) tensor_core_kernel(typename P::Params params) {
  using namespace nvcuda;
  using Accumulator = wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float>;
  alignas(32) __shared__ unsigned char shared_bytes[TensorCoreShared<P::kWeights>::kBytes];
  uint16_t* const x_tiles = reinterpret_cast<uint16_t*>(shared_bytes);  // [piece][rows][kTcPitch]
  uint16_t* const w_tiles = x_tiles + kXPieces * kTileRows * kTcPitch;   // [weight][features][kTcPitch]
  float* const out_tiles = reinterpret_cast<float*>(shared_bytes);       // [weight][rows][kTcOutPitch]
  const P p(params, static_cast<int64_t>(blockIdx.y));
  const int64_t rows = p.num_rows(), cols_out = p.num_cols(), depth = p.weight(0).cols;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int t = static_cast<int>(threadIdx.x);
  const int warp_row = (t / kWarpSize / 2) * 32, warp_col = (t / kWarpSize % 2) * 32;
  DeviceWeight weights[P::kWeights];
  for_each_index<P::kWeights>([&](auto j) { weights[j.value] = p.weight(j.value); });
  for (int64_t row0 = static_cast<int64_t>(blockIdx.z) * kTileRows; row0 < rows;
       row0 += static_cast<int64_t>(gridDim.z) * kTileRows) {
    Accumulator acc[P::kWeights][2][2], partial[P::kWeights][2][2];
    for (int j = 0; j < P::kWeights; ++j) {
      for (int i = 0; i < 2; ++i) {
        for (int c = 0; c < 2; ++c) {
          wmma::fill_fragment(acc[j][i][c], 0.0f);
          wmma::fill_fragment(partial[j][i][c], 0.0f);
        }
      }
    }
    for (int64_t k0 = 0; k0 < depth; k0 += kTileK) {
      for (int slot = t; slot < kTileRows * (kTileK / kChunk); slot += kTcThreads) {
        const int row = slot / (kTileK / kChunk), kc = (slot % (kTileK / kChunk)) * kChunk;
        const int64_t k = k0 + kc;
        const int count = k >= depth ? 0 : (depth - k < kChunk ? static_cast<int>(depth - k) : kChunk);
        const float* x_row = row0 + row < rows ? p.x_row(row0 + row) : nullptr;
        for (int e = 0; e < kChunk; ++e) {
          uint16_t* piece = x_tiles + row * kTcPitch + kc + e;
          split_into_bf16(x_row != nullptr && e < count ? x_row[k + e] : 0.0f, piece[0],
                          piece[kTileRows * kTcPitch], piece[2 * kTileRows * kTcPitch]);
        }
        for (int j = 0; j < P::kWeights; ++j) {
          float wv[kChunk] = {};
          if (n0 + row < cols_out && count > 0) decode_chunk_unscaled(weights[j], n0 + row, k, count, wv);
          for (int e = 0; e < kChunk; ++e) w_tiles[(j * kTileCols + row) * kTcPitch + kc + e] = float_to_bf16(wv[e]);
        }
      }
      __syncthreads();
      for (int kk = 0; kk < kTileK; kk += kMma) {
        wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, __nv_bfloat16, wmma::col_major> b[P::kWeights][2];
        for (int j = 0; j < P::kWeights; ++j) {
          for (int c = 0; c < 2; ++c) {
            wmma::load_matrix_sync(b[j][c], as_bf16(w_tiles + (j * kTileCols + warp_col + kMma * c) * kTcPitch + kk),
                                   kTcPitch);
          }
        }
        for (int piece = 0; piece < kXPieces; ++piece) {
          for (int i = 0; i < 2; ++i) {
            wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, __nv_bfloat16, wmma::row_major> a;
            wmma::load_matrix_sync(
                a, as_bf16(x_tiles + (piece * kTileRows + warp_row + kMma * i) * kTcPitch + kk), kTcPitch);
            for (int j = 0; j < P::kWeights; ++j) {
              for (int c = 0; c < 2; ++c) wmma::mma_sync(partial[j][i][c], a, b[j][c], partial[j][i][c]);
            }
          }
        }
      }
      __syncthreads();
      // The factor changes at 128-K boundaries for FP8 block weights; every weight's ends with K.
      const int64_t next = k0 + kTileK;
      for (int j = 0; j < P::kWeights; ++j) {
        if (next < depth && !(weights[j].kind == Kind::kFp8Block && next % kFp8Tile == 0)) continue;
        const float factor = tensor_core_factor(weights[j], n0, k0);
        for (int i = 0; i < 2; ++i) {
          for (int c = 0; c < 2; ++c) {
            for (int e = 0; e < acc[j][i][c].num_elements; ++e) {
              acc[j][i][c].x[e] = fmaf(partial[j][i][c].x[e], factor, acc[j][i][c].x[e]);
            }
            wmma::fill_fragment(partial[j][i][c], 0.0f);
          }
        }
      }
    }
    for (int j = 0; j < P::kWeights; ++j) {
      for (int i = 0; i < 2; ++i) {
        for (int c = 0; c < 2; ++c) {
          wmma::store_matrix_sync(out_tiles + (j * kTileRows + warp_row + kMma * i) * kTcOutPitch + warp_col + kMma * c,
                                  acc[j][i][c], kTcOutPitch, wmma::mem_row_major);
        }
      }
    }
    __syncthreads();
    for (int o = t; o < kTileRows * kTileCols; o += kTcThreads) {
      const int r = o / kTileCols, c = o % kTileCols;
      if (row0 + r < rows && n0 + c < cols_out) {
        float dots[P::kWeights];
        for (int j = 0; j < P::kWeights; ++j) dots[j] = out_tiles[(j * kTileRows + r) * kTcOutPitch + c];
        p.store(row0 + r, n0 + c, dots);
      }
    }
    __syncthreads();  // the next row tile overwrites the shared bytes
  }
}

// Runs problem P over `num_groups` groups of at most `max_rows` rows and `num_cols` outputs.
// tensor_cores: every weight of every group is of a tensor_core_kind (the caller knows it on
// the host).
template <class P>
int launch_problem(const typename P::Params& params, int64_t num_groups, int64_t max_rows, int64_t num_cols,
                   CUstream_st* stream, bool tensor_cores = false) {
  if (num_groups <= 0 || max_rows <= 0 || num_cols <= 0) return 0;
  if (max_rows <= kWarpMaxRows) {
    const dim3 grid(static_cast<unsigned>(ceil_div(num_cols, kWarpsPerBlock)), static_cast<unsigned>(num_groups));
    auto* kernel = &warp_kernel<P>;
    MOERT_LAUNCH(kernel, grid, dim3(kWarpThreads), stream, params);
  } else {
    const int64_t row_tiles = ceil_div(max_rows, kTileRows);
    const dim3 grid(static_cast<unsigned>(ceil_div(num_cols, kTileCols)), static_cast<unsigned>(num_groups),
                    static_cast<unsigned>(row_tiles < kMaxGridZ ? row_tiles : kMaxGridZ));
    if (tensor_cores) {
      auto* kernel = &tensor_core_kernel<P>;
      MOERT_LAUNCH(kernel, grid, dim3(kTcThreads), stream, params);
    } else {
      auto* kernel = &tiled_kernel<P>;
      MOERT_LAUNCH(kernel, grid, dim3(kTileThreads), stream, params);
    }
  }
  return static_cast<int>(cudaGetLastError());
}

// ---- The problems ------------------------------------------------------------------------------
struct LinearParams {
  DeviceWeight weight;
  const float* x;     // [R, K]
  int64_t num_rows;   // R
  const float* bias;  // [N] or null
  float* y;           // [R, N]
};

// y[r, n] = dot + bias[n] (+ 0 without bias, as apply_linear).
struct LinearProblem {
  using Params = LinearParams;
  static constexpr int kWeights = 1;
  const Params& p;
  __device__ LinearProblem(const Params& params, int64_t /*group*/) : p(params) {}
  __device__ int64_t num_rows() const { return p.num_rows; }
  __device__ int64_t num_cols() const { return p.weight.rows; }
  __device__ DeviceWeight weight(int /*j*/) const { return p.weight; }
  __device__ const float* x_row(int64_t r) const { return p.x + r * p.weight.cols; }
  __device__ void store(int64_t r, int64_t n, const float* dots) const {
    p.y[r * p.weight.rows + n] = dots[0] + (p.bias != nullptr ? p.bias[n] : 0.0f);
  }
};

struct PerHeadParams {
  const float* weights;  // [H, out, in]
  int64_t out_features, in_features;
  const float* x;        // token t, head h at x + t * H * x_head_stride + h * x_head_stride
  int64_t x_head_stride, x_token_stride;
  float* y;              // likewise with y_head_stride; the first `out` floats of each slot
  int64_t y_head_stride, y_token_stride;
  int64_t num_tokens;
};

// Group h: rows are tokens, the weight is head h's F32 [out, in] matrix.
struct PerHeadProblem {
  using Params = PerHeadParams;
  static constexpr int kWeights = 1;
  const Params& p;
  int64_t head;
  __device__ PerHeadProblem(const Params& params, int64_t group) : p(params), head(group) {}
  __device__ int64_t num_rows() const { return p.num_tokens; }
  __device__ int64_t num_cols() const { return p.out_features; }
  __device__ DeviceWeight weight(int /*j*/) const {
    DeviceWeight w;
    w.kind = Kind::kF32;
    w.rows = p.out_features;
    w.cols = p.in_features;
    w.data = p.weights + head * p.out_features * p.in_features;
    return w;
  }
  __device__ const float* x_row(int64_t t) const { return p.x + t * p.x_token_stride + head * p.x_head_stride; }
  __device__ void store(int64_t t, int64_t o, const float* dots) const {
    p.y[t * p.y_token_stride + head * p.y_head_stride + o] = dots[0];
  }
};

// h = act(g, u) as experts::glu (experts/glu_activation.h), products rounded apart.
__device__ __forceinline__ float glu_value(const experts::GluActivation& act, float g, float u) {
  if (act.kind == experts::GluActivation::Kind::kSilu) return mul_rn(g / (1.0f + expf(-g)), u);
  g = fminf(g, act.limit);
  u = fminf(fmaxf(u, -act.limit), act.limit);
  return mul_rn(mul_rn(u + 1.0f, g), 1.0f / (1.0f + expf(-mul_rn(act.alpha, g))));
}

// Group a: the entries expert_entry_idx[cu[a] .. cu[a+1]) of expert active_experts[a]; row j
// of the group is entry expert_entry_idx[cu[a] + j], whose activated intermediate lives in
// workspace row cu[a] + j ([N_e, I], grouped order).
struct ExpertGroup {
  const GroupedExpertArgs& args;
  int64_t begin, count;
  const DeviceExpert* expert;
  __device__ ExpertGroup(const GroupedExpertArgs& a, int64_t group)
      : args(a),
        begin(a.cu_expert_entries[group]),
        count(a.cu_expert_entries[group + 1] - a.cu_expert_entries[group]),
        expert(a.experts + a.active_experts[group]) {}
  __device__ int64_t entry(int64_t j) const { return args.expert_entry_idx[begin + j]; }
  __device__ float* intermediate(int64_t j) const { return args.workspace + (begin + j) * args.intermediate_size; }
};

// workspace[j, i] = act(gate x + gb, up x + ub) for x = x[entry_row[entry j]].
struct GateUpProblem {
  using Params = GroupedExpertArgs;
  static constexpr int kWeights = 2;
  ExpertGroup g;
  __device__ GateUpProblem(const Params& params, int64_t group) : g(params, group) {}
  __device__ int64_t num_rows() const { return g.count; }
  __device__ int64_t num_cols() const { return g.args.intermediate_size; }
  __device__ DeviceWeight weight(int j) const { return j == 0 ? g.expert->gate : g.expert->up; }
  __device__ const float* x_row(int64_t j) const {
    return g.args.x + g.args.entry_row[g.entry(j)] * g.args.hidden_size;
  }
  __device__ void store(int64_t j, int64_t i, const float* dots) const {
    const float gate = dots[0] + (g.expert->gate_bias != nullptr ? g.expert->gate_bias[i] : 0.0f);
    const float up = dots[1] + (g.expert->up_bias != nullptr ? g.expert->up_bias[i] : 0.0f);
    g.intermediate(j)[i] = glu_value(g.args.activation, gate, up);
  }
};

// contributions[c, d] = entry_weight[c] * (down h + bd) for c = entry j: the expert's output
// rounded first, then one multiply (experts/grouped/grouped_expert_ffn.h).
struct DownProblem {
  using Params = GroupedExpertArgs;
  static constexpr int kWeights = 1;
  ExpertGroup g;
  __device__ DownProblem(const Params& params, int64_t group) : g(params, group) {}
  __device__ int64_t num_rows() const { return g.count; }
  __device__ int64_t num_cols() const { return g.args.hidden_size; }
  __device__ DeviceWeight weight(int /*j*/) const { return g.expert->down; }
  __device__ const float* x_row(int64_t j) const { return g.intermediate(j); }
  __device__ void store(int64_t j, int64_t d, const float* dots) const {
    const int64_t c = g.entry(j);
    const float y = dots[0] + (g.expert->down_bias != nullptr ? g.expert->down_bias[d] : 0.0f);
    g.args.contributions[c * g.args.hidden_size + d] = mul_rn(g.args.entry_weight[c], y);
  }
};

}  // namespace

bool tensor_core_weight(const DeviceWeight& weight) { return tensor_core_kind(weight.kind); }

int linear(const DeviceWeight& weight, const float* x, int64_t num_rows, const float* bias, float* y,
           CUstream_st* stream) {
  return launch_problem<LinearProblem>(LinearParams{weight, x, num_rows, bias, y}, 1, num_rows, weight.rows, stream,
                                       tensor_core_kind(weight.kind));
}

int64_t grouped_expert_workspace_floats(int64_t num_entries, int64_t /*hidden_size*/, int64_t intermediate_size) {
  return num_entries * intermediate_size;  // the activated intermediate [N_e, I], grouped order
}

int grouped_expert_ffn(const GroupedExpertArgs& args, int64_t max_entries_per_expert, CUstream_st* stream) {
  if (args.num_entries == 0 || args.num_active == 0) return 0;
  int status = launch_problem<GateUpProblem>(args, args.num_active, max_entries_per_expert, args.intermediate_size,
                                             stream, args.tensor_core_weights);
  if (status == 0 && args.fp4_activations != Fp4Activations::kNone) {
    status = round_fp4_activations(args.fp4_activations, args.workspace, args.num_entries, args.intermediate_size,
                                   args.workspace, stream);
  }
  if (status != 0) return status;
  return launch_problem<DownProblem>(args, args.num_active, max_entries_per_expert, args.hidden_size, stream,
                                     args.tensor_core_weights);
}

int per_head_linear(const float* weights, int num_heads, int64_t out_features, int64_t in_features, const float* x,
                    int64_t x_head_stride, int64_t num_tokens, float* y, int64_t y_head_stride, CUstream_st* stream) {
  const PerHeadParams params{weights, out_features, in_features, x, x_head_stride, num_heads * x_head_stride,
                             y, y_head_stride, num_heads * y_head_stride, num_tokens};
  return launch_problem<PerHeadProblem>(params, num_heads, num_tokens, out_features, stream);
}

}  // namespace moert::MOERT_CUDA_NS
