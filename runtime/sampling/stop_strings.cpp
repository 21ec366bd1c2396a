#include "runtime/sampling/stop_strings.h"

namespace moert::sampling {

std::optional<StopMatch> find_stop_string(const std::string& text, size_t old_size,
                                          const std::vector<std::string>& stops) {
  std::optional<StopMatch> best;
  size_t best_end = 0;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& stop = stops[i];
    if (stop.empty() || stop.size() > text.size()) continue;
    // An occurrence ending after old_size starts at or after old_size - (size - 1).
    const size_t from = old_size + 1 > stop.size() ? old_size + 1 - stop.size() : 0;
    const size_t position = text.find(stop, from);
    if (position == std::string::npos) continue;
    const size_t end = position + stop.size();
    if (!best || end < best_end || (end == best_end && position < best->position)) {
      best = StopMatch{position, i};
      best_end = end;
    }
  }
  return best;
}

}  // namespace moert::sampling
