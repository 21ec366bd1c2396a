#include "core/dtype.h"

#include <array>

namespace moert {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeInfo, 22> kDTypes = {{
    {DType::kBool, "BOOL", 8},       {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},           {DType::kU16, "U16", 16},
    {DType::kI16, "I16", 16},        {DType::kU32, "U32", 32},
    {DType::kI32, "I32", 32},        {DType::kU64, "U64", 64},
    {DType::kI64, "I64", 64},        {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},      {DType::kF32, "F32", 32},
    {DType::kF64, "F64", 64},        {DType::kF8E4M3, "F8_E4M3", 8},
    {DType::kF8E5M2, "F8_E5M2", 8},  {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kF8E4M3FNUZ, "F8_E4M3FNUZ", 8}, {DType::kF8E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::kF4, "F4", 4},           {DType::kF6E2M3, "F6_E2M3", 6},
    {DType::kF6E3M2, "F6_E3M2", 6},  {DType::kC64, "C64", 64},
}};

const DTypeInfo& info(DType dtype) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable: every enumerator is listed
}

}  // namespace

int dtype_bits(DType dtype) { return info(dtype).bits; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::optional<uint64_t> dtype_storage_bytes(DType dtype, uint64_t numel) {
  const uint64_t bits = static_cast<uint64_t>(dtype_bits(dtype));
  if (numel != 0 && numel > UINT64_MAX / bits) return std::nullopt;
  const uint64_t total_bits = numel * bits;
  if (total_bits % 8 != 0) return std::nullopt;
  return total_bits / 8;
}

int dtype_alignment(DType dtype) {
  const int bits = dtype_bits(dtype);
  return bits >= 8 ? bits / 8 : 1;
}

}  // namespace moert
