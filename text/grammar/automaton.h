// The pushdown automaton of a Grammar over bytes, determinized lazily
// (docs/structured-output.md §Automaton).
//
// A *stack* is a path of interned nodes (element index, parent node): the top node's element is
// the next element to match (always a byte set once expanded), each parent holds the position to
// resume after the rule below it returns. Node 0 is the empty stack: the root rule has matched.
// A *state* is the sorted set of expanded stacks reachable after the bytes seen so far
// (nondeterminism of alternatives is kept as several stacks, like an Earley/GLR frontier without
// left recursion). States and stacks are hash-consed, so equal configurations have equal ids and
// `advance` memoizes (state, byte) -> state: after warm-up a byte costs one table lookup.
//
// Horizon classes (docs/structured-output.md §Token masks): which byte strings of at most h bytes
// a state accepts depends only on what h bytes can reach. With a lower bound per element on the
// bytes its rest needs (`min_rest`), a stack is described level by level with the budget left,
// each level by its elements and each referenced rule by its alternatives, until the budget runs
// out; descriptions are hash-consed per (element or rule, budget), so they name content, not
// position. The states inside a counted repetition (a string with minLength or maxLength 400 has
// one state per count) thus fall into one class while the bound is more than h bytes away.
//
// Not thread-safe (the tables grow on use); each engine owns its automata.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/grammar/grammar.h"

namespace moert::grammar {

struct IntVectorHash {
  size_t operator()(const std::vector<int32_t>& v) const;
};

class Automaton {
 public:
  static constexpr int32_t kDead = -1;
  // The most states one automaton may create; past it advance() reports kDead for new states
  // (a grammar that ambiguous is refused by the compilers' probes first).
  static constexpr size_t kMaxStates = 1'000'000;

  explicit Automaton(Grammar grammar);

  int32_t initial() const { return 0; }
  // The state after `byte` in `state`, kDead when no stack accepts it. `state` must not be kDead.
  int32_t advance(int32_t state, uint8_t byte);
  // advance over every byte of `bytes` (kDead as soon as one is rejected).
  int32_t advance_bytes(int32_t state, std::string_view bytes);
  // The root rule has matched all bytes so far.
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)]; }
  // Some byte continues from `state`.
  bool can_continue(int32_t state) const { return next_bytes_[static_cast<size_t>(state)].any(); }
  // The bytes that continue from `state` (the union of its stacks' top byte sets).
  const ByteSet& next_bytes(int32_t state) const { return next_bytes_[static_cast<size_t>(state)]; }
  // Whether the whole of `text` is in the grammar's language.
  bool matches(std::string_view text);
  size_t num_states() const { return states_.size(); }
  const Grammar& grammar() const { return grammar_; }
  // Sets `key` to a description of `state` such that two states with equal keys (for the same
  // `horizon` >= 1) reach kDead on exactly the same non-empty byte strings of at most `horizon`
  // bytes. Accepting (the empty stack) is left out: it decides no non-empty string.
  void horizon_key(int32_t state, int32_t horizon, std::vector<int32_t>* key);

 private:
  struct Node {
    int32_t element;
    int32_t parent;
  };
  int32_t intern_node(int32_t element, int32_t parent);
  // Expands the stacks in `work` until every top is a byte set (or the empty stack), into `out`.
  void expand(std::vector<int32_t>& work, std::vector<int32_t>* out);
  int32_t intern_state(std::vector<int32_t> nodes);
  // Fills min_rest_ (lower bounds, raised a bounded number of passes toward the shortest match).
  void compute_min_rest();
  // Hash-consed descriptions for horizon_key: what the elements from `element` to their kEnd, or
  // rule `rule`, look like to strings of at most `budget` bytes; memoized per (index, budget).
  int32_t seq_desc(int32_t element, int32_t budget, int depth);
  int32_t rule_desc(int32_t rule, int32_t budget, int depth);
  int32_t intern_desc(const std::vector<int32_t>& tuple);

  Grammar grammar_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, IntVectorHash> state_ids_;
  std::vector<bool> accepting_;
  std::vector<ByteSet> next_bytes_;
  std::vector<int32_t> transitions_;  // [state * 256 + byte]; -2 not computed yet
  // [element] a lower bound on the bytes that matching the elements from here to their
  // alternative's kEnd consumes (a byte set counts 1, kEnd 0), saturating at kMinRestCap.
  std::vector<int32_t> min_rest_;
  std::unordered_map<std::vector<int32_t>, int32_t, IntVectorHash> desc_ids_;
  std::unordered_map<uint64_t, int32_t> seq_memo_, rule_memo_;  // (index, budget) -> description
  std::unordered_set<int32_t> visited_;
  std::vector<int32_t> work_, out_;
};

}  // namespace moert::grammar
