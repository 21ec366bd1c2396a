#include "runtime/speculative/rejection_sampler.h"

#include <algorithm>
#include <cstddef>

#include "core/check.h"

namespace moert::spec {
namespace {

constexpr int kDomainShift = 62;
constexpr uint64_t kMaxPosition = (uint64_t{1} << kDomainShift) - 1;

void check_input(const SpecVerifyInput& in) {
  const int64_t vocab = in.vocab_size;
  const int64_t num_draft = in.num_draft();
  MOERT_CHECK(vocab >= 1, "vocab_size = " << vocab << " must be >= 1");
  MOERT_CHECK(static_cast<int64_t>(in.target_probs.size()) == (num_draft + 1) * vocab,
              "target_probs has " << in.target_probs.size() << " entries, expected (K + 1) * V = "
                                  << (num_draft + 1) * vocab << " (K = " << num_draft << ", V = " << vocab << ")");
  MOERT_CHECK(in.draft_probs.empty() || static_cast<int64_t>(in.draft_probs.size()) == num_draft * vocab,
              "draft_probs has " << in.draft_probs.size() << " entries, expected 0 or K * V = "
                                 << num_draft * vocab);
  for (int64_t i = 0; i < num_draft; ++i) {
    const int32_t x = in.draft_tokens[static_cast<size_t>(i)];
    MOERT_CHECK(x >= 0 && x < vocab, "draft_tokens[" << i << "] = " << x << " must be in [0, " << vocab << ")");
  }
}

void check_uniforms(const SpecUniforms& u, int num_draft) {
  MOERT_CHECK(static_cast<int>(u.accept.size()) == num_draft,
              "accept has " << u.accept.size() << " uniforms, expected K = " << num_draft);
  MOERT_CHECK(static_cast<int>(u.resample.size()) == num_draft + 1,
              "resample has " << u.resample.size() << " uniforms, expected K + 1 = " << num_draft + 1);
  // resample[] is range-checked by sample_from_distribution when used.
  for (size_t i = 0; i < u.accept.size(); ++i) {
    MOERT_CHECK(u.accept[i] >= 0.0 && u.accept[i] < 1.0,
                "accept[" << i << "] = " << u.accept[i] << " must be in [0, 1)");
  }
}

// Row `row` of a row-major [*, V] table.
const double* row_of(std::span<const double> table, int row, int vocab) {
  return table.data() + static_cast<size_t>(row) * static_cast<size_t>(vocab);
}

// Lowest id among the maximal entries of probs[0, V).
int32_t argmax_lowest_id(const double* probs, int vocab) {
  int32_t best = 0;
  for (int32_t v = 1; v < vocab; ++v) {
    if (probs[v] > probs[best]) best = v;
  }
  return best;
}

// Writes max(0, p - q) into *residual ([V]); q == nullptr means one-hot at `draft`, so the
// residual is p with the draft token zeroed. Returns whether any entry is positive.
//
// kResidualFallback: if every entry is 0 (p <= q everywhere, possible only when p and q
// agree up to rounding or p sums to less than q), the residual is replaced by p itself.
// Rejection then had probability ~0, and p is the distribution the output must follow, so
// the fallback never emits a token outside p's support. (vLLM V1 takes the argmax of the
// all-zero residual, i.e. token 0, whatever p says; V0 clamped the residual to the smallest
// positive float, i.e. uniform over the whole vocabulary.)
void residual_or_target(const double* p, const double* q, int32_t draft, int vocab,
                        std::vector<double>* residual) {
  residual->resize(static_cast<size_t>(vocab));
  double* r = residual->data();
  bool any_positive = false;
  for (int v = 0; v < vocab; ++v) {
    const double qv = q != nullptr ? q[v] : (v == draft ? 1.0 : 0.0);
    r[v] = p[v] > qv ? p[v] - qv : 0.0;
    any_positive = any_positive || r[v] > 0.0;
  }
  if (!any_positive) residual->assign(p, p + vocab);
}

}  // namespace

SpecVerifyResult rejection_sample_greedy(const SpecVerifyInput& input) {
  check_input(input);
  const int vocab = input.vocab_size;
  const int num_draft = input.num_draft();
  SpecVerifyResult result;
  result.tokens.reserve(static_cast<size_t>(num_draft) + 1);
  for (int i = 0; i < num_draft; ++i) {
    const int32_t best = argmax_lowest_id(row_of(input.target_probs, i, vocab), vocab);
    result.tokens.push_back(best);
    if (best != input.draft_tokens[static_cast<size_t>(i)]) return result;  // recovered
    ++result.num_accepted;
  }
  result.tokens.push_back(argmax_lowest_id(row_of(input.target_probs, num_draft, vocab), vocab));
  result.is_bonus = true;
  return result;
}

SpecVerifyResult rejection_sample(const SpecVerifyInput& input, const SpecUniforms& uniforms,
                                  std::vector<double>* scratch) {
  check_input(input);
  const int num_draft = input.num_draft();
  check_uniforms(uniforms, num_draft);
  MOERT_CHECK(scratch != nullptr);
  const int vocab = input.vocab_size;
  const bool one_hot_draft = input.draft_probs.empty();
  SpecVerifyResult result;
  result.tokens.reserve(static_cast<size_t>(num_draft) + 1);
  for (int i = 0; i < num_draft; ++i) {
    const int32_t x = input.draft_tokens[static_cast<size_t>(i)];
    const double* p = row_of(input.target_probs, i, vocab);
    const double* q = one_hot_draft ? nullptr : row_of(input.draft_probs, i, vocab);
    const double q_x = one_hot_draft ? 1.0 : q[x];
    // u * q(x) < p(x)  <=>  u < p(x) / q(x) for q(x) > 0: probability min(1, p(x) / q(x)).
    if (q_x > 0.0 && uniforms.accept[static_cast<size_t>(i)] * q_x < p[x]) {
      result.tokens.push_back(x);
      ++result.num_accepted;
      continue;
    }
    residual_or_target(p, q, x, vocab, scratch);
    result.tokens.push_back(sampling::sample_from_distribution(*scratch, uniforms.resample[static_cast<size_t>(i)]));
    return result;
  }
  const double* p_bonus = row_of(input.target_probs, num_draft, vocab);
  scratch->assign(p_bonus, p_bonus + vocab);
  const double bonus_uniform = uniforms.resample[static_cast<size_t>(num_draft)];
  result.tokens.push_back(sampling::sample_from_distribution(*scratch, bonus_uniform));
  result.is_bonus = true;
  return result;
}

SpecVerifyResult verify_draft(const SpecVerifyInput& input, const sampling::SamplingParams& params,
                              const SpecUniforms& uniforms, std::vector<double>* scratch) {
  if (params.is_greedy()) return rejection_sample_greedy(input);
  return rejection_sample(input, uniforms, scratch);
}

void processed_distributions(const float* logits, int num_rows, int vocab_size,
                             const sampling::SamplingParams& params, std::vector<double>* probs) {
  MOERT_CHECK(probs != nullptr && num_rows >= 0 && vocab_size >= 1,
              "num_rows = " << num_rows << ", vocab_size = " << vocab_size);
  const size_t vocab = static_cast<size_t>(vocab_size);
  probs->resize(static_cast<size_t>(num_rows) * vocab);
  std::vector<double> row;
  for (int r = 0; r < num_rows; ++r) {
    sampling::sampling_distribution(logits + static_cast<size_t>(r) * vocab, vocab_size, params, &row);
    std::copy(row.begin(), row.end(), probs->begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * vocab));
  }
}

double spec_uniform(uint64_t seed, uint64_t stream, UniformDomain domain, uint64_t position) {
  MOERT_CHECK(position <= kMaxPosition, "position = " << position << " must be < 2^62");
  const uint64_t counter = (static_cast<uint64_t>(domain) << kDomainShift) | position;
  return sampling::counter_uniform(seed, stream, counter);
}

PassUniforms make_pass_uniforms(uint64_t seed, uint64_t stream, uint64_t first_position, int num_draft) {
  MOERT_CHECK(num_draft >= 0, "num_draft = " << num_draft << " must be >= 0");
  PassUniforms u;
  u.accept.resize(static_cast<size_t>(num_draft));
  u.resample.resize(static_cast<size_t>(num_draft) + 1);
  for (int i = 0; i <= num_draft; ++i) {
    const uint64_t position = first_position + static_cast<uint64_t>(i);
    if (i < num_draft) u.accept[static_cast<size_t>(i)] = spec_uniform(seed, stream, UniformDomain::kAccept, position);
    u.resample[static_cast<size_t>(i)] = spec_uniform(seed, stream, UniformDomain::kResample, position);
  }
  return u;
}

}  // namespace moert::spec
