// What the expert-parallel exchange puts on the wire for one hidden row (docs/ep-exchange.md).
//   f32   D x 4 bytes, the row as computed (the default);
//   bf16  D x 2 bytes, each value rounded to nearest, ties to even (core/half.h);
//   fp8   ceil(D / 128) x 4 bytes of scales, then D x 1 byte of E4M3 codes: per block of 128
//         values (the last one ragged), scale = amax / 448 and code = e4m3_encode(x / scale)
//         (RNE, saturating; DeepEP's low-latency dispatch format). An all-zero block has
//         scale 0 and codes 0; a block with a non-finite amax decodes to NaN.
// Invariant the executor relies on: encode then decode is a pure function of the row's
// values, so every routed row is rounded the same way whether its expert is on this rank or
// another, and outputs stay identical across rank counts and placements for a given dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace moert::parallel {

enum class PayloadDType { kF32, kBf16, kFp8 };

inline constexpr int64_t kFp8PayloadBlock = 128;

const char* payload_dtype_name(PayloadDType dtype);
// "f32", "bf16" or "fp8" (fp8 only where `allow_fp8`: the dispatch, not the combine).
// invalid_argument naming `option` and the allowed values otherwise.
Result<PayloadDType> parse_payload_dtype(const std::string& value, bool allow_fp8, const std::string& option);

// Bytes of one encoded row of `dim` values.
int64_t payload_row_bytes(PayloadDType dtype, int64_t dim);

// rows: [num_rows, dim] floats -> out: num_rows x payload_row_bytes(dtype, dim) bytes, back to back.
void encode_payload_rows(PayloadDType dtype, const float* rows, int64_t num_rows, int64_t dim, std::byte* out);
// The inverse: in: num_rows encoded rows -> rows: [num_rows, dim] floats.
void decode_payload_rows(PayloadDType dtype, const std::byte* in, int64_t num_rows, int64_t dim, float* rows);
// encode then decode in place: what a row becomes after a trip through the wire.
void round_payload_rows(PayloadDType dtype, float* rows, int64_t num_rows, int64_t dim);

// quant::e4m3_encode(v) for finite |v| <= 448, computed from v's bits (the fp8 dispatch's
// per-value step; payload_codec_test checks it against e4m3_encode).
uint8_t e4m3_encode_in_range(float v);

// The pair an expert-parallel job uses: what the dispatch sends (hidden rows to the experts)
// and what the combine sends back (one weighted expert output per (row, expert)).
struct PayloadDTypes {
  PayloadDType dispatch = PayloadDType::kF32;
  PayloadDType combine = PayloadDType::kF32;
  bool all_f32() const { return dispatch == PayloadDType::kF32 && combine == PayloadDType::kF32; }
};

}  // namespace moert::parallel
