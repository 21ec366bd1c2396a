#include "text/grammar/automaton.h"

#include <algorithm>

namespace moert::grammar {

size_t Automaton::VectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

Automaton::Automaton(Grammar grammar) : grammar_(std::move(grammar)) {
  nodes_.push_back({-1, -1});  // node 0: the empty stack
  std::vector<int32_t> work;
  for (int32_t first : grammar_.alternatives[static_cast<size_t>(grammar_.root)]) work.push_back(intern_node(first, 0));
  std::vector<int32_t> out;
  expand(work, &out);
  intern_state(std::move(out));
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

}  // namespace moert::grammar
