#include "runtime/parallel/payload_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "quant/formats/minifloat.h"

namespace moert::parallel {
namespace {

int64_t fp8_blocks(int64_t dim) { return (dim + kFp8PayloadBlock - 1) / kFp8PayloadBlock; }

}  // namespace

// quant::e4m3_encode's result for finite |v| <= 448 (what x / (amax / 448) is, up to one
// rounding), from the bits instead of frexp/ldexp: the dispatch encodes every value it sends.
// Normals (|v| >= 2^-6): round the float's 23-bit mantissa to 3 bits, ties to even (a carry
// moves into the exponent), and rebias the exponent from 127 to 7. Subnormals: multiples of
// 2^-9, rounded to nearest even (the default rounding mode); 8 x 2^-9 is the smallest normal,
// code 0x08, so the two ranges meet. Past 448 the code saturates at 0x7E, as e4m3_encode's.
uint8_t e4m3_encode_in_range(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  uint32_t code;
  if (magnitude < 0x3c800000u) {  // 2^-6
    float a;
    std::memcpy(&a, &magnitude, sizeof(a));
    code = static_cast<uint32_t>(std::nearbyint(a * 512.0f));
  } else {
    const uint32_t rounded = magnitude + 0x7ffffu + ((magnitude >> 20) & 1u);
    code = std::min((rounded >> 20) - (120u << 3), 0x7eu);
  }
  return static_cast<uint8_t>(sign | code);
}

namespace {

void encode_fp8_row(const float* row, int64_t dim, std::byte* out) {
  std::byte* codes = out + fp8_blocks(dim) * static_cast<int64_t>(sizeof(float));
  for (int64_t b = 0, start = 0; start < dim; ++b, start += kFp8PayloadBlock) {
    const int64_t end = std::min(dim, start + kFp8PayloadBlock);
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = start; i < end; ++i) {
      finite = finite && std::isfinite(row[i]);
      amax = std::max(amax, std::fabs(row[i]));
    }
    const float scale = finite ? amax / quant::kE4m3Max : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(out + b * static_cast<int64_t>(sizeof(float)), &scale, sizeof(float));
    for (int64_t i = start; i < end; ++i) {
      const uint8_t code = !finite ? quant::kE4m3NaN : scale == 0.0f ? uint8_t{0} : e4m3_encode_in_range(row[i] / scale);
      codes[i] = static_cast<std::byte>(code);
    }
  }
}

void decode_fp8_row(const std::byte* in, int64_t dim, float* row) {
  const std::byte* codes = in + fp8_blocks(dim) * static_cast<int64_t>(sizeof(float));
  for (int64_t b = 0, start = 0; start < dim; ++b, start += kFp8PayloadBlock) {
    float scale;
    std::memcpy(&scale, in + b * static_cast<int64_t>(sizeof(float)), sizeof(float));
    const int64_t end = std::min(dim, start + kFp8PayloadBlock);
    for (int64_t i = start; i < end; ++i) row[i] = quant::e4m3_decode(static_cast<uint8_t>(codes[i])) * scale;
  }
}

}  // namespace

const char* payload_dtype_name(PayloadDType dtype) {
  switch (dtype) {
    case PayloadDType::kF32: return "f32";
    case PayloadDType::kBf16: return "bf16";
    case PayloadDType::kFp8: return "fp8";
  }
  return "?";
}

Result<PayloadDType> parse_payload_dtype(const std::string& value, bool allow_fp8, const std::string& option) {
  if (value == "f32") return PayloadDType::kF32;
  if (value == "bf16") return PayloadDType::kBf16;
  if (value == "fp8" && allow_fp8) return PayloadDType::kFp8;
  return invalid_argument(option + " '" + value + "' is not one of f32, bf16" + (allow_fp8 ? ", fp8" : ""));
}

int64_t payload_row_bytes(PayloadDType dtype, int64_t dim) {
  switch (dtype) {
    case PayloadDType::kF32: return dim * static_cast<int64_t>(sizeof(float));
    case PayloadDType::kBf16: return dim * static_cast<int64_t>(sizeof(uint16_t));
    case PayloadDType::kFp8: return fp8_blocks(dim) * static_cast<int64_t>(sizeof(float)) + dim;
  }
  return 0;
}

void encode_payload_rows(PayloadDType dtype, const float* rows, int64_t num_rows, int64_t dim, std::byte* out) {
  const int64_t row_bytes = payload_row_bytes(dtype, dim);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = rows + r * dim;
    std::byte* wire = out + r * row_bytes;
    switch (dtype) {
      case PayloadDType::kF32: std::memcpy(wire, row, static_cast<size_t>(row_bytes)); break;
      case PayloadDType::kBf16:
        for (int64_t i = 0; i < dim; ++i) {
          const uint16_t bits = f32_to_bf16(row[i]);
          std::memcpy(wire + i * 2, &bits, sizeof(bits));
        }
        break;
      case PayloadDType::kFp8: encode_fp8_row(row, dim, wire); break;
    }
  }
}

void decode_payload_rows(PayloadDType dtype, const std::byte* in, int64_t num_rows, int64_t dim, float* rows) {
  const int64_t row_bytes = payload_row_bytes(dtype, dim);
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = rows + r * dim;
    const std::byte* wire = in + r * row_bytes;
    switch (dtype) {
      case PayloadDType::kF32: std::memcpy(row, wire, static_cast<size_t>(row_bytes)); break;
      case PayloadDType::kBf16:
        for (int64_t i = 0; i < dim; ++i) {
          uint16_t bits;
          std::memcpy(&bits, wire + i * 2, sizeof(bits));
          row[i] = bf16_to_f32(bits);
        }
        break;
      case PayloadDType::kFp8: decode_fp8_row(wire, dim, row); break;
    }
  }
}

void round_payload_rows(PayloadDType dtype, float* rows, int64_t num_rows, int64_t dim) {
  if (dtype == PayloadDType::kF32) return;
  std::vector<std::byte> wire(static_cast<size_t>(payload_row_bytes(dtype, dim)));
  for (int64_t r = 0; r < num_rows; ++r) {
    encode_payload_rows(dtype, rows + r * dim, 1, dim, wire.data());
    decode_payload_rows(dtype, wire.data(), 1, dim, rows + r * dim);
  }
}

}  // namespace moert::parallel
