#include "text/grammar/token_mask.h"

#include <algorithm>
#include <limits>

namespace moert::grammar {

void apply_token_mask(const TokenBitmask& mask, int32_t mask_vocab, float* row, int32_t vocab_size) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const int32_t covered = std::min(mask_vocab, vocab_size);
  const int32_t full_words = covered / 64;
  for (int32_t w = 0; w < full_words; ++w) {
    const uint64_t bits = mask[static_cast<size_t>(w)];
    if (bits == ~uint64_t{0}) continue;
    float* base = row + static_cast<size_t>(w) * 64;
    if (bits == 0) {
      std::fill(base, base + 64, kMasked);
      continue;
    }
    for (int i = 0; i < 64; ++i) {
      if (!((bits >> i) & 1u)) base[i] = kMasked;
    }
  }
  for (int32_t id = full_words * 64; id < vocab_size; ++id) {
    if (id >= covered || !mask_allows(mask, id)) row[id] = kMasked;
  }
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int32_t>(token_bytes.size())), token_bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)] ||
           (token_bytes[static_cast<size_t>(a)] == token_bytes[static_cast<size_t>(b)] && a < b);
  });
  // Sorted keys make the trie in preorder: each key shares its longest common prefix with the
  // previous one; the nodes past it close (their subtrees end here) and new nodes follow.
  bytes_.push_back(0);
  depths_.push_back(0);
  subtree_ends_.push_back(0);
  std::vector<int32_t> path{0};  // node of each depth along the current key
  std::vector<std::vector<int32_t>> ids_at;  // per node
  ids_at.emplace_back();
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& key = token_bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (previous != nullptr) {
      while (common < key.size() && common < previous->size() && key[common] == (*previous)[common]) ++common;
    }
    while (path.size() > common + 1) {
      subtree_ends_[static_cast<size_t>(path.back())] = static_cast<int32_t>(bytes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < key.size(); ++d) {
      path.push_back(static_cast<int32_t>(bytes_.size()));
      bytes_.push_back(static_cast<uint8_t>(key[d]));
      depths_.push_back(static_cast<int32_t>(d + 1));
      subtree_ends_.push_back(0);
      ids_at.emplace_back();
    }
    ids_at[static_cast<size_t>(path.back())].push_back(id);
    previous = &key;
  }
  for (int32_t node : path) subtree_ends_[static_cast<size_t>(node)] = static_cast<int32_t>(bytes_.size());
  token_starts_.push_back(0);
  for (const auto& ids : ids_at) {
    token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
    token_starts_.push_back(static_cast<int32_t>(token_ids_.size()));
  }
}

TokenBitmask TokenTrie::walk(Automaton& automaton, int32_t state) const {
  TokenBitmask mask((static_cast<size_t>(vocab_size_) + 63) / 64, 0);
  std::vector<int32_t> state_at(1, state);  // [depth] the state after the node's bytes
  const int32_t n = static_cast<int32_t>(bytes_.size());
  for (int32_t node = 1; node < n;) {
    const size_t depth = static_cast<size_t>(depths_[static_cast<size_t>(node)]);
    const int32_t parent_state = state_at[depth - 1];
    const uint8_t byte = bytes_[static_cast<size_t>(node)];
    const int32_t next = automaton.next_bytes(parent_state).test(byte) ? automaton.advance(parent_state, byte) : Automaton::kDead;
    if (next == Automaton::kDead) {
      node = subtree_ends_[static_cast<size_t>(node)];
      continue;
    }
    if (state_at.size() <= depth) state_at.resize(depth + 1);
    state_at[depth] = next;
    for (int32_t t = token_starts_[static_cast<size_t>(node)]; t < token_starts_[static_cast<size_t>(node) + 1]; ++t) {
      const int32_t id = token_ids_[static_cast<size_t>(t)];
      mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    ++node;
  }
  return mask;
}

GrammarMasks::GrammarMasks(Grammar grammar, std::shared_ptr<const TokenTrie> trie, size_t max_cached_masks)
    : automaton_(std::move(grammar)), trie_(std::move(trie)), max_cached_masks_(std::max<size_t>(1, max_cached_masks)) {}

const TokenBitmask& GrammarMasks::mask(int32_t state) {
  auto it = masks_.find(state);
  if (it != masks_.end()) return it->second;
  if (masks_.size() >= max_cached_masks_) masks_.clear();
  ++num_walks_;
  return masks_.emplace(state, trie_->walk(automaton_, state)).first->second;
}

int32_t GrammarMasks::advance_token(int32_t state, int32_t id) {
  if (id < 0 || id >= trie_->vocab_size()) return Automaton::kDead;
  const std::string& bytes = trie_->token_bytes(id);
  if (bytes.empty()) return Automaton::kDead;
  return automaton_.advance_bytes(state, bytes);
}

}  // namespace moert::grammar
