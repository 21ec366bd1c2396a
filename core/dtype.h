// Element types. The enum covers every safetensors dtype so that any valid file can be
// opened; compute paths handle F32/F16/BF16/F8_E4M3/F8_E5M2/U8/I32/I64.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moert {

enum class DType : uint8_t {
  kBool, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64,
  kF16, kBF16, kF32, kF64,
  kF8E4M3, kF8E5M2, kF8E8M0, kF8E4M3FNUZ, kF8E5M2FNUZ,
  kF4, kF6E2M3, kF6E3M2, kC64,
};

// Bits per element (4, 6, 8, 16, 32 or 64).
int dtype_bits(DType dtype);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
// Byte size of `numel` elements; nullopt if numel * bits is not a whole number of bytes.
std::optional<uint64_t> dtype_storage_bytes(DType dtype, uint64_t numel);
// Natural alignment of one element in bytes (1 for sub-byte types).
int dtype_alignment(DType dtype);

}  // namespace moert
