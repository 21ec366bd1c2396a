// Token masks: which vocabulary ids may come next in an automaton state
// (docs/structured-output.md §Token masks).
//
// TokenTrie holds every allowed token's bytes as a prefix tree stored in preorder, each node
// knowing where its subtree ends. A state's mask is one walk of that tree: a node is entered with
// the state after its bytes (Automaton::advance, memoized per (state, byte)), and a whole subtree
// is skipped the moment a byte is rejected.
//
// Masks are cached per horizon class (automaton.h), not per state: states with equal keys (no
// token's bytes can tell them apart) share one mask, so the states of a counted repetition (each
// count of a string's length bound is its own state) share it while the bound is more than the
// longest token away. Like xgrammar's adaptive token mask cache, a mask is split by token length: the short tokens
// (<= kShortTokenBytes, 98.7% of Qwen3's) are decided by the class at that short horizon, which
// many more states share (all but the last 16 counts of a long string); only the long ones are
// walked per class at the longest token's horizon, a walk of 7% of the trie's nodes. A decode
// step costs a hash lookup plus applying the bits; a class never seen before pays for a walk.
//
// Shape legend: V vocabulary size (ids 0..V-1). Masks are [ceil(V / 64)] uint64 words, bit
// (id % 64) of word (id / 64) set when id is allowed.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar/automaton.h"

namespace moert::grammar {

using TokenBitmask = std::vector<uint64_t>;

inline bool mask_allows(const TokenBitmask& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1u;
}

// Sets row[id] = -inf for every id in [0, vocab_size) the mask does not allow (ids at or past the
// mask's vocabulary `mask_vocab` included). Whole words of allowed ids are skipped.
void apply_token_mask(const TokenBitmask& mask, int32_t mask_vocab, float* row, int32_t vocab_size);

class TokenTrie {
 public:
  // token_bytes[id]: the bytes the token decodes to; an empty string marks an id that is never
  // allowed by a grammar (special tokens, ids without a token).
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  size_t num_nodes() const { return bytes_.size(); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }
  // The longest token's bytes (0 for a vocabulary without bytes).
  int32_t max_token_bytes() const { return subtree_max_depths_[0]; }

  // The mask of `state` restricted to the tokens of more than `min_bytes` and at most `max_bytes`
  // bytes (a fresh walk, no cache; the defaults give the whole mask). Only subtrees holding such
  // tokens are entered.
  TokenBitmask walk(Automaton& automaton, int32_t state, int32_t min_bytes = 0,
                    int32_t max_bytes = std::numeric_limits<int32_t>::max()) const;

 private:
  int32_t vocab_size_ = 0;
  std::vector<std::string> token_bytes_;
  // Preorder nodes (node 0 is the root, the empty prefix).
  std::vector<uint8_t> bytes_;          // the byte on the edge into the node
  std::vector<int32_t> depths_;         // root 0
  std::vector<int32_t> subtree_ends_;   // one past the node's last descendant
  std::vector<int32_t> subtree_max_depths_;  // the deepest node of the subtree (leaves end tokens)
  std::vector<int32_t> token_starts_;   // [num_nodes + 1] into token_ids_
  std::vector<int32_t> token_ids_;      // ids whose bytes end at each node
};

// One grammar's automaton with its mask cache (per horizon class) over one vocabulary.
class GrammarMasks {
 public:
  // At most `max_cached_masks` (>= 2) masks are kept, short-token and whole ones together (each
  // ceil(V / 64) words: 18.5 KiB at the Qwen3 vocabulary, so the default bounds a grammar's cache
  // near 74 MiB); when full, the cache is emptied before the next walk
  // (docs/structured-output.md §Token masks).
  static constexpr size_t kDefaultMaxCachedMasks = 4096;
  // Tokens of at most this many bytes are decided by the class at this horizon.
  static constexpr int32_t kShortTokenBytes = 16;
  GrammarMasks(Grammar grammar, std::shared_ptr<const TokenTrie> trie, size_t max_cached_masks = kDefaultMaxCachedMasks);

  Automaton& automaton() { return automaton_; }
  const TokenTrie& trie() const { return *trie_; }
  // The tokens whose every byte the grammar accepts from `state` (EOS is the caller's: allowed
  // only where automaton().accepting(state)). Cached per state; the reference stays valid until
  // the next call.
  const TokenBitmask& mask(int32_t state);
  // The state after `id`'s bytes, kDead when the grammar rejects them.
  int32_t advance_token(int32_t state, int32_t id);
  size_t num_cached_masks() const { return masks_.size() + short_masks_.size(); }
  // Walks of the short tokens (most of the trie; a class's long tokens are walked on every miss).
  size_t num_mask_walks() const { return num_walks_; }

 private:
  // Horizon classes of the automaton's states, interned to small ids on first use.
  struct Classes {
    int32_t horizon;
    std::vector<int32_t> of_state;  // [state] class id, -1 not computed yet
    std::unordered_map<std::vector<int32_t>, int32_t, IntVectorHash> ids;
  };
  int32_t class_of(Classes& classes, int32_t state);

  Automaton automaton_;
  std::shared_ptr<const TokenTrie> trie_;
  Classes short_classes_, whole_classes_;  // at kShortTokenBytes, at the longest token
  std::unordered_map<int32_t, TokenBitmask> short_masks_;  // by short class: tokens <= kShortTokenBytes
  std::unordered_map<int32_t, TokenBitmask> masks_;        // by whole class: every token
  size_t max_cached_masks_;
  size_t num_walks_ = 0;
  std::vector<int32_t> key_;
};

}  // namespace moert::grammar
