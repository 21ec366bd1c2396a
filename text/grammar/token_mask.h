// Token masks: which vocabulary ids may come next in an automaton state
// (docs/structured-output.md §Token masks).
//
// TokenTrie holds every allowed token's bytes as a prefix tree stored in preorder, each node
// knowing where its subtree ends. A state's mask is one walk of that tree: a node is entered with
// the state after its bytes (Automaton::advance, memoized per (state, byte)), and a whole subtree
// is skipped the moment a byte is rejected. Walks are cached per automaton state (the adaptive
// cache: a state seen before costs one hash lookup), so a decode step costs the lookup plus
// applying the bits; only a state never seen before pays for a walk.
//
// Shape legend: V vocabulary size (ids 0..V-1). Masks are [ceil(V / 64)] uint64 words, bit
// (id % 64) of word (id / 64) set when id is allowed.
#pragma once

#include <cstdint>
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

  // The mask of `state` (a fresh walk, no cache).
  TokenBitmask walk(Automaton& automaton, int32_t state) const;

 private:
  int32_t vocab_size_ = 0;
  std::vector<std::string> token_bytes_;
  // Preorder nodes (node 0 is the root, the empty prefix).
  std::vector<uint8_t> bytes_;          // the byte on the edge into the node
  std::vector<int32_t> depths_;         // root 0
  std::vector<int32_t> subtree_ends_;   // one past the node's last descendant
  std::vector<int32_t> token_starts_;   // [num_nodes + 1] into token_ids_
  std::vector<int32_t> token_ids_;      // ids whose bytes end at each node
};

// One grammar's automaton with its per-state mask cache over one vocabulary.
class GrammarMasks {
 public:
  // At most `max_cached_masks` masks are kept (each ceil(V / 64) words: 18.5 KiB at the Qwen3
  // vocabulary, so the default bounds a grammar's cache near 74 MiB); when full, the cache is
  // emptied before the next walk (docs/structured-output.md §Token masks).
  static constexpr size_t kDefaultMaxCachedMasks = 4096;
  GrammarMasks(Grammar grammar, std::shared_ptr<const TokenTrie> trie, size_t max_cached_masks = kDefaultMaxCachedMasks);

  Automaton& automaton() { return automaton_; }
  const TokenTrie& trie() const { return *trie_; }
  // The tokens whose every byte the grammar accepts from `state` (EOS is the caller's: allowed
  // only where automaton().accepting(state)). Cached per state; the reference stays valid until
  // the next call.
  const TokenBitmask& mask(int32_t state);
  // The state after `id`'s bytes, kDead when the grammar rejects them.
  int32_t advance_token(int32_t state, int32_t id);
  size_t num_cached_masks() const { return masks_.size(); }
  size_t num_mask_walks() const { return num_walks_; }

 private:
  Automaton automaton_;
  std::shared_ptr<const TokenTrie> trie_;
  std::unordered_map<int32_t, TokenBitmask> masks_;
  size_t max_cached_masks_;
  size_t num_walks_ = 0;
};

}  // namespace moert::grammar
