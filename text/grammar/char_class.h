// Sets of Unicode code points as sorted, disjoint, non-adjacent inclusive ranges: what GBNF and
// regex character classes denote before they are lowered to UTF-8 byte sequences.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace moert::grammar {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorts and merges overlapping or adjacent ranges.
CodepointRanges normalize(CodepointRanges ranges);
// [0, kMaxCodepoint] minus `ranges` (normalized input).
CodepointRanges complement(const CodepointRanges& ranges);
// Decodes one UTF-8 code point of `text` at *pos (advanced past it). Errors name the offset of a
// malformed sequence.
Result<uint32_t> decode_utf8(std::string_view text, size_t* pos);

}  // namespace moert::grammar
