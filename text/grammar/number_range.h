// Decimal integers in JSON form (optional '-', no leading zeros, never "-0") whose value lies in
// [lo, hi]; an absent bound is unbounded. Bounds must lie within +-kMaxIntegerBound.
#pragma once

#include <cstdint>
#include <optional>

#include "text/grammar/grammar.h"

namespace moert::grammar {

inline constexpr int64_t kMaxIntegerBound = 1'000'000'000'000'000 / 1'000;  // 1e15

// Precondition: lo <= hi when both are set, |lo|, |hi| <= kMaxIntegerBound.
Expr integer_range_expr(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace moert::grammar
