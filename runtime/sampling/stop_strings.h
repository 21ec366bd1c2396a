// Stop strings over generated text that grows piece by piece (docs/generation.md). A stop
// string may span token boundaries; the text kept ends just before it and it is never emitted.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace moert::sampling {

struct StopMatch {
  size_t position = 0;    // byte offset of the stop string in the text: the text kept is [0, position)
  size_t stop_index = 0;  // which of the stop strings
};

// The stop string occurrence in `text` that ends first, looking only at occurrences that end
// after byte `old_size` (the text's size when last searched: earlier ones were found then).
// Ties (same end): the one that starts first, then the lower index. Empty stop strings never match.
std::optional<StopMatch> find_stop_string(const std::string& text, size_t old_size,
                                          const std::vector<std::string>& stops);

}  // namespace moert::sampling
