#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/check.h"

namespace moert::sampling {
namespace {

// The nucleus is complete once its mass reaches top_p * total * (1 - kTopPRelTolerance):
// absorbs double rounding of the cumulative sum, so a set whose exact mass equals top_p
// is never extended by one token because of the last bit.
constexpr double kTopPRelTolerance = 1e-12;

template <typename T>
std::string value_text(T value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Lowest id among the maximal logits. Precondition: vocab_size >= 1.
int32_t argmax_token(const float* logits, int vocab_size) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  MOERT_CHECK(!std::isnan(logits[best]), "greedy argmax over logits containing NaN");
  return best;
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

Status validate_sampling_params(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return invalid_argument("temperature = " + value_text(p.temperature) + " must be finite and >= 0");
  }
  if (p.top_k < 0) {
    return invalid_argument("top_k = " + value_text(p.top_k) + " must be >= 0 (0 = off)");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return invalid_argument("top_p = " + value_text(p.top_p) + " must be in (0, 1]");
  }
  if (p.n < 1) return invalid_argument("n = " + value_text(p.n) + " must be >= 1");
  if (p.max_tokens < 1) {
    return invalid_argument("max_tokens = " + value_text(p.max_tokens) + " must be >= 1");
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return invalid_argument("min_tokens = " + value_text(p.min_tokens) + " must be in [0, max_tokens = " +
                            value_text(p.max_tokens) + "]");
  }
  for (const auto& [name, value] : {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
                                    std::pair<const char*, float>{"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return invalid_argument(std::string(name) + " = " + value_text(value) + " must be in [-2, 2]");
    }
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return invalid_argument("repetition_penalty = " + value_text(p.repetition_penalty) + " must be finite and > 0");
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return invalid_argument("logprobs = " + value_text(p.logprobs) + " must be in [0, " + value_text(kMaxLogprobs) +
                            "] (or absent)");
  }
  if (p.is_guided() && p.guided_kind != "json_object" && p.guided_kind != "json_schema" && p.guided_kind != "regex" &&
      p.guided_kind != "grammar" && p.guided_kind != "choice") {
    return invalid_argument("guided_kind = '" + p.guided_kind + "' is not json_object, json_schema, regex, grammar or choice");
  }
  for (const std::string& stop : p.stop) {
    if (stop.empty()) return invalid_argument("a 'stop' string is empty");
  }
  return Status::ok();
}

void sampling_distribution(const float* logits, int vocab_size, const SamplingParams& p,
                           std::vector<double>* probs) {
  MOERT_CHECK(logits != nullptr && probs != nullptr);
  MOERT_CHECK(vocab_size >= 1, "vocab_size = " << vocab_size << " must be >= 1");
  MOERT_CHECK(p.temperature >= 0.0f && p.top_k >= 0 && p.top_p > 0.0f && p.top_p <= 1.0f,
              "sampling params not validated");
  probs->assign(static_cast<size_t>(vocab_size), 0.0);
  double* w = probs->data();  // [V]
  if (p.is_greedy()) {
    w[argmax_token(logits, vocab_size)] = 1.0;
    return;
  }

  constexpr float kInf = std::numeric_limits<float>::infinity();
  float max_logit = -kInf;
  for (int i = 0; i < vocab_size; ++i) {
    MOERT_CHECK(!std::isnan(logits[i]) && logits[i] != kInf, "logits[" << i << "] = " << logits[i]);
    max_logit = std::max(max_logit, logits[i]);
  }
  MOERT_CHECK(max_logit != -kInf, "all " << vocab_size << " logits are -inf");

  // Unnormalised weights exp((l - max) / T), in (0, 1]; the maximum has weight 1.
  const double max_d = max_logit;
  const double temperature = p.temperature;
  // A -inf logit (a structured-output mask, min_tokens' EOS) has weight exactly 0: skipping its
  // exp changes nothing and makes a masked row cheap (docs/structured-output.md §Figures).
  for (int i = 0; i < vocab_size; ++i) {
    w[i] = logits[i] == -kInf ? 0.0 : std::exp((static_cast<double>(logits[i]) - max_d) / temperature);
  }

  const bool use_top_k = p.top_k > 0 && p.top_k < vocab_size;
  const bool use_top_p = p.top_p < 1.0f;
  double kept_mass = 0.0;
  if (!use_top_k && !use_top_p) {
    for (int i = 0; i < vocab_size; ++i) kept_mass += w[i];
  } else {
    // Strict total order "a before b": more probable, ties lower id first.
    const auto before = [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
    std::iota(ids.begin(), ids.end(), 0);
    size_t num_kept = ids.size();
    if (use_top_k) {
      num_kept = static_cast<size_t>(p.top_k);
      std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(num_kept), ids.end(), before);
      for (size_t j = num_kept; j < ids.size(); ++j) w[ids[j]] = 0.0;
    }
    if (!use_top_p) {
      for (size_t j = 0; j < num_kept; ++j) kept_mass += w[ids[j]];
    } else {
      double total = 0.0;
      for (size_t j = 0; j < num_kept; ++j) total += w[ids[j]];
      const double target = static_cast<double>(p.top_p) * total * (1.0 - kTopPRelTolerance);
      // Max-heap by `before` over ids[0, heap_end); each pop moves the next token of the
      // nucleus (in order) to ids[heap_end - 1]. Only the nucleus gets sorted.
      const auto after = [&before](int32_t a, int32_t b) { return before(b, a); };
      auto heap_begin = ids.begin();
      auto heap_end = ids.begin() + static_cast<std::ptrdiff_t>(num_kept);
      std::make_heap(heap_begin, heap_end, after);
      while (heap_end != heap_begin) {
        std::pop_heap(heap_begin, heap_end, after);
        --heap_end;
        kept_mass += w[*heap_end];
        if (kept_mass >= target) break;
      }
      for (auto it = heap_begin; it != heap_end; ++it) w[*it] = 0.0;
    }
  }
  // kept_mass >= 1: the maximum (weight 1) is always kept.
  for (int i = 0; i < vocab_size; ++i) w[i] /= kept_mass;
}

int32_t sample_from_distribution(const std::vector<double>& probs, double uniform) {
  MOERT_CHECK(uniform >= 0.0 && uniform < 1.0, "uniform = " << uniform << " must be in [0, 1)");
  double total = 0.0;
  int32_t last_positive = -1;
  const int32_t vocab_size = static_cast<int32_t>(probs.size());
  for (int32_t i = 0; i < vocab_size; ++i) {
    MOERT_CHECK(probs[i] >= 0.0 && std::isfinite(probs[i]), "probs[" << i << "] = " << probs[i]);
    if (probs[i] > 0.0) {
      total += probs[i];
      last_positive = i;
    }
  }
  MOERT_CHECK(last_positive >= 0, "all " << vocab_size << " probabilities are 0");
  const double target = uniform * total;
  double cumulative = 0.0;
  for (int32_t i = 0; i < last_positive; ++i) {
    if (probs[i] > 0.0) {
      cumulative += probs[i];
      if (target < cumulative) return i;
    }
  }
  return last_positive;
}

int32_t sample_token(const float* logits, int vocab_size, const SamplingParams& p, double uniform,
                     std::vector<double>* scratch) {
  if (p.is_greedy()) {
    MOERT_CHECK(logits != nullptr && vocab_size >= 1, "vocab_size = " << vocab_size << " must be >= 1");
    return argmax_token(logits, vocab_size);
  }
  MOERT_CHECK(scratch != nullptr);
  sampling_distribution(logits, vocab_size, p, scratch);
  return sample_from_distribution(*scratch, uniform);
}

double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  // Each step is a bijection of its running hash for fixed other inputs (xor with a
  // constant-offset odd multiple, then the splitmix64 finaliser).
  uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ULL);
  h = mix64(h ^ (stream * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL));
  h = mix64(h ^ (counter * 0x9E3779B97F4A7C15ULL + 0x8CB92BA72F3D8DD7ULL));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool is_stop_token(const SamplingParams& p, int32_t token) {
  const auto contains = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return contains(p.stop_token_ids) || (!p.ignore_eos && contains(p.eos_token_ids));
}

std::optional<std::string> finish_reason(const SamplingParams& p, int32_t token, int num_generated) {
  if (num_generated >= p.min_tokens && is_stop_token(p, token)) return "stop";
  if (num_generated >= p.max_tokens) return "length";
  return std::nullopt;
}

}  // namespace moert::sampling
