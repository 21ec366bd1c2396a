#include "text/grammar/automaton.h"

#include <algorithm>

namespace moert::grammar {
namespace {

constexpr int32_t kMinRestCap = 1 << 30;
// Passes of compute_min_rest: each raises the bounds one level of rule nesting toward the
// shortest match; stopping early leaves smaller, still valid, bounds (fewer shared classes).
constexpr int kMaxMinRestPasses = 32;
// horizon_key markers (element indices and codes are >= 0).
constexpr int32_t kKeyStackEnd = -1;
constexpr int32_t kKeyCutLevel = -2;

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

void Automaton::horizon_key(int32_t state, int32_t horizon, std::vector<int32_t>* key) const {
  // Per stack, from the top: a level whose rest can be completed within the horizon is named by
  // its element index; the first level that cannot (the bytes before it plus its min_rest exceed
  // the horizon) is the cut level: the levels below it are out of reach, and of the cut level
  // only the element values that can begin within the horizon matter, run-length coded as
  // (code, count) pairs, code = 2 * arg + (kind == kRule). A stack that ends without a cut names
  // every level. The key is the sorted, deduplicated stack descriptions.
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t n : states_[static_cast<size_t>(state)]) {
    if (n == 0) continue;
    std::vector<int32_t> desc;
    int32_t before = 0;  // lower bound on the bytes consumed before the level's element
    for (int32_t m = n; m != 0; m = nodes_[static_cast<size_t>(m)].parent) {
      int32_t e = nodes_[static_cast<size_t>(m)].element;
      const int32_t rest = min_rest_[static_cast<size_t>(e)];
      if (saturating_add(before, rest) <= horizon) {
        desc.push_back(e);
        before += rest;
        continue;
      }
      desc.push_back(kKeyCutLevel);
      const size_t runs_start = desc.size();
      // Element e + k can begin only after `before` plus the bounds of e..e+k-1: include it while
      // that is within the horizon. The level's total exceeds it, so kEnd is never reached.
      for (; before <= horizon; ++e) {
        const Element& element = grammar_.elements[static_cast<size_t>(e)];
        const int32_t code = 2 * element.arg + (element.kind == Element::kRule);
        if (desc.size() > runs_start && desc[desc.size() - 2] == code) {
          ++desc.back();
        } else {
          desc.push_back(code);
          desc.push_back(1);
        }
        before = saturating_add(before, min_rest_[static_cast<size_t>(e)] - min_rest_[static_cast<size_t>(e) + 1]);
      }
      break;
    }
    desc.push_back(kKeyStackEnd);
    stacks.push_back(std::move(desc));
  }
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  key->clear();
  for (const auto& desc : stacks) key->insert(key->end(), desc.begin(), desc.end());
}

}  // namespace moert::grammar
