#include "text/grammar/automaton.h"

#include <algorithm>

namespace moert::grammar {
namespace {

constexpr int32_t kMinRestCap = 1 << 30;
// Passes of compute_min_rest: each raises the bounds one level of rule nesting toward the
// shortest match; stopping early leaves smaller, still valid, bounds (fewer shared classes).
constexpr int kMaxMinRestPasses = 32;
// Descriptions (horizon_key) are interned tuples {tag, ...}; ids >= 0, or one of the two ends.
constexpr int32_t kDescEnd = -1;     // the run (or the stack) ends here
constexpr int32_t kDescBeyond = -2;  // no string within the horizon gets here
constexpr int32_t kTagBytes = 0, kTagRule = 1, kTagAlternatives = 2, kTagStack = 3, kTagNamedRule = 4;
// Referenced rules are described recursively; each level consumes budget or goes one rule deeper
// along a left derivation, which exact bounds keep acyclic. The cap guards inexact bounds.
constexpr int kMaxDescDepth = 4096;

uint64_t memo_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

int32_t saturating_add(int32_t a, int32_t b) { return std::min<int64_t>(int64_t{a} + b, kMinRestCap); }

}  // namespace

size_t IntVectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

Automaton::Automaton(Grammar grammar) : grammar_(std::move(grammar)) {
  compute_min_rest();
  nodes_.push_back({-1, -1});  // node 0: the empty stack
  std::vector<int32_t> work;
  for (int32_t first : grammar_.alternatives[static_cast<size_t>(grammar_.root)]) work.push_back(intern_node(first, 0));
  std::vector<int32_t> out;
  expand(work, &out);
  if (intern_state(std::move(out)) == kDead) {
    // A grammar without any string (the regex `[]`): state 0 exists, has no stacks, accepts
    // nothing and continues with no byte, so initial() is always a valid state.
    states_.emplace_back();
    accepting_.push_back(false);
    next_bytes_.emplace_back();
    transitions_.resize(256, -2);
  }
}

int32_t Automaton::intern_node(int32_t element, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(element)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({element, parent});
  return it->second;
}

void Automaton::expand(std::vector<int32_t>& work, std::vector<int32_t>* out) {
  visited_.clear();
  while (!work.empty()) {
    const int32_t n = work.back();
    work.pop_back();
    if (!visited_.insert(n).second) continue;
    if (n == 0) {
      out->push_back(0);
      continue;
    }
    const Node node = nodes_[static_cast<size_t>(n)];
    const Element& e = grammar_.elements[static_cast<size_t>(node.element)];
    if (e.kind == Element::kBytes) {
      out->push_back(n);
    } else if (e.kind == Element::kEnd) {
      work.push_back(node.parent);
    } else {
      // A reference in tail position returns straight to our parent (no frame for an empty rest).
      const int32_t next = node.element + 1;
      const int32_t parent = grammar_.elements[static_cast<size_t>(next)].kind == Element::kEnd
                                 ? node.parent
                                 : intern_node(next, node.parent);
      for (int32_t first : grammar_.alternatives[static_cast<size_t>(e.arg)]) work.push_back(intern_node(first, parent));
    }
  }
}

int32_t Automaton::intern_state(std::vector<int32_t> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (nodes.empty()) return kDead;
  if (auto it = state_ids_.find(nodes); it != state_ids_.end()) return it->second;
  if (states_.size() >= kMaxStates) return kDead;
  const int32_t id = static_cast<int32_t>(states_.size());
  ByteSet next;
  bool accepting = false;
  for (int32_t n : nodes) {
    if (n == 0) {
      accepting = true;
    } else {
      next |= grammar_.byte_sets[static_cast<size_t>(grammar_.elements[static_cast<size_t>(nodes_[static_cast<size_t>(n)].element)].arg)];
    }
  }
  state_ids_.emplace(nodes, id);
  states_.push_back(std::move(nodes));
  accepting_.push_back(accepting);
  next_bytes_.push_back(next);
  transitions_.resize(states_.size() * 256, -2);
  return id;
}

int32_t Automaton::advance(int32_t state, uint8_t byte) {
  const size_t slot = static_cast<size_t>(state) * 256 + byte;
  if (transitions_[slot] != -2) return transitions_[slot];
  int32_t next = kDead;
  if (next_bytes_[static_cast<size_t>(state)].test(byte)) {
    work_.clear();
    for (int32_t n : states_[static_cast<size_t>(state)]) {
      if (n == 0) continue;
      const Node node = nodes_[static_cast<size_t>(n)];
      const Element& e = grammar_.elements[static_cast<size_t>(node.element)];
      if (grammar_.byte_sets[static_cast<size_t>(e.arg)].test(byte)) work_.push_back(intern_node(node.element + 1, node.parent));
    }
    out_.clear();
    expand(work_, &out_);
    next = intern_state(out_);
  }
  transitions_[static_cast<size_t>(state) * 256 + byte] = next;  // intern_state may have grown the table
  return next;
}

int32_t Automaton::advance_bytes(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    state = advance(state, static_cast<uint8_t>(c));
    if (state == kDead) return kDead;
  }
  return state;
}

bool Automaton::matches(std::string_view text) {
  const int32_t state = advance_bytes(initial(), text);
  return state != kDead && accepting(state);
}

void Automaton::compute_min_rest() {
  // From 0 (a valid bound) each pass recomputes every rule's bound from the previous pass's: the
  // iterates only rise and never pass the true shortest match, so every pass's values are bounds.
  const std::vector<Element>& elements = grammar_.elements;
  std::vector<int32_t> rule_min(grammar_.alternatives.size(), 0);
  min_rest_.assign(elements.size() + 1, 0);
  for (int pass = 0; pass < kMaxMinRestPasses; ++pass) {
    for (size_t i = elements.size(); i-- > 0;) {
      const Element& e = elements[i];
      min_rest_[i] = e.kind == Element::kEnd
                         ? 0
                         : saturating_add(e.kind == Element::kBytes ? 1 : rule_min[static_cast<size_t>(e.arg)], min_rest_[i + 1]);
    }
    bool changed = false;
    for (size_t r = 0; r < rule_min.size(); ++r) {
      int32_t m = kMinRestCap;  // no alternative: never completes
      for (int32_t first : grammar_.alternatives[r]) m = std::min(m, min_rest_[static_cast<size_t>(first)]);
      changed |= m != rule_min[r];
      rule_min[r] = m;
    }
    if (!changed) break;
  }
}

int32_t Automaton::intern_desc(const std::vector<int32_t>& tuple) {
  return desc_ids_.try_emplace(tuple, static_cast<int32_t>(desc_ids_.size())).first->second;
}

int32_t Automaton::seq_desc(int32_t element, int32_t budget, int depth) {
  // The run element, element + 1, ... up to kEnd, each entered with the budget left after the
  // bounds of those before it; it stops at kEnd (kDescEnd), at a negative budget (kDescBeyond:
  // no string within the horizon gets there) or at a run described before. Built back to front,
  // iteratively along the run (runs can be long), recursively only into referenced rules.
  std::vector<std::pair<int32_t, int32_t>> run;
  int32_t tail = kDescBeyond;
  for (int32_t e = element, b = budget;; ++e) {
    if (b < 0) break;
    const Element& el = grammar_.elements[static_cast<size_t>(e)];
    if (el.kind == Element::kEnd) {
      tail = kDescEnd;
      break;
    }
    if (auto it = seq_memo_.find(memo_key(e, b)); it != seq_memo_.end()) {
      tail = it->second;
      break;
    }
    run.emplace_back(e, b);
    b -= min_rest_[static_cast<size_t>(e)] - min_rest_[static_cast<size_t>(e) + 1];
  }
  for (size_t i = run.size(); i-- > 0;) {
    const auto [e, b] = run[i];
    const Element& el = grammar_.elements[static_cast<size_t>(e)];
    const int32_t head = el.kind == Element::kBytes ? el.arg : rule_desc(el.arg, b, depth + 1);
    tail = intern_desc({el.kind == Element::kBytes ? kTagBytes : kTagRule, head, tail});
    seq_memo_.emplace(memo_key(e, b), tail);
  }
  return tail;
}

int32_t Automaton::rule_desc(int32_t rule, int32_t budget, int depth) {
  if (auto it = rule_memo_.find(memo_key(rule, budget)); it != rule_memo_.end()) return it->second;
  std::vector<int32_t> tuple{kTagAlternatives};
  if (depth > kMaxDescDepth) {
    // Past the depth (only with bounds below the shortest match, see compute_min_rest) the rule
    // is named, not described: equal only to itself at this budget, still exact.
    tuple = {kTagNamedRule, rule, budget};
  } else {
    for (int32_t first : grammar_.alternatives[static_cast<size_t>(rule)]) tuple.push_back(seq_desc(first, budget, depth));
  }
  const int32_t id = intern_desc(tuple);
  rule_memo_.emplace(memo_key(rule, budget), id);
  return id;
}

void Automaton::horizon_key(int32_t state, int32_t horizon, std::vector<int32_t>* key) {
  // A stack is described level by level from the top: the level's element run at the budget left
  // (seq_desc), then the level below at that budget less the run's bound, until the empty stack
  // (kDescEnd) or a budget below 0 (kDescBeyond). Levels are described by what they contain, not
  // by position: two counts of a repetition more than the horizon from its bound have equal
  // descriptions. The key is the sorted, deduplicated descriptions of the state's stacks.
  key->clear();
  for (int32_t n : states_[static_cast<size_t>(state)]) {
    if (n == 0) continue;
    std::vector<std::pair<int32_t, int32_t>> levels;
    int32_t tail = kDescEnd;
    for (int32_t m = n, b = horizon; m != 0; m = nodes_[static_cast<size_t>(m)].parent) {
      if (b < 0) {
        tail = kDescBeyond;
        break;
      }
      const int32_t e = nodes_[static_cast<size_t>(m)].element;
      levels.emplace_back(e, b);
      b -= std::min(min_rest_[static_cast<size_t>(e)], horizon + 1);
    }
    for (size_t i = levels.size(); i-- > 0;) {
      tail = intern_desc({kTagStack, seq_desc(levels[i].first, levels[i].second, 0), tail});
    }
    key->push_back(tail);
  }
  std::sort(key->begin(), key->end());
  key->erase(std::unique(key->begin(), key->end()), key->end());
}

}  // namespace moert::grammar
