#include "text/grammar/number_range.h"

#include <string>

namespace moert::grammar {
namespace {

ByteSet digits(char first, char last) {
  ByteSet set;
  for (char c = first; c <= last; ++c) set.set(static_cast<uint8_t>(c));
  return set;
}

Expr any_digits(size_t n) {
  std::vector<Expr> items;
  for (size_t i = 0; i < n; ++i) items.push_back(bytes_expr(digits('0', '9')));
  return seq(std::move(items));
}

// Digit strings of one length between a and b (same length, a <= b).
Expr same_length(const std::string& a, const std::string& b) {
  if (a.size() == 1) return bytes_expr(digits(a[0], b[0]));
  const std::string a_rest = a.substr(1), b_rest = b.substr(1);
  if (a[0] == b[0]) return seq({byte_expr(static_cast<uint8_t>(a[0])), same_length(a_rest, b_rest)});
  std::vector<Expr> alts;
  char start = a[0], end = b[0];
  if (a_rest.find_first_not_of('0') != std::string::npos) {
    alts.push_back(seq({byte_expr(static_cast<uint8_t>(a[0])), same_length(a_rest, std::string(a_rest.size(), '9'))}));
    ++start;
  }
  Expr tail;
  const bool has_tail = b_rest.find_first_not_of('9') != std::string::npos;
  if (has_tail) {
    tail = seq({byte_expr(static_cast<uint8_t>(b[0])), same_length(std::string(b_rest.size(), '0'), b_rest)});
    --end;
  }
  if (start <= end) alts.push_back(seq({bytes_expr(digits(start, end)), any_digits(a_rest.size())}));
  if (has_tail) alts.push_back(std::move(tail));
  return alt(std::move(alts));
}

int64_t power10(size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= 10;
  return p;
}

// Non-negative integers in [a, b].
Expr nonnegative_range(int64_t a, int64_t b) {
  std::vector<Expr> alts;
  const size_t len_a = std::to_string(a).size(), len_b = std::to_string(b).size();
  for (size_t len = len_a; len <= len_b; ++len) {
    const int64_t lo = std::max(a, len == 1 ? int64_t{0} : power10(len - 1));
    const int64_t hi = std::min(b, power10(len) - 1);
    if (lo <= hi) alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return alt(std::move(alts));
}

// Non-negative integers >= a.
Expr nonnegative_from(int64_t a) {
  const size_t len = std::to_string(a).size();
  return alt({nonnegative_range(a, power10(len) - 1),
              seq({bytes_expr(digits('1', '9')), repeat(bytes_expr(digits('0', '9')), static_cast<int>(len), -1)})});
}

}  // namespace

Expr integer_range_expr(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Expr> alts;
  if (!lo || *lo < 0) {  // negative values: "-" and a magnitude in [m_lo, m_hi]
    const int64_t m_lo = hi && *hi < 0 ? -*hi : 1;
    Expr magnitude = lo ? nonnegative_range(m_lo, -*lo) : nonnegative_from(m_lo);
    alts.push_back(seq({byte_expr('-'), std::move(magnitude)}));
  }
  if (!hi || *hi >= 0) {
    const int64_t from = lo ? std::max<int64_t>(*lo, 0) : 0;
    alts.push_back(hi ? nonnegative_range(from, *hi) : nonnegative_from(from));
  }
  return alt(std::move(alts));
}

}  // namespace moert::grammar
