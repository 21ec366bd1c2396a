// Context-free grammars over bytes (docs/structured-output.md): the one representation every
// constraint compiles to (JSON schema, json_object, regex, guided_choice, GBNF).
//
// Frontends build `Expr` trees and hand them to a GrammarBuilder, which lowers them into a flat
// `Grammar`: every rule is a list of alternatives, every alternative a run of elements (a byte
// set or a rule reference) ended by kEnd in one `elements` array. The pushdown automaton
// (automaton.h) runs directly over those element indices.
//
// Invariants of a built Grammar: every referenced rule has at least one alternative; no rule is
// left-recursive (no rule can reach itself without consuming a byte), so expanding a stack always
// terminates; the root is rule `root`.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace moert::grammar {

using ByteSet = std::bitset<256>;

// A grammar expression. kSeq with no items is the empty string; kAlt with no items matches
// nothing. kRepeat: items[0] between min and max times (max < 0: unbounded).
struct Expr {
  enum class Kind { kBytes, kSeq, kAlt, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  ByteSet bytes;
  std::vector<Expr> items;
  int rule = -1;
  int min = 0;
  int max = -1;
};

Expr bytes_expr(const ByteSet& set);
Expr byte_expr(uint8_t byte);
Expr literal(std::string_view text);  // the bytes of text, in order
Expr seq(std::vector<Expr> items);
Expr alt(std::vector<Expr> items);
Expr ref(int rule);
Expr repeat(Expr item, int min, int max);
Expr optional(Expr item);
// The UTF-8 encodings of the code points in `ranges` (inclusive [first, last] pairs, surrogates
// D800-DFFF and anything past 10FFFF left out): each code point as its exact byte sequence.
Expr codepoint_ranges(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
// The UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);

struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = kEnd;
  int32_t arg = 0;  // kBytes: index into byte_sets; kRule: the rule id
};

struct Grammar {
  std::vector<Element> elements;                     // every alternative, each ending with kEnd
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<int32_t>> alternatives;    // [rule] -> the first element of each alternative
  std::vector<std::string> rule_names;
  int32_t root = 0;
};

// Limits that keep a hostile grammar from exhausting memory (bounded repetitions expand).
inline constexpr size_t kMaxGrammarElements = 2'000'000;

class GrammarBuilder {
 public:
  // The id of rule `name`, declaring it on first use (definitions may come later).
  int rule(const std::string& name);
  // A fresh rule named after `hint` (hint, hint-1, ...).
  int fresh_rule(const std::string& hint);
  bool is_defined(int rule) const { return defined_[static_cast<size_t>(rule)]; }
  // Defines `rule` as `body` (an error if defined before).
  Status define(int rule, const Expr& body);
  // The grammar rooted at `root`. Errors: a rule referenced but never defined, a left-recursive
  // rule (named), or a grammar past kMaxGrammarElements.
  Result<Grammar> build(int root);

 private:
  Result<int32_t> lower_alternative(const Expr& e, std::vector<Element>* out);
  Status lower_into(const Expr& e, std::vector<Element>* out);
  // A rule whose body is e (or e's rule when e is a reference).
  Result<int32_t> rule_for(const Expr& e, const std::string& hint);

  std::vector<std::string> names_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<bool> defined_;
  std::vector<std::vector<std::vector<Element>>> bodies_;  // [rule][alternative] elements (no kEnd)
  std::vector<ByteSet> byte_sets_;
  size_t num_elements_ = 0;
};

}  // namespace moert::grammar
