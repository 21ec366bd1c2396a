#include "text/grammar/grammar.h"

#include <algorithm>
#include <functional>

namespace moert::grammar {

Expr bytes_expr(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = set;
  return e;
}

Expr byte_expr(uint8_t byte) {
  ByteSet set;
  set.set(byte);
  return bytes_expr(set);
}

Expr literal(std::string_view text) {
  std::vector<Expr> items;
  for (char c : text) items.push_back(byte_expr(static_cast<uint8_t>(c)));
  return seq(std::move(items));
}

Expr seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kSeq;
  e.items = std::move(items);
  return e;
}

Expr alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.items = std::move(items);
  return e;
}

Expr ref(int rule) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.rule = rule;
  return e;
}

Expr repeat(Expr item, int min, int max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }

std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

namespace {

ByteSet byte_range(unsigned lo, unsigned hi) {
  ByteSet set;
  for (unsigned b = lo; b <= hi; ++b) set.set(b);
  return set;
}

// The encodings of [lo, hi], values of one encoded length with k continuation bytes; `lead` is
// the lead byte's prefix (0 for ASCII). Splits on the top base-64 digit.
Expr utf8_range(uint32_t lo, uint32_t hi, int k, unsigned lead, bool first) {
  const auto byte_of = [&](uint32_t digit) { return first ? (lead | digit) : (0x80u | digit); };
  if (k == 0) return bytes_expr(byte_range(byte_of(lo), byte_of(hi)));
  const uint32_t mask = (1u << (6 * k)) - 1;
  uint32_t top_lo = lo >> (6 * k), top_hi = hi >> (6 * k);
  const uint32_t rest_lo = lo & mask, rest_hi = hi & mask;
  if (top_lo == top_hi) {
    return seq({byte_expr(static_cast<uint8_t>(byte_of(top_lo))), utf8_range(rest_lo, rest_hi, k - 1, 0, false)});
  }
  std::vector<Expr> alts;
  if (rest_lo != 0) {
    alts.push_back(seq({byte_expr(static_cast<uint8_t>(byte_of(top_lo))), utf8_range(rest_lo, mask, k - 1, 0, false)}));
    ++top_lo;
  }
  Expr tail;
  bool has_tail = false;
  if (rest_hi != mask) {
    tail = seq({byte_expr(static_cast<uint8_t>(byte_of(top_hi))), utf8_range(0, rest_hi, k - 1, 0, false)});
    has_tail = true;
    --top_hi;
  }
  if (top_lo <= top_hi) {
    std::vector<Expr> middle{bytes_expr(byte_range(byte_of(top_lo), byte_of(top_hi)))};
    for (int i = 0; i < k; ++i) middle.push_back(bytes_expr(byte_range(0x80, 0xBF)));
    alts.push_back(seq(std::move(middle)));
  }
  if (has_tail) alts.push_back(std::move(tail));
  return alt(std::move(alts));
}

}  // namespace

Expr codepoint_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  // Encoded-length bands, surrogates excluded.
  static const uint32_t kBands[][3] = {{0x0, 0x7F, 0},        {0x80, 0x7FF, 1},        {0x800, 0xD7FF, 2},
                                       {0xE000, 0xFFFF, 2},   {0x10000, 0x10FFFF, 3}};
  static const unsigned kLead[] = {0x00, 0xC0, 0xE0, 0xF0};
  std::vector<Expr> alts;
  ByteSet ascii;
  for (const auto& [first, last] : ranges) {
    for (const auto& band : kBands) {
      const uint32_t lo = std::max(first, band[0]), hi = std::min(last, band[1]);
      if (lo > hi) continue;
      if (band[2] == 0) {
        ascii |= byte_range(lo, hi);
      } else {
        alts.push_back(utf8_range(lo, hi, static_cast<int>(band[2]), kLead[band[2]], true));
      }
    }
  }
  if (ascii.any()) alts.insert(alts.begin(), bytes_expr(ascii));
  return alt(std::move(alts));
}

int GrammarBuilder::rule(const std::string& name) {
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  by_name_[name] = static_cast<int>(names_.size());
  names_.push_back(name);
  defined_.push_back(false);
  bodies_.emplace_back();
  return static_cast<int>(names_.size() - 1);
}

int GrammarBuilder::fresh_rule(const std::string& hint) {
  names_.push_back(hint + "-" + std::to_string(names_.size()));
  defined_.push_back(false);
  bodies_.emplace_back();
  return static_cast<int>(names_.size() - 1);
}

Status GrammarBuilder::define(int rule, const Expr& body) {
  if (defined_[static_cast<size_t>(rule)]) return invalid_argument("rule '" + names_[static_cast<size_t>(rule)] + "' is defined twice");
  defined_[static_cast<size_t>(rule)] = true;
  std::vector<std::vector<Element>> alternatives;
  const std::vector<Expr> single{body};
  const std::vector<Expr>& items = body.kind == Expr::Kind::kAlt ? body.items : single;
  for (const Expr& item : items) {
    std::vector<Element> elements;
    MOERT_RETURN_IF_ERROR(lower_into(item, &elements));
    alternatives.push_back(std::move(elements));
  }
  bodies_[static_cast<size_t>(rule)] = std::move(alternatives);
  return Status::ok();
}

Result<int32_t> GrammarBuilder::rule_for(const Expr& e, const std::string& hint) {
  if (e.kind == Expr::Kind::kRef) return e.rule;
  const int r = fresh_rule(hint);
  MOERT_RETURN_IF_ERROR(define(r, e));
  return r;
}

Status GrammarBuilder::lower_into(const Expr& e, std::vector<Element>* out) {
  if (++num_elements_ > kMaxGrammarElements) {
    return invalid_argument("grammar larger than " + std::to_string(kMaxGrammarElements) + " elements");
  }
  switch (e.kind) {
    case Expr::Kind::kBytes:
      byte_sets_.push_back(e.bytes);
      out->push_back({Element::kBytes, static_cast<int32_t>(byte_sets_.size() - 1)});
      return Status::ok();
    case Expr::Kind::kRef:
      out->push_back({Element::kRule, e.rule});
      return Status::ok();
    case Expr::Kind::kSeq:
      for (const Expr& item : e.items) MOERT_RETURN_IF_ERROR(lower_into(item, out));
      return Status::ok();
    case Expr::Kind::kAlt: {
      MOERT_ASSIGN_OR_RETURN(const int32_t r, rule_for(e, "alt"));
      out->push_back({Element::kRule, r});
      return Status::ok();
    }
    case Expr::Kind::kRepeat: {
      const Expr& item = e.items[0];
      if (e.min < 0 || (e.max >= 0 && e.max < e.min)) {
        return invalid_argument("repetition {" + std::to_string(e.min) + "," + std::to_string(e.max) + "} is empty");
      }
      if (static_cast<size_t>(e.min) + static_cast<size_t>(std::max(e.max, 0)) > kMaxGrammarElements) {
        return invalid_argument("repetition bound " + std::to_string(std::max(e.min, e.max)) + " is too large");
      }
      // One element standing for the item: a byte set as is, anything else as a rule.
      Element unit;
      if (item.kind == Expr::Kind::kBytes) {
        std::vector<Element> one;
        MOERT_RETURN_IF_ERROR(lower_into(item, &one));
        unit = one[0];
      } else {
        MOERT_ASSIGN_OR_RETURN(const int32_t r, rule_for(item, "item"));
        unit = {Element::kRule, r};
      }
      for (int i = 0; i < e.min; ++i) out->push_back(unit);
      if (e.max < 0) {  // star ::= unit star | ""  (right recursion: a tail call in the automaton)
        const int star = fresh_rule("star");
        bodies_[static_cast<size_t>(star)] = {{unit, {Element::kRule, star}}, {}};
        defined_[static_cast<size_t>(star)] = true;
        out->push_back({Element::kRule, star});
      } else if (e.max > e.min) {  // opt_k ::= unit opt_{k-1} | "", opt_1 ::= unit | ""
        int previous = -1;
        for (int k = 1; k <= e.max - e.min; ++k) {
          const int opt = fresh_rule("opt");
          std::vector<Element> first{unit};
          if (previous >= 0) first.push_back({Element::kRule, previous});
          bodies_[static_cast<size_t>(opt)] = {first, {}};
          defined_[static_cast<size_t>(opt)] = true;
          previous = opt;
          num_elements_ += 3;
        }
        out->push_back({Element::kRule, previous});
      }
      num_elements_ += static_cast<size_t>(e.min);
      if (num_elements_ > kMaxGrammarElements) {
        return invalid_argument("grammar larger than " + std::to_string(kMaxGrammarElements) + " elements");
      }
      return Status::ok();
    }
  }
  return Status::ok();
}

Result<Grammar> GrammarBuilder::build(int root) {
  const size_t n = names_.size();
  for (size_t r = 0; r < n; ++r) {
    if (!defined_[r]) return invalid_argument("rule '" + names_[r] + "' is used but never defined");
  }
  // Nullable rules (can match the empty string), to a fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& elements : bodies_[r]) {
        const bool all = std::all_of(elements.begin(), elements.end(), [&](const Element& e) {
          return e.kind == Element::kRule && nullable[static_cast<size_t>(e.arg)];
        });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a cycle in "r can begin with s".
  std::vector<std::vector<int>> begins(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& elements : bodies_[r]) {
      for (const Element& e : elements) {
        if (e.kind != Element::kRule) break;
        begins[r].push_back(e.arg);
        if (!nullable[static_cast<size_t>(e.arg)]) break;
      }
    }
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::string cyclic;
  std::function<bool(int)> visit = [&](int r) {
    color[static_cast<size_t>(r)] = 1;
    for (int s : begins[static_cast<size_t>(r)]) {
      if (color[static_cast<size_t>(s)] == 1) {
        cyclic = names_[static_cast<size_t>(s)];
        return true;
      }
      if (color[static_cast<size_t>(s)] == 0 && visit(s)) return true;
    }
    color[static_cast<size_t>(r)] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    if (color[r] == 0 && visit(static_cast<int>(r))) {
      return invalid_argument("rule '" + cyclic +
                              "' is left-recursive (it can reach itself without consuming input, e.g. a repetition "
                              "of something that may be empty)");
    }
  }
  Grammar g;
  g.byte_sets = byte_sets_;
  g.rule_names = names_;
  g.root = root;
  g.alternatives.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& elements : bodies_[r]) {
      g.alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), elements.begin(), elements.end());
      g.elements.push_back({Element::kEnd, 0});
    }
  }
  return g;
}

}  // namespace moert::grammar
