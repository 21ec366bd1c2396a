// FP4 x FP4 GEMM on the block-scaled tensor cores of compute capability 10 and later
// (Blackwell: cuBLASLt with VEC16_UE4M3 scales for NVFP4, VEC32_UE8M0 for MXFP4;
// docs/cuda-backend.md "Block-scaled FP4"). Both operands are FP4 codes with their block
// scales in the tiles of quant::scale_tile_offset. Host launcher only; the GPU build calls
// cuBLASLt (block_scaled_gemm_cublaslt.cpp), the emulation computes the same definition on
// the CPU (emulation/emulated_block_scaled_gemm.cpp).
#pragma once

#include <cstdint>

#include "quant/cuda/fp4_activations.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// One FP4 operand [rows, K] in device memory.
struct BlockScaledOperand {
  const void* codes = nullptr;          // [rows, K/2], element 2i in the low nibble
  const uint8_t* tiled_scales = nullptr;  // [rows, K / block] in tiles (E4M3 or E8M0 bytes)
  int64_t rows = 0;
};

// Device scratch a call may use.
inline constexpr int64_t kBlockScaledWorkspaceBytes = int64_t{32} << 20;
// What block_scaled_gemm returns when the library has no kernel for the call (an older
// cuBLASLt, a GPU without the instructions, a shape it refuses): the caller computes
// otherwise. Any other nonzero value is a CUDA or cuBLAS error.
inline constexpr int kBlockScaledUnsupported = -1;

// y[R, N] = alpha * sum_k x[r, k] w[n, k], each element decoded as e2m1 * block scale, for
// x = activations [R, K], w = weight [N, K]; `format` picks the scale type and block (16 / 32).
// The sums are float32 in the library's order. K a multiple of 32.
int block_scaled_gemm(Fp4Activations format, const BlockScaledOperand& w, const BlockScaledOperand& x, int64_t k,
                      float alpha, float* y, void* workspace, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
