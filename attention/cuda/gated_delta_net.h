// CUDA Gated DeltaNet token mixer (docs/gated-deltanet.md): host launchers only (device
// pointers, sizes, a stream; no CUDA headers). The twin of attention/cpu/gated_delta_net.h's
// gated_delta_net_sequence over a batch of sequences, each with its own state. Every launcher
// returns 0 or the CUDA error code of the launch.
//
// Shapes: T rows of the call, C conv channels, NV value heads of DV, NK key heads of DK, W conv
// width, S sequences.
#pragma once

#include <cstdint>

#include "attention/gated_delta_shape.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// One sequence of a call, as the kernels read it (device memory): its rows, its states, the
// optional per-row candidates, and its snapshot copies (copies[first_copy, first_copy +
// num_copies) of the call's copy table).
struct GatedDeltaSequence {
  int64_t first_row = 0, num_rows = 0;
  float* conv_state = nullptr;              // [W-1, C]
  float* recurrent_state = nullptr;         // [NV, DK, DV]
  float* conv_states_after = nullptr;       // [rows, W-1, C] or null
  float* recurrent_states_after = nullptr;  // [rows, NV, DK, DV] or null
  int64_t first_copy = 0, num_copies = 0;
};

// The mixer of every sequence: rows [0, num_rows) of the call hold the sequences' rows;
// conv_rows [T, C] is device scratch (the conv + SiLU output), out [T, NV DV]; params' arrays,
// sequences [S] and copies in device memory. Refuses (cudaErrorInvalidValue) DK > 256,
// DV > 1024 or a conv width > 9.
int gated_delta_net(const attention::GatedDeltaShape& shape, const attention::GatedDeltaParams& params,
                    const float* u, const float* z, const float* a, const float* b, const GatedDeltaSequence* sequences,
                    int64_t num_sequences, const attention::StateCopy* copies, int64_t num_rows, float* conv_rows,
                    float* out, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
